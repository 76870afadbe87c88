"""The upload pipeline: cut a byte stream into chunks and store them in Telegram.

Several chunks of one stream are in flight at once (one per usable bot), while
MD5 and SHA-256 are computed incrementally. Reading from the stream pauses while
every slot is busy, so memory stays near (parallelism + 1) x chunk size whatever
the size of the stream, and nothing is written to disk.

Every chunk is recorded in the database as *pending* the moment Telegram has it.
If the stream fails (client gone, size limit, Telegram error), the chunks already
stored are released to the GC ledger, so no Telegram message is left behind. If
the process dies instead, the pending rows are swept into the ledger at the next
start.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import ChunkRepository
from app.db.objects import PieceSpec
from app.db.session import session_scope
from app.store.errors import UploadTooLarge
from app.store.gc import GarbageCollector
from app.telegram.dispatcher import Dispatcher

log = structlog.get_logger("app.store.writer")


@dataclass(frozen=True, slots=True)
class WrittenContent:
    """What a finished stream became: hashes plus either pieces or inline bytes."""

    size: int
    md5_hex: str
    sha256_hex: str
    pieces: list[PieceSpec]
    inline_data: bytes | None

    @property
    def chunk_ids(self) -> list[int]:
        return [piece.chunk_id for piece in self.pieces]


def plan_chunk_size(expected_size: int | None, max_chunk: int, lanes: int) -> int:
    """The chunk size for a stream whose length is known in advance.

    Cutting 100 MiB into 19 MiB chunks gives five full chunks and a 5 MiB
    tail: with six bots, five work for the whole upload and one for a quarter
    of it. Equal chunks keep every bot equally busy; when that takes a few more
    chunks (a multiple of the bots), it is worth it as long as the chunks stay
    at least half the maximum (each chunk is a message, and messages are
    rate-limited). Unknown lengths, and anything up to one chunk, keep the
    maximum.
    """
    if expected_size is None or expected_size <= max_chunk:
        return max_chunk
    count = -(-expected_size // max_chunk)
    rounded = -(-count // lanes) * lanes
    if expected_size / rounded >= max_chunk / 2:
        count = rounded
    return -(-expected_size // count)


class ChunkWriter:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        *,
        chunk_size: int,
        inline_threshold: int,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._on_bytes = on_bytes
        self._sessionmaker = sessionmaker
        self._gc = gc
        self.chunk_size = chunk_size
        self.inline_threshold = inline_threshold

    def parallelism(self) -> int:
        """Chunks of one stream in flight at once: one per usable bot."""
        return max(1, len(self._dispatcher.usable_bots()))

    async def write(
        self,
        stream: AsyncIterator[bytes],
        *,
        max_size: int | None = None,
        label: str = "",
        allow_inline: bool = True,
        expected_size: int | None = None,
    ) -> WrittenContent:
        """Store a whole stream. On any failure, nothing stays in Telegram.

        `allow_inline=False` stores even small content in Telegram (multipart
        parts: an object is inline or pieces, never both)."""
        inline_threshold = self.inline_threshold if allow_inline else 0
        chunk_size = plan_chunk_size(expected_size, self.chunk_size, self.parallelism())
        md5 = hashlib.md5(usedforsecurity=False)
        sha256 = hashlib.sha256()
        # Received bytes not yet in a chunk. A chunk is cut from them (one copy)
        # only once a slot is free, so no finished chunk waits in memory.
        pending: deque[bytes] = deque()
        pending_size = 0
        total = 0
        slots = asyncio.Semaphore(self.parallelism())
        tasks: list[asyncio.Task[PieceSpec]] = []
        try:
            async for data in stream:
                if not data:
                    continue
                total += len(data)
                if max_size is not None and total > max_size:
                    raise UploadTooLarge(max_size)
                md5.update(data)
                sha256.update(data)
                if self._on_bytes is not None:
                    self._on_bytes(len(data))
                pending.append(bytes(data))
                pending_size += len(data)
                # Hold back while the content could still be small enough to
                # live inline in the database.
                while pending_size >= chunk_size and total > inline_threshold:
                    await self._start_chunk(tasks, slots, pending, chunk_size, label)
                    pending_size -= chunk_size
            if not tasks and total <= inline_threshold:
                return WrittenContent(
                    size=total,
                    md5_hex=md5.hexdigest(),
                    sha256_hex=sha256.hexdigest(),
                    pieces=[],
                    inline_data=b"".join(pending),
                )
            while pending_size:
                size = min(pending_size, chunk_size)
                await self._start_chunk(tasks, slots, pending, size, label)
                pending_size -= size
            pieces = list(await asyncio.gather(*tasks))
        except BaseException:
            await self._abandon(tasks)
            raise
        return WrittenContent(
            size=total,
            md5_hex=md5.hexdigest(),
            sha256_hex=sha256.hexdigest(),
            pieces=pieces,
            inline_data=None,
        )

    async def _start_chunk(
        self,
        tasks: list[asyncio.Task[PieceSpec]],
        slots: asyncio.Semaphore,
        pending: deque[bytes],
        size: int,
        label: str,
    ) -> None:
        # Waiting for a slot is the backpressure: the stream is not read meanwhile.
        await slots.acquire()
        for task in tasks:
            # A chunk that already failed fails the whole stream now, not at the end.
            if task.done() and not task.cancelled() and task.exception() is not None:
                slots.release()
                raise task.exception()  # type: ignore[misc]
        data = _take(pending, size)
        tasks.append(asyncio.create_task(self._store_chunk(data, slots, label, len(tasks))))

    async def _store_chunk(
        self, data: bytes, slots: asyncio.Semaphore, label: str, index: int
    ) -> PieceSpec:
        try:
            filename = f"{secrets.token_hex(8)}.bin"
            caption = f"{label} #{index}" if label else None
            document = await self._dispatcher.send_document(data, filename, caption=caption)
            digest = hashlib.sha256(data).hexdigest()
            try:
                async with session_scope(self._sessionmaker) as session:
                    chunk = await ChunkRepository(session).add_pending(document, digest)
            except BaseException:
                # Telegram has it but the database does not: it must not stay.
                self._gc.enqueue_document(document, reason="failed_upload")
                raise
            return PieceSpec(chunk_id=chunk.id, offset=0, length=len(data))
        finally:
            slots.release()

    async def _abandon(self, tasks: list[asyncio.Task[PieceSpec]]) -> None:
        """Cancel chunks still in flight and release the stored ones to GC."""
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stored = [r.chunk_id for r in results if isinstance(r, PieceSpec)]
        if stored:
            # Shielded: this runs while the caller is being cancelled.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._gc.release_chunks(stored, reason="failed_upload"))
            log.info("upload_abandoned", chunks_released=len(stored))


def _take(pending: deque[bytes], size: int) -> bytes:
    """The first `size` bytes of `pending`, removed from it, as one bytes object."""
    parts: list[bytes] = []
    while size:
        head = pending.popleft()
        if len(head) > size:
            pending.appendleft(head[size:])
            head = head[:size]
        parts.append(head)
        size -= len(head)
    return b"".join(parts)
