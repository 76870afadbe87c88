"""Pending objects (app.db.pending): completed while parts were still in the
spool, finalised by the commit of their last spooled part, left out of
snapshots, and deleted with their parts' chunks released."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import journal
from app.db.journal import TableChanges
from app.db.models import Chunk, GcEntry, MultipartUpload, PendingCopy, Piece, SpooledPart
from app.db.multipart import MultipartRepository
from app.db.objects import ObjectRepository
from app.db.pending import PendingRepository
from app.db.session import session_scope
from app.db.snapshots import dump_rows
from app.db.spool import SpoolRepository
from tests.db.helpers import (
    FLUSHED,
    SPOOLED,
    add_chunks,
    count,
    etag,
    pending_object,
    spec,
    whole_chunks,
)

Sessions = async_sessionmaker[AsyncSession]


async def dumped_object_ids(sessionmaker: Sessions) -> list[int]:
    ids = []
    async for name, rows in dump_rows(sessionmaker):
        if name == "objects":
            ids += [row["id"] for row in rows]
    return ids


async def test_a_pending_object_is_hidden_from_snapshots_until_finalised(
    sessionmaker: Sessions,
) -> None:
    async with session_scope(sessionmaker) as session:
        settled = await ObjectRepository(session).put(spec("settled", inline_data=b"x"))
    object_id, chunk_id, spool_id = await pending_object(sessionmaker)

    async with session_scope(sessionmaker) as session:
        parts = await PendingRepository(session).source(object_id)
        visible = await ObjectRepository(session).get("b", "k")
        uploads = await MultipartRepository(session).get(parts[0].upload_id if parts else "")
    assert visible is not None and visible.size == FLUSHED + SPOOLED
    assert uploads is None  # no upload to the multipart API any more
    assert parts is not None
    assert [(p.part_number, p.start, p.size, p.spooled is not None) for p in parts] == [
        (1, 0, FLUSHED, False),
        (2, FLUSHED, SPOOLED, True),
    ]
    assert await dumped_object_ids(sessionmaker) == [settled.id]

    (flushed,) = await add_chunks(sessionmaker, [SPOOLED])
    async with session_scope(sessionmaker) as session:
        assert await SpoolRepository(session).commit_pieces(spool_id, whole_chunks([flushed]))

    async with session_scope(sessionmaker) as session:
        pieces = (
            await session.scalars(
                select(Piece).where(Piece.object_id == object_id).order_by(Piece.seq)
            )
        ).all()
        assert await PendingRepository(session).source(object_id) is None
        assert await count(session, MultipartUpload) == 0
    assert [(p.chunk_id, p.start, p.length) for p in pieces] == [
        (chunk_id, 0, FLUSHED),
        (flushed.id, FLUSHED, SPOOLED),
    ]
    assert sorted(await dumped_object_ids(sessionmaker)) == sorted([settled.id, object_id])


async def test_deleting_a_pending_object_releases_its_flushed_parts_chunks(
    sessionmaker: Sessions,
) -> None:
    _, chunk_id, spool_id = await pending_object(sessionmaker)

    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("b", "k")

    async with session_scope(sessionmaker) as session:
        # The part's chunk row went, its message to the GC ledger.
        assert await session.get(Chunk, chunk_id) is None
        assert await count(session, GcEntry) == 1
        assert await count(session, MultipartUpload) == 0
        assert await count(session, SpooledPart) == 0
        # The flusher's late commit finds nothing to commit.
        assert not await SpoolRepository(session).commit_pieces(spool_id, [])


async def test_a_deleted_source_stays_for_its_copy_and_its_flush_resolves_both(
    sessionmaker: Sessions,
) -> None:
    object_id, chunk_id, spool_id = await pending_object(sessionmaker)
    async with session_scope(sessionmaker) as session:
        source = await PendingRepository(session).lock_source(object_id)
        assert source is not None
        repo = MultipartRepository(session)
        target = await repo.create(bucket="b", key="copy", content_type="x/y", user_metadata={})
        # Bytes 500..1100 of the source: across its two parts.
        await repo.put_part(target.id, 1, size=600, etag=etag(9), pieces=[], copy_of=(source, 500))
    async with session_scope(sessionmaker) as session:
        copy = await MultipartRepository(session).complete(
            target.id, [(1, etag(9))], name="copy", allow_spooled=True
        )
        # The source object goes; its upload stays for the copy.
        assert await ObjectRepository(session).delete("b", "k")
    async with session_scope(sessionmaker) as session:
        assert await count(session, GcEntry) == 0
        assert await PendingRepository(session).source_upload(copy.id) is not None

    (flushed,) = await add_chunks(sessionmaker, [SPOOLED])
    async with session_scope(sessionmaker) as session:
        assert await SpoolRepository(session).commit_pieces(spool_id, whole_chunks([flushed]))

    async with session_scope(sessionmaker) as session:
        pieces = (
            await session.scalars(
                select(Piece).where(Piece.object_id == copy.id).order_by(Piece.seq)
            )
        ).all()
        assert await count(session, MultipartUpload) == 0
        assert await count(session, PendingCopy) == 0
        # Nothing the copy uses was released; nothing else is left.
        assert await count(session, GcEntry) == 0
    assert [(p.chunk_id, p.offset, p.start, p.length) for p in pieces] == [
        (chunk_id, 500, 0, FLUSHED - 500),
        (flushed.id, 0, FLUSHED - 500, 100),
    ]


async def test_the_journal_ships_a_pending_object_when_it_settles_not_before(
    sessionmaker: Sessions,
) -> None:
    object_id, _chunk_id, spool_id = await pending_object(sessionmaker)

    async def shipped_now() -> dict[str, TableChanges]:
        """What a journal round would ship now, and the rows shipped."""
        async with session_scope(sessionmaker) as session:
            waiting = await journal.pending(session, 10_000)
            await journal.forget(session, waiting.ids)
        changes = await journal.current_state(sessionmaker, dict(waiting.keys))
        return {change.table: change for change in changes}

    # Pending: its bytes are in one spool; restored, it could not be read.
    before = await shipped_now()
    assert before["objects"].rows == [] and before["objects"].deleted == [(object_id,)]

    (flushed,) = await add_chunks(sessionmaker, [SPOOLED])
    async with session_scope(sessionmaker) as session:
        assert await SpoolRepository(session).commit_pieces(spool_id, whole_chunks([flushed]))

    settled = await shipped_now()
    assert [row["id"] for row in settled["objects"].rows] == [object_id]
    assert sorted(row["seq"] for row in settled["pieces"].rows) == [0, 1]
