"""The access store's sign-ins: a token that names its key until signed out,
and no session row for a key that is unknown or revoked (SQLite and Postgres)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.models import WebSession
from app.db.session import session_scope
from app.store.access import AccessStore

Sessions = async_sessionmaker[AsyncSession]
HOUR = timedelta(hours=1)


async def session_rows(sessionmaker: Sessions) -> int:
    async with session_scope(sessionmaker) as session:
        return await session.scalar(select(func.count()).select_from(WebSession)) or 0


async def test_a_sign_in_names_its_key_until_signed_out(sessionmaker: Sessions) -> None:
    access = AccessStore(sessionmaker, refused_key_ttl=5.0)
    async with session_scope(sessionmaker) as session:
        _key, plaintext = await ApiKeyRepository(session).create("page", scope="write")

    signed_in = await access.sign_in(plaintext, HOUR, address="203.0.113.1")

    assert signed_in is not None and signed_in.key.name == "page"
    found = await access.signed_in_key(signed_in.token)
    assert found is not None and found.name == "page"
    await access.sign_out(signed_in.token)
    assert await access.signed_in_key(signed_in.token) is None
    assert await session_rows(sessionmaker) == 0
    await access.close()


async def test_an_unknown_or_revoked_key_opens_no_session(sessionmaker: Sessions) -> None:
    access = AccessStore(sessionmaker, refused_key_ttl=5.0)
    async with session_scope(sessionmaker) as session:
        keys = ApiKeyRepository(session)
        _key, plaintext = await keys.create("gone", scope="write")
        assert await keys.revoke("gone")

    assert await access.sign_in(plaintext, HOUR, address="203.0.113.1") is None
    assert await access.sign_in("tu_" + "b" * 43, HOUR, address="203.0.113.1") is None
    assert await session_rows(sessionmaker) == 0
    await access.close()
