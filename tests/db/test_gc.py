from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import ChunkCopy, GcEntry, SnapshotMessage
from app.db.repositories import GcRepository
from app.db.session import session_scope
from tests.db.helpers import add_chunks, count, document

Sessions = async_sessionmaker[AsyncSession]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _add(sessionmaker: Sessions, *enqueued: datetime) -> list[GcEntry]:
    async with session_scope(sessionmaker) as session:
        repo = GcRepository(session)
        entries = []
        for when in enqueued:
            doc = document()
            entries.append(
                await repo.add(
                    bot_id=doc.bot_id,
                    chat_id=doc.chat_id,
                    message_id=doc.message_id,
                    file_unique_id=doc.file_unique_id,
                    reason="failed_upload",
                    now=when,
                )
            )
        return entries


async def test_due_returns_oldest_first_up_to_the_limit_and_leases_them(
    sessionmaker: Sessions,
) -> None:
    second, first, future = await _add(
        sessionmaker, T0 - timedelta(minutes=1), T0 - timedelta(minutes=2), T0 + timedelta(hours=1)
    )
    async with session_scope(sessionmaker) as session:
        due = await GcRepository(session).due(10, T0, lease=timedelta(minutes=5))
    assert [e.id for e in due] == [first.id, second.id]
    assert all(e.next_attempt_at == T0 + timedelta(minutes=5) for e in due)

    async with session_scope(sessionmaker) as session:
        repo = GcRepository(session)
        assert await repo.due(10, T0) == []  # leased
        # Both leases end together; ties go by id.
        assert [e.id for e in await repo.due(1, T0 + timedelta(minutes=6))] == [second.id]
        assert await repo.due(0, T0) == []
        assert await repo.backlog() == 3
    assert future.id not in {e.id for e in due}


async def test_failed_counts_attempts_and_reschedules(sessionmaker: Sessions) -> None:
    (entry,) = await _add(sessionmaker, T0)
    async with session_scope(sessionmaker) as session:
        await GcRepository(session).failed(entry.id, "x" * 5000, T0 + timedelta(minutes=10))
        await GcRepository(session).failed(entry.id, "Bad Request", T0 + timedelta(minutes=20))
    async with session_scope(sessionmaker) as session:
        repo = GcRepository(session)
        assert await repo.due(10, T0 + timedelta(minutes=19)) == []
        (again,) = await repo.due(10, T0 + timedelta(minutes=20))
    assert again.attempts == 2
    assert again.last_error == "Bad Request"


async def test_done_removes_the_entry(sessionmaker: Sessions) -> None:
    a, b = await _add(sessionmaker, T0, T0)
    async with session_scope(sessionmaker) as session:
        await GcRepository(session).done(a.id)
        await GcRepository(session).done(a.id)  # twice is harmless
    async with session_scope(sessionmaker) as session:
        repo = GcRepository(session)
        assert await repo.backlog() == 1
        assert [e.id for e in await repo.due(10, T0)] == [b.id]


async def test_unknown_reason_is_refused_by_the_database(session: AsyncSession) -> None:
    doc = document()
    with pytest.raises(Exception, match=r"(?i)check"):
        await GcRepository(session).add(
            bot_id=doc.bot_id,
            chat_id=doc.chat_id,
            message_id=doc.message_id,
            file_unique_id=doc.file_unique_id,
            reason="because",  # type: ignore[arg-type]
        )


async def test_concurrent_workers_never_claim_the_same_entry(sessionmaker: Sessions) -> None:
    await _add(sessionmaker, *[T0] * 40)

    async def worker() -> list[int]:
        claimed: list[int] = []
        while True:
            async with session_scope(sessionmaker) as session:
                batch = await GcRepository(session).due(3, T0 + timedelta(seconds=1))
            if not batch:
                return claimed
            claimed.extend(e.id for e in batch)

    results = await asyncio.gather(*(worker() for _ in range(6)))
    everything = [entry_id for claimed in results for entry_id in claimed]
    assert len(everything) == len(set(everything)) == 40


async def test_a_ledgered_message_that_a_chunk_copy_or_snapshot_holds_is_never_handed_out(
    sessionmaker: Sessions,
) -> None:
    # Reconciliation can ledger a message that an instance taken for dead
    # records as a chunk copy afterwards (issue 49): deleting it would lose
    # acknowledged bytes. Postgres too: the rows come from several instances.
    (chunk,) = await add_chunks(sessionmaker, [100])
    free, held_by_chunk, held_by_snapshot = await _add(sessionmaker, T0, T0, T0)
    async with session_scope(sessionmaker) as session:
        await session.execute(
            update(GcEntry)
            .where(GcEntry.id == held_by_chunk.id)
            .values(chat_id=chunk.chat_id, message_id=chunk.message_id)
        )
        session.add(
            SnapshotMessage(
                taken_at=T0,
                kind="piece",
                bot_id=held_by_snapshot.bot_id,
                chat_id=held_by_snapshot.chat_id,
                message_id=held_by_snapshot.message_id,
                file_unique_id=held_by_snapshot.file_unique_id,
            )
        )
    async with session_scope(sessionmaker) as session:
        repo = GcRepository(session)
        due = await repo.due(10, T0)
        assert [e.id for e in due] == [free.id]
        assert repo.held_dropped == 2
    async with session_scope(sessionmaker) as session:
        # The held entries are gone from the ledger; their rows are intact.
        assert await GcRepository(session).backlog() == 1
        assert await count(session, ChunkCopy) == 1
        assert await count(session, SnapshotMessage) == 1
