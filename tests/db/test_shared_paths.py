"""Questions and answers about file paths between instances
(app/db/shared_paths.py), on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.session import session_scope
from app.db.shared_paths import SharedPathRepository

Sessions = async_sessionmaker[AsyncSession]
T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


async def ask(sessionmaker: Sessions, bot_id: int, file_id: str, now: datetime) -> str | None:
    async with session_scope(sessionmaker) as session:
        return await SharedPathRepository(session).ask(bot_id, file_id, now)


async def questions(
    sessionmaker: Sessions, bots: list[int], now: datetime
) -> list[tuple[int, str]]:
    async with session_scope(sessionmaker) as session:
        return await SharedPathRepository(session).questions(
            bots, now, asked_since=now - timedelta(seconds=5), limit=10
        )


async def answer(sessionmaker: Sessions, bot_id: int, file_id: str, now: datetime) -> None:
    async with session_scope(sessionmaker) as session:
        await SharedPathRepository(session).answer(
            bot_id, file_id, f"documents/{file_id}", now + HOUR, now
        )


async def test_a_question_is_seen_by_the_holder_and_its_answer_by_the_asker(
    sessionmaker: Sessions,
) -> None:
    assert await ask(sessionmaker, 1, "f1", T0) is None
    assert await ask(sessionmaker, 2, "f2", T0) is None
    # Only the questions about the bots an instance holds.
    assert await questions(sessionmaker, [1], T0) == [(1, "f1")]
    assert await questions(sessionmaker, [3], T0) == []
    await answer(sessionmaker, 1, "f1", T0)
    assert await questions(sessionmaker, [1, 2], T0) == [(2, "f2")]
    async with session_scope(sessionmaker) as session:
        repo = SharedPathRepository(session)
        assert await repo.answer_of(1, "f1", T0) == "documents/f1"
        assert await repo.answer_of(2, "f2", T0) is None
    # Asked again while the answer holds: at once, and no new question.
    assert await ask(sessionmaker, 1, "f1", T0 + timedelta(minutes=10)) == "documents/f1"
    assert await questions(sessionmaker, [1], T0 + timedelta(minutes=10)) == []


async def test_an_expired_answer_is_a_question_again_and_old_rows_are_pruned(
    sessionmaker: Sessions,
) -> None:
    await answer(sessionmaker, 1, "f1", T0)
    later = T0 + HOUR + timedelta(seconds=1)
    assert await ask(sessionmaker, 1, "f1", later) is None
    assert await questions(sessionmaker, [1], later) == [(1, "f1")]
    # A question nobody answered goes stale: no holder takes it up any more.
    assert await ask(sessionmaker, 2, "f2", T0) is None
    assert await questions(sessionmaker, [2], T0 + timedelta(seconds=6)) == []

    async with session_scope(sessionmaker) as session:
        pruned = await SharedPathRepository(session).prune(
            later + timedelta(minutes=1), unanswered_after=timedelta(seconds=10)
        )
    # The expired answer of f1 (asked again, then left) and the stale f2.
    assert pruned == 2
    assert await questions(sessionmaker, [1, 2], later) == []
