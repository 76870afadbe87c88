from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import ApiKey
from app.db.repositories import ApiKeyNameTaken, ApiKeyRepository
from app.db.session import session_scope

Sessions = async_sessionmaker[AsyncSession]


async def test_create_stores_only_a_hash_and_verify_accepts_the_key(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        key, plaintext = await ApiKeyRepository(session).create("ci")
    assert plaintext.startswith("tu_") and len(plaintext) >= 40
    assert key.prefix == plaintext[:8]
    assert key.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    async with session_scope(sessionmaker) as session:
        stored = (await session.execute(select(ApiKey.__table__))).one()
        assert plaintext not in {str(value) for value in stored}

        verified = await ApiKeyRepository(session).verify(plaintext)
    assert verified is not None and verified.name == "ci"
    assert verified.last_used_at is not None


@pytest.mark.parametrize("attempt", ["", "tu_", "tu_wrong", "x" * 10_000])
async def test_verify_refuses_empty_and_unknown_keys(session: AsyncSession, attempt: str) -> None:
    repo = ApiKeyRepository(session)
    await repo.create("ci")
    assert await repo.verify(attempt) is None


async def test_revoked_key_no_longer_verifies(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        _, plaintext = await ApiKeyRepository(session).create("old")
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
        await repo.create("b")
        await repo.create("a")
        with pytest.raises(ApiKeyNameTaken):
            await repo.create("b")
        # The failed create did not spoil the transaction.
        assert [k.name for k in await repo.list()] == ["a", "b"]
    with pytest.raises(ValueError):
        async with session_scope(sessionmaker) as session:
            await ApiKeyRepository(session).create("  ")


async def test_last_used_is_recorded_at_most_once_a_minute(sessionmaker: Sessions) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    async with session_scope(sessionmaker) as session:
        _, plaintext = await ApiKeyRepository(session).create("ci")
    for now, expected in [
        (t0, t0),
        (t0 + timedelta(seconds=30), t0),
        (t0 + timedelta(seconds=61), t0 + timedelta(seconds=61)),
    ]:
        async with session_scope(sessionmaker) as session:
            await ApiKeyRepository(session).verify(plaintext, now=now)
        async with session_scope(sessionmaker) as session:
            assert await session.scalar(select(ApiKey.last_used_at)) == expected
