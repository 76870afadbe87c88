from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import KEY_SCOPES, ApiKey, KeyScope
from app.db.repositories import ApiKeyNameTaken, ApiKeyRepository
from app.db.session import session_scope

Sessions = async_sessionmaker[AsyncSession]


async def test_create_stores_only_a_hash_and_verify_accepts_the_key(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        key, plaintext = await ApiKeyRepository(session).create("ci", scope="write")
    assert plaintext.startswith("tu_") and len(plaintext) >= 40
    # The prefix shown by `keys list` holds no character of the secret.
    assert key.prefix == "tu_"
    assert key.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    async with session_scope(sessionmaker) as session:
        stored = (await session.execute(select(ApiKey.__table__))).one()
        assert plaintext not in {str(value) for value in stored}

        verified = await ApiKeyRepository(session).verify(plaintext)
    assert verified is not None and verified.name == "ci"
    assert verified.scope == "write"
    assert verified.last_used_at is not None


@pytest.mark.parametrize("attempt", ["", "tu_", "tu_wrong", "x" * 10_000])
async def test_verify_refuses_empty_and_unknown_keys(session: AsyncSession, attempt: str) -> None:
    repo = ApiKeyRepository(session)
    await repo.create("ci", scope="write")
    assert await repo.verify(attempt) is None


async def test_revoked_key_no_longer_verifies(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        _, plaintext = await ApiKeyRepository(session).create("old", scope="write")
    async with session_scope(sessionmaker) as session:
        repo = ApiKeyRepository(session)
        assert await repo.revoke("old")
        assert not await repo.revoke("old")  # already revoked
        assert not await repo.revoke("never-existed")
    async with session_scope(sessionmaker) as session:
        repo = ApiKeyRepository(session)
        assert await repo.verify(plaintext) is None
        (listed,) = await repo.list()
    assert listed.name == "old" and listed.revoked


async def test_names_are_unique_and_the_list_is_sorted(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        repo = ApiKeyRepository(session)
        await repo.create("b", scope="write")
        await repo.create("a", scope="write")
        with pytest.raises(ApiKeyNameTaken):
            await repo.create("b", scope="write")
        # The failed create did not spoil the transaction.
        assert [k.name for k in await repo.list()] == ["a", "b"]
    with pytest.raises(ValueError):
        async with session_scope(sessionmaker) as session:
            await ApiKeyRepository(session).create("  ", scope="write")


async def test_last_used_is_recorded_at_most_once_a_minute(sessionmaker: Sessions) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    async with session_scope(sessionmaker) as session:
        _, plaintext = await ApiKeyRepository(session).create("ci", scope="write")
    for now, expected in [
        (t0, t0),
        (t0 + timedelta(seconds=30), t0),
        (t0 + timedelta(seconds=61), t0 + timedelta(seconds=61)),
    ]:
        async with session_scope(sessionmaker) as session:
            await ApiKeyRepository(session).verify(plaintext, now=now)
        async with session_scope(sessionmaker) as session:
            assert await session.scalar(select(ApiKey.last_used_at)) == expected


@pytest.mark.parametrize("scope", KEY_SCOPES)
async def test_each_scope_includes_the_narrower_ones(
    sessionmaker: Sessions, scope: KeyScope
) -> None:
    async with session_scope(sessionmaker) as session:
        _, plaintext = await ApiKeyRepository(session).create(f"k-{scope}", scope=scope)
    async with session_scope(sessionmaker) as session:
        key = await ApiKeyRepository(session).verify(plaintext)
    assert key is not None and key.scope == scope
    allowed = {wanted for wanted in KEY_SCOPES if key.allows(wanted)}
    assert (
        allowed
        == {
            "read": {"read"},
            "write": {"read", "write"},
            "admin": {"read", "write", "admin"},
        }[scope]
    )


async def test_an_unknown_scope_is_refused_by_the_code_and_by_the_database(
    sessionmaker: Sessions,
) -> None:
    async with session_scope(sessionmaker) as session:
        with pytest.raises(ValueError, match="unknown scope 'root'"):
            await ApiKeyRepository(session).create("x", scope="root")  # type: ignore[arg-type]
    with pytest.raises(IntegrityError):
        async with session_scope(sessionmaker) as session:
            session.add(ApiKey(name="y", prefix="tu_", key_hash="0" * 64, scope="root"))
    async with session_scope(sessionmaker) as session:
        assert await ApiKeyRepository(session).list() == []
