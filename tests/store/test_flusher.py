"""The flusher against a fake Telegram: spooled parts become full chunks cut
across parts, and a failed send is retried from the bytes on disk."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from structlog.testing import capture_logs

from app.db.models import Chunk, ChunkCopy, GcEntry, PartPiece, SpooledPart
from app.db.multipart import MultipartRepository
from app.db.session import session_scope
from app.db.spool import SpoolRepository
from app.store.flusher import Flusher
from app.store.gc import GarbageCollector
from app.store.spool import Spool
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.errors import TransientError
from tests.running_service import eventually
from tests.store.test_writer import FakeTelegram, pieces

# Postgres too: the spool's rows, claimed by instances (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends

CHUNK = 4096
Sessions = async_sessionmaker[AsyncSession]


async def spooled_upload(sessions: Sessions, spool: Spool, parts: list[bytes]) -> str:
    async with session_scope(sessions) as session:
        upload = await MultipartRepository(session).create(
            bucket="b", key="k", content_type="x", user_metadata={}
        )
    for number, data in enumerate(parts, start=1):
        assert spool.reserve(len(data))
        written = await spool.write(pieces(data, 700), reserved=len(data), max_size=None)
        async with session_scope(sessions) as session:
            await SpoolRepository(session).put(
                upload.id,
                number,
                size=written.size,
                etag=f'"{written.md5_hex}"',
                path=written.path,
                owner=spool.instance_id,
                bucket="b",
                key="k",
            )
    return upload.id


def flusher_for(telegram: FakeTelegram, sessions: Sessions, spool: Spool) -> Flusher:
    gc = GarbageCollector(telegram, sessions)  # type: ignore[arg-type]
    writer = ChunkWriter(
        telegram,  # type: ignore[arg-type]
        sessions,
        gc,
        UploadBuffers(4),
        chunk_size=CHUNK,
        inline_threshold=0,
        owner=spool.instance_id,
    )
    return Flusher(spool, writer, sessions, gc, chunk_size=CHUNK, idle_flush=60, retry_delay=0.05)


@pytest.fixture
async def spool(tmp_path: Path) -> Spool:
    spool = Spool(tmp_path, max_bytes=10**6, instance_id="me")
    await spool.open()
    return spool


async def part_bytes(sessions: Sessions, telegram: FakeTelegram, upload_id: str) -> list[bytes]:
    """Each part's bytes, read back through its pieces from what was sent."""
    async with session_scope(sessions) as session:
        rows = (
            await session.execute(
                select(
                    PartPiece.part_number, ChunkCopy.message_id, PartPiece.offset, PartPiece.length
                )
                .join(ChunkCopy, ChunkCopy.chunk_id == PartPiece.chunk_id)
                .where(PartPiece.upload_id == upload_id)
                .order_by(PartPiece.part_number, PartPiece.seq)
            )
        ).all()
    out: dict[int, bytes] = {}
    for number, message_id, offset, length in rows:
        out[number] = out.get(number, b"") + telegram.sent[message_id - 1][offset : offset + length]
    return [out[n] for n in sorted(out)]


async def test_parts_are_cut_into_full_chunks_across_their_boundaries(
    sessionmaker: Sessions, spool: Spool
) -> None:
    telegram = FakeTelegram()
    parts = [random.Random(n).randbytes(1500) for n in range(3)]
    upload_id = await spooled_upload(sessionmaker, spool, parts)
    flusher = flusher_for(telegram, sessionmaker, spool)

    async with asyncio.timeout(10):
        await flusher.flushed(upload_id, [1, 2, 3])

    # 4500 bytes: one full chunk and the tail, not one message per part.
    assert sorted(len(chunk) for chunk in telegram.sent) == [4500 - CHUNK, CHUNK]
    assert await part_bytes(sessionmaker, telegram, upload_id) == parts
    async with session_scope(sessionmaker) as session:
        assert await session.scalar(select(func.count()).select_from(SpooledPart)) == 0
    assert list(spool.root.rglob("*.part")) == []
    assert spool.used == 0
    await flusher.stop(grace=1)


