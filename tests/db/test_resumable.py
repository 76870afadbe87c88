"""A tus final upload made from partials whose bytes are partly spooled
(TusRepository.concatenate with allow_spooled): a pending object whose
upload's parts are the partials' pieces or copies of their uploads, settled
by the commit of the last spooled part, however that commit and the
concatenation overlap."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.models import (
    Chunk,
    GcEntry,
    MultipartUpload,
    PendingCopy,
    Piece,
    SpooledPart,
    TusUpload,
)
from app.db.multipart_errors import PartsNotStored
from app.db.object_rows import ObjectRow
from app.db.objects import ObjectRepository
from app.db.pending import CopySource, PendingRepository
from app.db.resumable import Segment, TusRepository
from app.db.session import session_scope
from app.db.spool import SpoolRepository
from app.db.types import utcnow
from tests.db.helpers import LockWaits, StoredChunk, add_chunks, count, etag, whole_chunks

Sessions = async_sessionmaker[AsyncSession]
KEY_ID = 7
OWNER = "instance-1"


async def partial(sessionmaker: Sessions, name: str, segment: Segment) -> str:
    """A finished partial upload of one segment; its id."""
    async with session_scope(sessionmaker) as session:
        repo = TusRepository(session)
        row = await repo.create(
            api_key_id=KEY_ID,
            kind="partial",
            length=segment.size,
            metadata="",
            bucket="native",
            key=f"tus/{name}",
            content_type="",
            expires_at=utcnow() + timedelta(hours=1),
        )
        await repo.append(
            row.id, 0, [segment], owner=OWNER, expires_at=utcnow() + timedelta(hours=1)
        )
        return row.id


def spooled(size: int, path: str) -> Segment:
    return Segment(size, etag(size), path=path)


async def concatenate(
    session: AsyncSession, partial_ids: list[str], *, allow_spooled: bool = True
) -> tuple[TusUpload, ObjectRow, list[str]]:
    return await TusRepository(session).concatenate(
        api_key_id=KEY_ID,
        partial_ids=partial_ids,
        metadata="",
        bucket="native",
        key="tus/final",
        name="final",
        content_type="application/octet-stream",
        expires_at=utcnow() + timedelta(hours=1),
        allow_spooled=allow_spooled,
    )


async def flush(sessionmaker: Sessions, partial_id: str, chunk: StoredChunk) -> None:
    """The flusher's commit of the partial's (one) spooled part."""
    async with session_scope(sessionmaker) as session:
        spool_id = await session.scalar(
            select(SpooledPart.id).where(SpooledPart.upload_id == partial_id)
        )
    assert spool_id is not None
    # As the flusher commits: a transaction of its own, its first statement the lock.
    async with session_scope(sessionmaker) as session:
        assert await SpoolRepository(session).commit_pieces(spool_id, whole_chunks([chunk]))


async def object_pieces(sessionmaker: Sessions, object_id: int) -> list[tuple[int, int, int]]:
    async with session_scope(sessionmaker) as session:
        pieces = await session.scalars(
            select(Piece).where(Piece.object_id == object_id).order_by(Piece.seq)
        )
        return [(p.chunk_id, p.start, p.length) for p in pieces]


async def test_a_final_of_spooled_partials_is_pending_until_their_flush_settles_it(
    sessionmaker: Sessions,
) -> None:
    stored, second, third = await add_chunks(sessionmaker, [1000, 600, 10])
    ids = [
        await partial(sessionmaker, "a", Segment(1000, etag(1), pieces=whole_chunks([stored]))),
        await partial(sessionmaker, "b", spooled(600, "i/b.part")),
        await partial(sessionmaker, "c", spooled(10, "i/c.part")),
    ]

    async with session_scope(sessionmaker) as session:
        final, created, waiting = await concatenate(session, ids)
    async with session_scope(sessionmaker) as session:
        parts = await PendingRepository(session).source(created.id)
        assert await count(session, TusUpload) == 1  # the partials were consumed
    assert (final.length, created.size, waiting) == (1610, 1610, ids[1:])
    assert parts is not None
    # Part 1 has the first partial's pieces; the others are copies of their uploads.
    assert [(p.start, p.size, p.copy_of) for p in parts] == [
        (0, 1000, None),
        (1000, 600, CopySource(ids[1], 0)),
        (1600, 10, CopySource(ids[2], 0)),
    ]
    assert await object_pieces(sessionmaker, created.id) == []

    await flush(sessionmaker, ids[1], second)
    assert await object_pieces(sessionmaker, created.id) == []  # the third is still spooled
    await flush(sessionmaker, ids[2], third)

    assert await object_pieces(sessionmaker, created.id) == [
        (stored.id, 0, 1000),
        (second.id, 1000, 600),
        (third.id, 1600, 10),
    ]
    async with session_scope(sessionmaker) as session:
        assert await PendingRepository(session).source(created.id) is None
        assert await count(session, MultipartUpload) == 0
        assert await count(session, PendingCopy) == 0
        assert await count(session, GcEntry) == 0  # every chunk is the object's


async def test_waiting_for_telegram_a_spooled_partial_is_refused_and_nothing_changes(
    sessionmaker: Sessions,
) -> None:
    ids = [await partial(sessionmaker, "a", spooled(600, "i/a.part"))]

    with pytest.raises(PartsNotStored):
        async with session_scope(sessionmaker) as session:
            await concatenate(session, ids, allow_spooled=False)

    async with session_scope(sessionmaker) as session:
        assert await count(session, TusUpload) == 1
        assert await count(session, SpooledPart) == 1
        assert (await session.get(MultipartUpload, ids[0])) is not None


async def test_deleting_a_pending_final_leaves_its_partials_to_their_flush(
    sessionmaker: Sessions,
) -> None:
    stored, flushed = await add_chunks(sessionmaker, [1000, 600])
    ids = [
        await partial(sessionmaker, "a", Segment(1000, etag(1), pieces=whole_chunks([stored]))),
        await partial(sessionmaker, "b", spooled(600, "i/b.part")),
    ]
    async with session_scope(sessionmaker) as session:
        await concatenate(session, ids)

    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("native", "tus/final")
    async with session_scope(sessionmaker) as session:
        # The first partial's chunk went with the object; the spooled partial's
        # upload stays until its flush, its spool row with it.
        assert await session.get(Chunk, stored.id) is None
        assert await count(session, MultipartUpload) == 1
        assert await count(session, PendingCopy) == 0
        assert await count(session, SpooledPart) == 1

    await flush(sessionmaker, ids[1], flushed)

    async with session_scope(sessionmaker) as session:
        assert await count(session, MultipartUpload) == 0
        assert await session.get(Chunk, flushed.id) is None  # no one uses it
        assert await count(session, GcEntry) == 2  # both messages to delete


@pytest.mark.parametrize("first", ["flush", "concatenate"])
async def test_a_flush_overlapping_the_concatenation_settles_the_final_either_way(
    sessionmaker: Sessions, engine: AsyncEngine, first: str
) -> None:
    (chunk,) = await add_chunks(sessionmaker, [600])
    ids = [await partial(sessionmaker, "a", spooled(600, "i/a.part"))]
    waits = LockWaits(engine)
    created: list[ObjectRow] = []

    async def concatenation() -> None:
        async with session_scope(sessionmaker) as session:
            created.append((await concatenate(session, ids))[1])

    async with sessionmaker() as holding:
        # The first keeps its transaction open until the other waits for its
        # locks: the two really overlap.
        if first == "flush":
            spool_id = await holding.scalar(select(SpooledPart.id))
            assert spool_id is not None
            assert await SpoolRepository(holding).commit_pieces(spool_id, whole_chunks([chunk]))
            rival = asyncio.create_task(concatenation())
        else:
            created.append((await concatenate(holding, ids))[1])
            rival = asyncio.create_task(flush(sessionmaker, ids[0], chunk))
        await waits.wait()
        assert not rival.done()
        await holding.commit()
    await rival

    # Either the concatenation saw the part in Telegram, or the commit saw
    # the final and settled it: never a final waiting for a flush that was.
    assert await object_pieces(sessionmaker, created[0].id) == [(chunk.id, 0, 600)]
    async with session_scope(sessionmaker) as session:
        assert await count(session, MultipartUpload) == 0
        assert await count(session, PendingCopy) == 0
