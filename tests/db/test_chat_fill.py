"""Each storage chat's fill in the database (app/db/chat_fill.py): raised,
never lowered, so that instances that saw different posts agree."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chat_fill import ChatFillRepository
from app.db.session import session_scope


async def test_a_chats_count_only_rises_whoever_raises_it(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    async with session_scope(sessionmaker) as session:
        await ChatFillRepository(session).raise_to({-1001: 10, -1002: 7})
    # Another instance, which saw fewer posts in one chat and more in the other.
    async with session_scope(sessionmaker) as session:
        await ChatFillRepository(session).raise_to({-1001: 4, -1002: 9, -1003: 1})
    async with session_scope(sessionmaker) as session:
        await ChatFillRepository(session).raise_to({})

    async with session_scope(sessionmaker) as session:
        assert await ChatFillRepository(session).all() == {-1001: 10, -1002: 9, -1003: 1}
