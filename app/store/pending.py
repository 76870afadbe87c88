"""Reads of pending objects: completed while some of their parts were still
in the spool (COMPLETE_WAITS_FOR=spool; app.db.pending holds the rows), or
copied from such an object (a read follows the copy to its source's parts).

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
import hashlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import BinaryIO

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copies import ChunkRow
from app.db.object_rows import PieceSpec
from app.db.objects import ObjectRepository
from app.db.pending import PendingRepository, SpooledFile
from app.db.session import session_scope
from app.store.encryption import Encryption
from app.store.errors import ContentPending, ObjectDamaged, ObjectNotFound
from app.store.locator import chunk_ref
from app.store.reader import PieceSpan, RangeReader, first_fetched
from app.store.spool import Spool

log = structlog.get_logger("app.store.pending")

#: How long an instance that does not hold a pending object's spool files
#: waits for the holder's flush before answering 503.
PENDING_READ_WAIT = 20.0
#: With COMPLETE_WAITS_FOR=telegram, how long a copy of a pending object
#: (one completed before the setting changed) waits for the source's flush.
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
                repo = PendingRepository(session)
                upload_id = await repo.source_upload(object_id)
                if upload_id is None:
                    return None
                leaves = await _plan(repo, upload_id, start, end, [], start)
            if leaves is None:
                return None  # finalised meanwhile
            if all(self._holds(leaf) for leaf in leaves):
                break
            if time.monotonic() >= deadline:
                log.warning("pending_read_refused", object=label, waited=self._wait)
                raise ContentPending(
                    f"{label} is still being stored to Telegram by another instance; "
                    f"retry in a few seconds",
                    retry_after=PENDING_RETRY_AFTER,
                )
            await asyncio.sleep(PENDING_POLL)
        return await first_fetched(self._stream(object_id, label, leaves))

    async def settled(self, object_id: int, label: str) -> bool:
        """Wait while the object is pending, up to PENDING_COPY_WAIT; whether
        it was. Raises ContentPending past the wait."""
        deadline = time.monotonic() + PENDING_COPY_WAIT
        was = False
        while True:
            if not await self.is_pending(object_id):
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
            return await PendingRepository(session).source_upload(object_id) is not None

    def _holds(self, leaf: _Leaf) -> bool:
        spooled = leaf.spooled
        return spooled is None or (
            self._spool is not None and spooled.owner == self._spool.instance_id
        )

    async def _stream(
        self, object_id: int, label: str, leaves: list[_Leaf]
    ) -> AsyncGenerator[bytes]:
        for leaf in leaves:
            handle = await self._open_spooled(leaf, label)
            if handle is not None:
                _, _, low, high = leaf.chain[0]
                try:
                    async for block in _file_range(handle, low, high):
                        yield block
                finally:
                    # Closed at once, also when the read is cancelled (an
                    # await here could be cut short and leave the file open).
                    handle.close()
                continue
            stream = await self._from_telegram(object_id, label, leaf)
            try:
                async for block in stream:
                    yield block
            finally:
                await stream.aclose()

    async def _open_spooled(self, leaf: _Leaf, label: str) -> BinaryIO | None:
        """The leaf's spool file, open and checked; None when its bytes are
        in Telegram (not spooled, or flushed since the plan was made)."""
        spooled = leaf.spooled
        if spooled is None or self._spool is None:
            return None
        path = self._spool.root / spooled.path
        opening = asyncio.ensure_future(asyncio.to_thread(_open_hashed, path))
        try:
            handle, md5 = await asyncio.shield(opening)
        except FileNotFoundError:
            return None
        except asyncio.CancelledError:
            # The thread goes on and opens the file: close it when it has.
            opening.add_done_callback(_close_opened)
            raise
        if md5 != spooled.md5:
            handle.close()
            _, part_number, _, _ = leaf.chain[0]
            log.error(
                "spooled_part_corrupt",
                object=label,
                part_number=part_number,
                path=spooled.path,
                expected_md5=spooled.md5,
                actual_md5=md5,
            )
            raise ObjectDamaged(f"a part of {label} in the spool does not match its MD5")
        return handle

    async def _from_telegram(
        self, object_id: int, label: str, leaf: _Leaf
    ) -> AsyncGenerator[bytes]:
        """The leaf's bytes from its chunks: the part's own pieces, or, once
        its upload was finalised, those of the part it was copied into, up
        to the object's own."""
        found: list[tuple[PieceSpec, ChunkRow]] | None = None
        async with session_scope(self._sessionmaker) as session:
            repo = PendingRepository(session)
            for upload_id, part_number, low, high in leaf.chain:
                found = await repo.part_chunks(upload_id, part_number, low, high)
                if found is not None:
                    break
            if found is None:
                found = await ObjectRepository(session).covering_pieces(
                    object_id, leaf.object_start, leaf.object_start + leaf.length
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


@dataclass(frozen=True, slots=True)
class _Leaf:
    """A stretch of a read within one part: spooled (its file) or in
    Telegram. `chain`: (upload id, part number, low, high) of that part and
    of each part it was copied into, up to the object's upload."""

    spooled: SpooledFile | None
    chain: list[tuple[str, int, int, int]]
    object_start: int
    length: int


async def _plan(
    repo: PendingRepository,
    upload_id: str,
    start: int,
    end: int,
    above: list[tuple[str, int, int, int]],
    object_at: int,
) -> list[_Leaf] | None:
    """Where bytes [start, end) of a completed upload are, following copies
    to their sources; `object_at`: the object's offset of `start`. None when
    the upload is gone (finalised meanwhile)."""
    parts = await repo.parts_of(upload_id)
    if parts is None:
        return None
    leaves: list[_Leaf] = []
    for part in parts:
        if part.start >= end or part.start + part.size <= start:
            continue
        low = max(start, part.start) - part.start
        high = min(end, part.start + part.size) - part.start
        chain = [(upload_id, part.part_number, low, high), *above]
        here = object_at + part.start + low - start
        if part.copy_of is not None:
            source = part.copy_of
            deeper = await _plan(
                repo,
                source.upload_id,
                source.source_start + low,
                source.source_start + high,
                chain,
                here,
            )
            if deeper is not None:
                leaves += deeper
                continue
        leaves.append(_Leaf(part.spooled, chain, here, high - low))
    return leaves


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


def _close_opened(opening: asyncio.Future[tuple[BinaryIO, str]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result()[0].close()


async def _file_range(handle: BinaryIO, low: int, high: int) -> AsyncGenerator[bytes]:
    position = low
    while position < high:
        size = min(SPOOL_READ_BLOCK, high - position)
        block = await asyncio.to_thread(os.pread, handle.fileno(), size, position)
        if not block:
            raise ObjectDamaged(f"a spool file ends at {position} bytes, before {high}")
        position += len(block)
        yield block
