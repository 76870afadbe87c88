"""A chunk's copies after they were stored (app/db/copies.py): the counts of
intact copies and the lost mark follow every change, on both backends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.copies import CopyRepository, ShortChunk
from app.db.models import Chunk, ChunkCopy, GcEntry
from app.db.repositories import ChunkRepository, ObjectRepository
from app.db.session import session_scope
from app.sealing import CUSTOMER_KEY_ID
from tests.db.helpers import LockWaits, document, spec

Sessions = async_sessionmaker[AsyncSession]


async def two_copy_object(sessionmaker: Sessions, key: str = "k") -> tuple[int, list[int]]:
    """An object of one chunk of two copies: (chunk id, copy ids)."""
    async with session_scope(sessionmaker) as session:
        chunk = await ChunkRepository(session).add_pending(
            [document(size=10, bot_id=1), document(size=10, bot_id=2)], "ab" * 32
        )
        await ObjectRepository(session).put(spec(key, [_piece(chunk.id)]))
        copy_ids = list(
            await session.scalars(
                select(ChunkCopy.id).where(ChunkCopy.chunk_id == chunk.id).order_by(ChunkCopy.id)
            )
        )
    return chunk.id, copy_ids


def _piece(chunk_id: int) -> object:
    from app.db.object_rows import PieceSpec

    return PieceSpec(chunk_id=chunk_id, offset=0, length=10)


async def state(sessionmaker: Sessions, chunk_id: int) -> tuple[int, bool]:
    async with session_scope(sessionmaker) as session:
        chunk = await session.get(Chunk, chunk_id)
        assert chunk is not None
        return chunk.copies_ok, chunk.lost_at is not None


async def test_bad_copies_count_down_to_lost_and_a_good_check_brings_one_back(
    sessionmaker: Sessions,
) -> None:
    chunk_id, (first, second) = await two_copy_object(sessionmaker)
    assert await state(sessionmaker, chunk_id) == (2, False)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        assert await repo.mark_bad(first, "missing")
        assert not await repo.mark_bad(first, "missing")  # bad already: no second count
    assert await state(sessionmaker, chunk_id) == (1, False)
    async with session_scope(sessionmaker) as session:
        assert await CopyRepository(session).mark_bad(second, "corrupt")
    assert await state(sessionmaker, chunk_id) == (0, True)
    async with session_scope(sessionmaker) as session:
        health = await CopyRepository(session).health(replicas=2)
        assert (health.objects_lost, health.objects_degraded, health.chunks_lost) == (1, 0, 1)
        # Present again but known to hold wrong bytes: not intact until read.
        await CopyRepository(session).mark_checked(second)
    assert await state(sessionmaker, chunk_id) == (0, True)
    async with session_scope(sessionmaker) as session:
        await CopyRepository(session).mark_checked(first)  # a missing one is back
    assert await state(sessionmaker, chunk_id) == (1, False)
    async with session_scope(sessionmaker) as session:
        health = await CopyRepository(session).health(replicas=2)
        assert (health.objects_lost, health.objects_degraded) == (0, 1)


async def test_a_repair_adds_a_copy_only_while_the_chunk_is_short_and_retires_the_bad_ones(
    sessionmaker: Sessions,
) -> None:
    chunk_id, (first, _second) = await two_copy_object(sessionmaker)
    async with session_scope(sessionmaker) as session:
        await CopyRepository(session).mark_bad(first, "missing")
    replacement = document(size=10, bot_id=3)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        assert await repo.add_copy(chunk_id, replacement, at_most=2) is not None
        # A second repair that raced this one finds it whole: refused.
        assert await repo.add_copy(chunk_id, document(size=10), at_most=2) is None
        assert await repo.retire_bad(chunk_id, keep=2) == 1
    assert await state(sessionmaker, chunk_id) == (2, False)
    async with session_scope(sessionmaker) as session:
        ledgered = [(e.message_id, e.reason) for e in await session.scalars(select(GcEntry))]
        left = set(await session.scalars(select(ChunkCopy.state)))
        assert await CopyRepository(session).needing_repair(2, 10) == []
        assert await CopyRepository(session).object_damage(1, 2) is None
    assert len(ledgered) == 1 and ledgered[0][1] == "damaged"
    assert left == {"ok"}


async def test_bad_copies_stay_until_enough_good_ones_exist(sessionmaker: Sessions) -> None:
    """The last evidence of a chunk is never dropped."""
    chunk_id, (first, second) = await two_copy_object(sessionmaker)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        await repo.mark_bad(first, "missing")
        await repo.mark_bad(second, "missing")
        assert await repo.retire_bad(chunk_id, keep=2) == 0
        assert await repo.object_damage(1, 2) == "lost"
    async with session_scope(sessionmaker) as session:
        assert len(list(await session.scalars(select(ChunkCopy.id)))) == 2


async def test_the_scrub_visits_the_copies_checked_longest_ago_first(
    sessionmaker: Sessions,
) -> None:
    chunk_id, (first, second) = await two_copy_object(sessionmaker)
    async with session_scope(sessionmaker) as session:
        await CopyRepository(session).mark_checked(first)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        assert await repo.due_for_check(10) == [second, first]
        assert await repo.due_for_check(10, not_by=[2]) == [first]
        assert await repo.copy_ids(0, 10) == [first, second]
        assert await repo.copy_ids(first, 10) == [second]
        assert (await repo.chunks([chunk_id]))[chunk_id].copies[0].id == first


async def test_health_says_when_the_copy_checked_longest_ago_was_checked(
    sessionmaker: Sessions,
) -> None:
    """The scrub's reach on /metrics: the oldest check, a copy never checked
    counting from when it was stored; copies of chunks not live (pending) do not count."""
    async with session_scope(sessionmaker) as session:
        assert (await CopyRepository(session).health(replicas=2)).oldest_check is None
    chunk_id, (first, second) = await two_copy_object(sessionmaker)
    long_ago = datetime(2026, 1, 1, tzinfo=UTC)
    a_day_later = long_ago + timedelta(days=1)
    async with session_scope(sessionmaker) as session:
        await session.execute(
            update(ChunkCopy)
            .where(ChunkCopy.id == first)
            .values(checked_at=None, created_at=long_ago)
        )
        await session.execute(
            update(ChunkCopy).where(ChunkCopy.id == second).values(checked_at=a_day_later)
        )
    async with session_scope(sessionmaker) as session:
        assert (await CopyRepository(session).health(replicas=2)).oldest_check == long_ago
        await CopyRepository(session).mark_checked(first)
    async with session_scope(sessionmaker) as session:
        assert (await CopyRepository(session).health(replicas=2)).oldest_check == a_day_later
        await session.execute(update(Chunk).where(Chunk.id == chunk_id).values(state="pending"))
    async with session_scope(sessionmaker) as session:
        assert (await CopyRepository(session).health(replicas=2)).oldest_check is None


async def test_one_gone_copy_reported_by_two_reads_at_once_counts_once(
    sessionmaker: Sessions, engine: AsyncEngine
) -> None:
    """Two pieces of one read find the same copy gone, each in a session of
    its own. The second read the copy as intact while the first had not
    committed yet, and counted it again: the chunk showed lost with a copy
    intact, and stayed in the repair queue for good."""
    chunk_id, (first, _second) = await two_copy_object(sessionmaker)
    waits = LockWaits(engine)
    async with sessionmaker() as reporting:
        assert await CopyRepository(reporting).mark_bad(first, "missing")

        async def report_again() -> bool:
            async with session_scope(sessionmaker) as session:
                return await CopyRepository(session).mark_bad(first, "missing")

        again = asyncio.create_task(report_again())
        # Blocked on the copy's row (Postgres) or the database (SQLite).
        await waits.wait()
        await reporting.commit()
        counted = await asyncio.gather(again)
    assert counted == [False]
    assert await state(sessionmaker, chunk_id) == (1, False)
    async with session_scope(sessionmaker) as session:
        assert await CopyRepository(session).object_damage(1, 2) == "degraded"


async def test_two_repairs_finding_one_copy_intact_again_count_it_once(
    sessionmaker: Sessions, engine: AsyncEngine
) -> None:
    """Two instances repairing one chunk both read a copy taken for missing
    and find it whole. Counted twice, the chunk had two intact copies with
    one: never repaired, and `retire_bad` would drop its other copy."""
    chunk_id, (first, second) = await two_copy_object(sessionmaker)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        await repo.mark_bad(first, "missing")
        await repo.mark_bad(second, "missing")
    assert await state(sessionmaker, chunk_id) == (0, True)
    waits = LockWaits(engine)
    async with sessionmaker() as repairing:
        await CopyRepository(repairing).mark_checked(first, verified=True)

        async def repair_too() -> None:
            async with session_scope(sessionmaker) as session:
                await CopyRepository(session).mark_checked(first, verified=True)

        too = asyncio.create_task(repair_too())
        await waits.wait()
        await repairing.commit()
        await too
    assert await state(sessionmaker, chunk_id) == (1, False)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        assert await repo.needing_repair(2, 10) == [ShortChunk(1, chunk_id)]
        assert await repo.retire_bad(chunk_id, keep=2) == 0  # the other copy stays


async def test_repairs_page_through_the_short_chunks_fewest_copies_first(
    sessionmaker: Sessions,
) -> None:
    """A cursor, so that the chunks a repair fails on do not hold the others
    back; SSE-C chunks and those under a key not configured here are left
    out, lost ones are not (a bad copy may read after all)."""
    made = [await two_copy_object(sessionmaker, key=f"k{n}") for n in range(6)]
    lost, customer, unknown, known, plain, one = (chunk_id for chunk_id, _ in made)
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        for copy_id in made[0][1]:
            await repo.mark_bad(copy_id, "missing")
        await repo.mark_bad(made[5][1][0], "corrupt")
        for chunk_id, key_id in [(customer, CUSTOMER_KEY_ID), (unknown, "gone"), (known, "k2")]:
            await session.execute(
                update(Chunk).where(Chunk.id == chunk_id).values(seal_key_id=key_id)
            )
        lost_at = await repo.lost_since(lost)
    assert lost_at is not None
    async with session_scope(sessionmaker) as session:
        repo = CopyRepository(session)
        every = await repo.needing_repair(3, 10, key_ids=["k1", "k2"])
        first = await repo.needing_repair(3, 2, key_ids=["k1", "k2"])
        rest = await repo.needing_repair(3, 2, after=first[-1], key_ids=["k1", "k2"])
        last = await repo.needing_repair(3, 2, after=rest[-1], key_ids=["k1", "k2"])
        plaintext_only = await repo.needing_repair(3, 10)
    assert every == [
        ShortChunk(0, lost, lost_at),
        ShortChunk(1, one),
        ShortChunk(2, known),
        ShortChunk(2, plain),
    ]
    assert (first, rest, last) == (every[:2], every[2:], [])
    assert [short.id for short in plaintext_only] == [lost, one, plain]
