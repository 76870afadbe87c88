"""Several sessions at once, on both backends: the guarantees that need locks."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.models import Chunk, GcEntry, Piece, StoredObject
from app.db.repositories import (
    ApiKeyRepository,
    ChunkRepository,
    ChunksMissing,
    ObjectRepository,
)
from app.db.session import session_scope
from tests.db.helpers import LockWaits, add_chunks, count, spec, whole_chunks

Sessions = async_sessionmaker[AsyncSession]
WRITERS = 8


@pytest.mark.parametrize("key_exists", [False, True], ids=["new-key", "existing-key"])
async def test_concurrent_puts_to_one_key_leave_exactly_one_whole_object(
    sessionmaker: Sessions, key_exists: bool
) -> None:
    uploads = [await add_chunks(sessionmaker, [10, 20, 30]) for _ in range(WRITERS)]
    initial = await add_chunks(sessionmaker, [5]) if key_exists else []
    initial_public_id = None
    if key_exists:
        async with session_scope(sessionmaker) as session:
            first = await ObjectRepository(session).put(spec("k", whole_chunks(initial)))
        initial_public_id = first.public_id

    go = asyncio.Event()

    async def writer(n: int) -> None:
        await go.wait()
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(
                spec("k", whole_chunks(uploads[n]), etag=f'"{n:032x}"'), keep_public_id=True
            )

    tasks = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
    go.set()
    await asyncio.gather(*tasks)

    async with session_scope(sessionmaker) as session:
        (obj,) = (await session.scalars(select(StoredObject))).all()
        winner = int(obj.etag.strip('"'), 16)
        pieces = (await session.scalars(select(Piece).order_by(Piece.seq))).all()
        chunk_ids = set(await session.scalars(select(Chunk.id)))
        ledger = (await session.scalars(select(GcEntry))).all()

    # The object is one writer's, whole: its size, its pieces, its chunks.
    assert obj.size == 60
    assert [p.chunk_id for p in pieces] == [c.id for c in uploads[winner]]
    assert [p.start for p in pieces] == [0, 10, 30]
    assert chunk_ids == {c.id for c in uploads[winner]}
    if initial_public_id is not None:
        assert obj.public_id == initial_public_id
    # Every losing version's chunks were released exactly once.
    losers = [c for n, chunks in enumerate(uploads) if n != winner for c in chunks] + initial
    assert sorted(e.message_id for e in ledger) == sorted(c.message_id for c in losers)
    assert {e.reason for e in ledger} == {"overwritten"}


async def test_release_racing_a_put_that_references_the_chunk(
    sessionmaker: Sessions, engine: AsyncEngine
) -> None:
    """The put waits for the release's lock, then finds the chunk gone: no dangling piece."""
    (chunk,) = await add_chunks(sessionmaker, [10])
    waits = LockWaits(engine)
    async with sessionmaker() as releasing:
        assert await ChunkRepository(releasing).release([chunk.id], "aborted") == 1

        async def put() -> None:
            async with session_scope(sessionmaker) as session:
                await ObjectRepository(session).put(spec("k", whole_chunks([chunk])))

        attempt = asyncio.create_task(put())
        # Blocked on the chunk (Postgres) or the database (SQLite).
        await waits.wait()
        assert not attempt.done()
        await releasing.commit()

    with pytest.raises(ChunksMissing):
        await attempt
    async with session_scope(sessionmaker) as session:
        assert await count(session, StoredObject) == 0
        assert await count(session, GcEntry) == 1


async def test_put_racing_a_release_keeps_the_chunk(
    sessionmaker: Sessions, engine: AsyncEngine
) -> None:
    """The release waits for the put, then sees the new reference and keeps the chunk."""
    (chunk,) = await add_chunks(sessionmaker, [10])
    waits = LockWaits(engine)
    async with sessionmaker() as putting:
        await ObjectRepository(putting).put(spec("k", whole_chunks([chunk])))

        async def release() -> int:
            async with session_scope(sessionmaker) as session:
                return await ChunkRepository(session).release([chunk.id], "aborted")

        attempt = asyncio.create_task(release())
        await waits.wait()
        assert not attempt.done()
        await putting.commit()

    assert await attempt == 0
    async with session_scope(sessionmaker) as session:
        assert set(await session.scalars(select(Chunk.id))) == {chunk.id}
        assert await count(session, GcEntry) == 0


async def test_many_requests_verifying_one_key_at_once_all_succeed(sessionmaker: Sessions) -> None:
    """Each wants to record last_used_at; on SQLite only one transaction may write."""
    async with session_scope(sessionmaker) as session:
        _, plaintext = await ApiKeyRepository(session).create("shared", scope="write")

    async def request() -> bool:
        async with session_scope(sessionmaker) as session:
            found = await ApiKeyRepository(session).verify(plaintext)
            await asyncio.sleep(0.01)  # the rest of the request, same transaction
            return found is not None and found.name == "shared"

    assert all(await asyncio.gather(*(request() for _ in range(20))))
    async with session_scope(sessionmaker) as session:
        (key,) = await ApiKeyRepository(session).list()
    assert key.last_used_at is not None


CROSSING_ROUNDS = 20


async def test_puts_over_copies_of_each_other_never_deadlock(sessionmaker: Sessions) -> None:
    """A <- copy of B while B <- copy of A, both at once, round after round:
    each put either commits or finds its source's chunk released by the other
    (ChunksMissing, the "source changed" case the callers retry); Postgres
    never has to break a deadlock between them (40P01)."""
    outcomes: list[str] = []
    for _ in range(CROSSING_ROUNDS):
        (a_chunk, b_chunk) = await add_chunks(sessionmaker, [10, 10])
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("a", whole_chunks([a_chunk])))
            await ObjectRepository(session).put(spec("b", whole_chunks([b_chunk])))
        go = asyncio.Event()

        async def copy(key: str, source: Chunk, go: asyncio.Event) -> str:
            await go.wait()
            try:
                async with session_scope(sessionmaker) as session:
                    await ObjectRepository(session).put(spec(key, whole_chunks([source])))
            except ChunksMissing:
                return "source_changed"
            return "copied"

        tasks = [
            asyncio.create_task(copy("b", a_chunk, go)),
            asyncio.create_task(copy("a", b_chunk, go)),
        ]
        go.set()
        outcomes += await asyncio.gather(*tasks)
        async with session_scope(sessionmaker) as session:
            objects = (await session.scalars(select(StoredObject))).all()
            # Whatever the order, both objects exist and each is whole.
            assert sorted(o.key for o in objects) == ["a", "b"]
            for obj in objects:
                (piece,) = (
                    await session.scalars(select(Piece).where(Piece.object_id == obj.id))
                ).all()
                assert await session.get(Chunk, piece.chunk_id) is not None
    assert "copied" in outcomes
