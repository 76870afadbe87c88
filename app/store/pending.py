"""Reads of pending objects: completed while some of their parts were still
in the spool (COMPLETE_WAITS_FOR=spool; app.db.pending holds the rows).

The instance whose spool holds a part serves its bytes from the file, the
parts already in Telegram from their chunks (through the range reader and
its download budget). A spooled part is checked before any of its bytes go
out: the whole file is hashed (MD5, in a worker thread, through a fixed
buffer) against the MD5 recorded when it was spooled, and a mismatch fails
the read as a damaged object. The first part of a read is checked before
the caller sends a header (a 502, never a 200 with wrong bytes); a later
part's failure cuts the response short, as any failed read does. Memory per
read: one block of SPOOL_READ_BLOCK at a time, whatever the part's size.

Another instance does not hold the files: it waits for the flush, up to
PENDING_READ_WAIT, then answers 503 with a Retry-After (ContentPending).
It does not fetch the bytes from the holder: instances have no channel to
each other, only the database, and the holder pushes those very bytes to
Telegram as fast as the pool allows (the spool window is seconds when
Telegram is reachable); a channel between instances would be a new
authenticated surface for the same few seconds.

A part flushed while it is read: its open file stays readable (Linux keeps
an unlinked file's bytes for whoever has it open). One flushed before it is
opened is read from its chunks; after the object was finalised, from the
object's own pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import BinaryIO

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copies import ChunkRow
from app.db.object_rows import PieceSpec
from app.db.objects import ObjectRepository
from app.db.pending import PendingPart, PendingRepository
from app.db.session import session_scope
from app.store.encryption import Encryption
from app.store.errors import ContentPending, ObjectDamaged, ObjectNotFound
from app.store.locator import chunk_ref
from app.store.reader import PieceSpan, RangeReader
from app.store.spool import Spool

log = structlog.get_logger("app.store.pending")

#: How long an instance that does not hold a pending object's spool files
#: waits for the holder's flush before answering 503.
PENDING_READ_WAIT = 20.0
#: How long a copy of a pending object (metadata only: it needs the
#: source's pieces) waits for the source's flush.
PENDING_COPY_WAIT = 120.0
#: How often a waiter looks whether the flush is done.
PENDING_POLL = 0.25
#: The Retry-After of that 503.
PENDING_RETRY_AFTER = 5
#: Bytes read from a spool file (and held) at a time.
SPOOL_READ_BLOCK = 256 * 1024


class PendingReads:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        reader: RangeReader,
        encryption: Encryption,
        spool: Spool | None,
        *,
        wait: float = PENDING_READ_WAIT,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._reader = reader
        self._encryption = encryption
        self._spool = spool
        self._wait = wait

    async def open(
        self, object_id: int, label: str, start: int, end: int
    ) -> AsyncIterator[bytes] | None:
        """Bytes [start, end) of the pending object, as a stream whose first
        block is read (and its part checked) already; None when the object
        is not pending (any more): its pieces say where its bytes are.

        Raises ContentPending when the bytes are in another instance's spool
        past the wait, ObjectDamaged when a spooled part fails its check."""
        deadline = time.monotonic() + self._wait
        while True:
            async with session_scope(self._sessionmaker) as session:
                parts = await PendingRepository(session).source(object_id)
            if parts is None:
                return None
            touched = [p for p in parts if p.start < end and p.start + p.size > start]
            if all(self._holds(part) for part in touched):
                break
            if time.monotonic() >= deadline:
                log.warning("pending_read_refused", object=label, waited=self._wait)
                raise ContentPending(
                    f"{label} is still being stored to Telegram by another instance; "
                    f"retry in a few seconds",
                    retry_after=PENDING_RETRY_AFTER,
                )
            await asyncio.sleep(PENDING_POLL)
        stream = self._stream(object_id, label, touched, start, end)
        first = await anext(stream, None)
        return _after(first, stream)

    async def settled(self, object_id: int, label: str) -> bool:
        """Wait while the object is pending, up to PENDING_COPY_WAIT; whether
        it was. Raises ContentPending past the wait."""
        deadline = time.monotonic() + PENDING_COPY_WAIT
        was = False
        while True:
            async with session_scope(self._sessionmaker) as session:
                if await PendingRepository(session).source(object_id) is None:
                    return was
            was = True
            if time.monotonic() >= deadline:
                raise ContentPending(
                    f"{label} is still being stored to Telegram; retry in a few seconds",
                    retry_after=PENDING_RETRY_AFTER,
                )
            await asyncio.sleep(PENDING_POLL)

    async def is_pending(self, object_id: int) -> bool:
        async with session_scope(self._sessionmaker) as session:
            return await PendingRepository(session).source(object_id) is not None

    def _holds(self, part: PendingPart) -> bool:
        spooled = part.spooled
        return spooled is None or (
            self._spool is not None and spooled.owner == self._spool.instance_id
        )

    async def _stream(
        self, object_id: int, label: str, parts: list[PendingPart], start: int, end: int
    ) -> AsyncGenerator[bytes]:
        for part in parts:
            low = max(start, part.start) - part.start
            high = min(end, part.start + part.size) - part.start
            handle = await self._open_spooled(part, label)
            if handle is not None:
                try:
                    async for block in _file_range(handle, low, high):
                        yield block
                finally:
                    await asyncio.to_thread(handle.close)
                continue
            stream = await self._from_telegram(object_id, label, part, low, high)
            try:
                async for block in stream:
                    yield block
            finally:
                await stream.aclose()

    async def _open_spooled(self, part: PendingPart, label: str) -> BinaryIO | None:
        """The part's spool file, open and checked; None when its bytes are
        in Telegram (not spooled, or flushed since the part was looked up)."""
        spooled = part.spooled
        if spooled is None or self._spool is None:
            return None
        path = self._spool.root / spooled.path
        try:
            handle, md5 = await asyncio.to_thread(_open_hashed, path)
        except FileNotFoundError:
            return None
        if md5 != spooled.md5:
            await asyncio.to_thread(handle.close)
            log.error(
                "spooled_part_corrupt",
                object=label,
                part_number=part.part_number,
                path=spooled.path,
                expected_md5=spooled.md5,
                actual_md5=md5,
            )
            raise ObjectDamaged(
                f"part {part.part_number} of {label} in the spool does not match its MD5"
            )
        return handle

    async def _from_telegram(
        self, object_id: int, label: str, part: PendingPart, low: int, high: int
    ) -> AsyncGenerator[bytes]:
        async with session_scope(self._sessionmaker) as session:
            found: list[tuple[PieceSpec, ChunkRow]] | None = await PendingRepository(
                session
            ).part_chunks(part.upload_id, part.part_number, low, high)
            if found is None:
                # Finalised meanwhile: the part's bytes are the object's pieces now.
                found = await ObjectRepository(session).covering_pieces(
                    object_id, part.start + low, part.start + high
                )
        if found is None:
            raise ObjectNotFound(f"object {label} changed while being read")
        spans = [
            PieceSpan(
                chunk=chunk_ref(chunk, self._encryption), offset=spec.offset, length=spec.length
            )
            for spec, chunk in found
        ]
        return self._reader.stream(spans)


def _open_hashed(path: os.PathLike[str]) -> tuple[BinaryIO, str]:
    """The file, open, and the MD5 of all its bytes (through one buffer)."""
    handle = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    try:
        md5 = hashlib.md5(usedforsecurity=False)
        buffer = bytearray(SPOOL_READ_BLOCK)
        view = memoryview(buffer)
        while count := handle.readinto(buffer):
            md5.update(view[:count])
        return handle, md5.hexdigest()
    except BaseException:
        handle.close()
        raise


async def _file_range(handle: BinaryIO, low: int, high: int) -> AsyncGenerator[bytes]:
    position = low
    while position < high:
        size = min(SPOOL_READ_BLOCK, high - position)
        block = await asyncio.to_thread(os.pread, handle.fileno(), size, position)
        if not block:
            raise ObjectDamaged(f"a spool file ends at {position} bytes, before {high}")
        position += len(block)
        yield block


async def _after(first: bytes | None, rest: AsyncGenerator[bytes]) -> AsyncIterator[bytes]:
    try:
        if first is not None:
            yield first
        async for data in rest:
            yield data
    finally:
        with contextlib.suppress(Exception):
            await rest.aclose()