async def test_a_failed_send_is_retried_from_the_spool_and_leaves_no_chunk(
    sessionmaker: Sessions, spool: Spool
) -> None:
    telegram = FakeTelegram()
    telegram.fail_after = 1  # the second send fails, once, as a timeout would
    telegram.failure = TransientError("sendDocument: ReadError")
    parts = [random.Random(n).randbytes(3000) for n in range(3)]
    upload_id = await spooled_upload(sessionmaker, spool, parts)
    flusher = flusher_for(telegram, sessionmaker, spool)
    flusher.notify(upload_id)
    async with asyncio.timeout(10):
        await telegram.failed.wait()
    telegram.fail_after = None

    async with asyncio.timeout(10):
        await flusher.flushed(upload_id, [1, 2, 3])

    assert await part_bytes(sessionmaker, telegram, upload_id) == parts
    async with session_scope(sessionmaker) as session:
        used = set(await session.scalars(select(PartPiece.chunk_id)))
        chunks = set(await session.scalars(select(Chunk.id)))
    # Chunks of the failed round that no part kept were released.
    assert chunks == used
    await flusher.stop(grace=1)


async def test_a_part_aborted_while_it_is_flushed_ends_the_flush_quietly(
    sessionmaker: Sessions, spool: Spool
) -> None:
    telegram = FakeTelegram(bots=1)  # one lane: the second chunk is read after the first is sent
    telegram.gate.clear()
    parts = [random.Random(n).randbytes(3000) for n in range(3)]
    upload_id = await spooled_upload(sessionmaker, spool, parts)
    flusher = flusher_for(telegram, sessionmaker, spool)
    with capture_logs() as logs:
        flusher.notify(upload_id)
        await eventually(lambda: telegram.in_flight > 0)
        # The upload is aborted while its first chunk is in flight.
        async with session_scope(sessionmaker) as session:
            paths = await SpoolRepository(session).paths_of_upload(upload_id)
            await session.execute(delete(SpooledPart).where(SpooledPart.upload_id == upload_id))
        await spool.delete(paths)
        telegram.gate.set()
        await eventually(lambda: not flusher._uploads)

    assert [e for e in logs if e["log_level"] == "warning"] == []
    # The chunk in flight at the abort was sent (message 1)...
    assert len(telegram.sent) == 1
    async with session_scope(sessionmaker) as session:
        # ...and then released, not kept: no part uses it, its row is gone
        # and its message waits in the GC's ledger to be deleted.
        assert await session.scalar(select(func.count()).select_from(PartPiece)) == 0
        assert await session.scalar(select(func.count()).select_from(Chunk)) == 0
        ledgered = (await session.execute(select(GcEntry.message_id, GcEntry.reason))).all()
    assert [tuple(row) for row in ledgered] == [(1, "failed_upload")]
    await flusher.stop(grace=1)


async def test_a_part_adopted_by_another_instance_keeps_its_file_for_the_adopter(
    sessionmaker: Sessions, spool: Spool
) -> None:
    # This instance stalled and was taken for dead (issue 49): another one
    # adopted its rows. Deleting the file of a row that moved owner lost the
    # part; the adopter retried it forever and its object never settled.
    telegram = FakeTelegram(bots=1)  # one lane: the third chunk waits for the first
    telegram.gate.clear()
    parts = [random.Random(n).randbytes(3000) for n in range(4)]
    upload_id = await spooled_upload(sessionmaker, spool, parts)
    flusher = flusher_for(telegram, sessionmaker, spool)
    flusher.notify(upload_id)
    await eventually(lambda: telegram.in_flight > 0)
    # Part 4 is not cut yet: another instance takes it over.
    async with session_scope(sessionmaker) as session:
        await session.execute(
            update(SpooledPart)
            .where(SpooledPart.upload_id == upload_id, SpooledPart.part_number == 4)
            .values(owner="other")
        )
        path = await session.scalar(select(SpooledPart.path).where(SpooledPart.owner == "other"))
    assert path is not None
    telegram.gate.set()
    async with asyncio.timeout(10):
        await flusher.flushed(upload_id, [1, 2, 3])
    # A flushed part's file is deleted (and uncounted) just after its commit,
    # which is what `flushed` waits for. The adopted part is the adopter's to
    # count from now on.
    await eventually(lambda: spool.used == 0)
    await flusher.stop(grace=1)
    assert (spool.root / path).exists()
    assert spool.used == 0  # the adopter counts it now

    # The adopter reads it from the stalled instance's directory.
    adopter_spool = Spool(spool.root, max_bytes=10**6, instance_id="other")
    adopter = flusher_for(telegram, sessionmaker, adopter_spool)
    async with asyncio.timeout(10):
        await adopter.flushed(upload_id, [4])
    await adopter.stop(grace=1)
    assert await part_bytes(sessionmaker, telegram, upload_id) == parts
    assert list(spool.root.rglob("*.part")) == []
