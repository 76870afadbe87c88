"""Sessions of the web page: stored as hashes, ending at their expiry, with
their key's revocation, and swept when a new one is opened."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.models import WebSession
from app.db.session import session_scope
from app.db.web_sessions import WebSessionRepository

Sessions = async_sessionmaker[AsyncSession]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


async def test_a_session_is_stored_as_a_hash_and_names_its_key(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        key, _ = await ApiKeyRepository(session).create("page", scope="write")
        token = await WebSessionRepository(session).open(key, HOUR, now=T0)
    async with session_scope(sessionmaker) as session:
        row = (await session.scalars(select(WebSession))).one()
        assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
        assert token not in {row.token_hash, str(row.id)}
        found = await WebSessionRepository(session).key_of(token, now=T0 + HOUR / 2)
        assert found is not None and found.name == "page"
        assert await WebSessionRepository(session).key_of(token + "x", now=T0) is None
        assert await WebSessionRepository(session).key_of("", now=T0) is None


async def test_a_session_ends_at_expiry_revocation_or_close(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        keys = ApiKeyRepository(session)
        first, _ = await keys.create("first", scope="write")
        second, _ = await keys.create("second", scope="write")
        repo = WebSessionRepository(session)
        expiring = await repo.open(first, HOUR, now=T0)
        closing = await repo.open(first, 2 * HOUR, now=T0)
        revoked = await repo.open(second, 2 * HOUR, now=T0)
    async with session_scope(sessionmaker) as session:
        repo = WebSessionRepository(session)
        await repo.close(closing)
        assert await ApiKeyRepository(session).revoke("second")
        assert await repo.key_of(expiring, now=T0 + HOUR) is None
        assert await repo.key_of(closing, now=T0) is None
        assert await repo.key_of(revoked, now=T0) is None


async def test_opening_a_session_sweeps_the_expired_ones(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        key, _ = await ApiKeyRepository(session).create("page", scope="write")
        repo = WebSessionRepository(session)
        await repo.open(key, HOUR, now=T0)
        await repo.open(key, 3 * HOUR, now=T0)
        await repo.open(key, HOUR, now=T0 + 2 * HOUR)
    async with session_scope(sessionmaker) as session:
        left = await session.scalar(select(func.count()).select_from(WebSession))
    assert left == 2
