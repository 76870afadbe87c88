"""The flusher: spooled parts to Telegram, in full chunks cut across parts.

A client that uploads in small sequential parts (a registry's 10 MiB default,
one part at a time) would otherwise get one message, on one bot, per part, and
wait for each. Acknowledged from the spool instead, its parts arrive at disk
speed, and the flusher cuts the stream of one upload's spooled parts (in part
order) into CHUNK_SIZE chunks: a chunk may carry the end of part 3 and the
start of part 4, since pieces are already (chunk, offset, length). The chunks
of one upload go out in parallel, one per usable bot, each holding a buffer of
the process-wide upload budget.

A part is done when every chunk that carries some of its bytes is stored: its
pieces are written and its spool row deleted in one transaction, then its file
goes. A tail shorter than a chunk waits for more parts, and is sent when the
upload is completed (`seal`, `flushed`) or has been idle for `idle_flush`
seconds. The commit of a pending object's last part finalises the object
(app.db.pending).

The bytes a part's chunks carry are checked against the MD5 recorded when
its file was written: they are read in part order, through the part's own
hash, and the hash is compared when the part's last byte has been read,
before the chunk carrying it is sent (so before the part can be committed).
The chunks' block hashes are computed from the bytes read, so a damaged file
flushed would be served as a 200 with wrong bytes for good. A damaged part
is never committed: it stays in the spool, where a read of its object fails
(502), is logged (`spool_part_damaged`) and counted (`damaged`), and the
chunks already sent with its bytes go to the GC ledger with the round's
uncommitted ones.

Failures: the bytes are on disk, so a failed send loses nothing. The round of
work is wound up (chunks that no committed part uses go to the GC ledger) and
started again from the database after `retry_delay`. A crash leaves the rows
and files; the next start adopts and flushes them, and sweeps the chunks that
were pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import SpooledPart
from app.db.object_rows import PieceSpec
from app.db.pending import PendingRepository
from app.db.retry import in_transaction
from app.db.session import session_scope
from app.db.spool import SpoolRepository
from app.store.chunk_size import short_chunks
from app.store.errors import InstanceFenced
from app.store.gc import GarbageCollector
from app.store.spool import Spool
from app.store.writer import ChunkWriter
from app.telegram.errors import NoUsableBot, PermanentError, TelegramError

log = structlog.get_logger("app.store.flusher")

IDLE_FLUSH = 2.0
RETRY_DELAY = 5.0


class FlushFailed(Exception):
    """Spooled bytes could not be sent. `final` when waiting will not help (no
    usable bot, or Telegram refuses them); otherwise the flusher retries."""

    def __init__(self, message: str, *, final: bool) -> None:
        super().__init__(message)
        self.final = final


class _PartsGone(FlushFailed):
    """A spooled part's file was gone when read: normally its upload was
    aborted, or the part replaced, while it was being flushed."""

    def __init__(self, message: str, spool_ids: set[int]) -> None:
        super().__init__(message, final=False)
        self.spool_ids = spool_ids


@dataclass(eq=False)
class _Part:
    """One spooled part while its bytes are being cut into chunks."""

    row_id: int
    part_number: int
    path: str
    size: int
    md5: str | None  # hex, as written (None: a row from before 0020 recorded none)
    cut: int = 0  # bytes handed to chunks so far
    stored: int = 0  # bytes of those in stored chunks
    pieces: dict[int, PieceSpec] = field(default_factory=dict)  # by offset in the part
    # The bytes read so far (cut and read in part order): checked against
    # `md5` once the last one is.
    read: Any = field(default_factory=lambda: hashlib.md5(usedforsecurity=False))
    damaged: bool = False


@dataclass(frozen=True, slots=True)
class _Segment:
    part: _Part
    offset: int  # in the part
    length: int


class _UploadFlush:
    """The work on one upload's spooled parts, run by one task."""

    def __init__(self, upload_id: str) -> None:
        self.upload_id = upload_id
        self.wake = asyncio.Event()
        self.changed = asyncio.Event()
        self.sealed = False
        self.last_error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None


class Flusher:
    def __init__(
        self,
        spool: Spool,
        writer: ChunkWriter,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        *,
        chunk_size: int,
        idle_flush: float = IDLE_FLUSH,
        retry_delay: float = RETRY_DELAY,
    ) -> None:
        self._spool = spool
        self._writer = writer
        self._sessionmaker = sessionmaker
        self._gc = gc
        self._chunk_size = chunk_size
        self._idle_flush = idle_flush
        self._retry_delay = retry_delay
        self._uploads: dict[str, _UploadFlush] = {}
        self._stopping = False
        # Spool rows (by id) whose file does not match its MD5: never sent,
        # and looked at once per process.
        self._damaged: set[int] = set()

    @property
    def damaged(self) -> int:
        """Spooled parts found damaged (not sent) since this process started."""
        return len(self._damaged)

    # --- what the store calls ---------------------------------------------------

    async def resume(self) -> None:
        """Start on every upload with spooled parts this instance owns."""
        async with session_scope(self._sessionmaker) as session:
            rows = await SpoolRepository(session).owned(self._spool.instance_id)
            completed = await PendingRepository(session).completed(row.upload_id for row in rows)
        for upload_id in dict.fromkeys(row.upload_id for row in rows):
            # A pending object's tail goes at once: no part will join it.
            (self.seal if upload_id in completed else self.notify)(upload_id)
        if rows:
            log.info("spool_resumed", parts=len(rows), bytes=sum(row.size for row in rows))

    def notify(self, upload_id: str) -> None:
        """A part of `upload_id` was spooled: go and flush it."""
        if self._stopping:
            return
        flush = self._uploads.get(upload_id)
        if flush is None or flush.task is None or flush.task.done():
            flush = _UploadFlush(upload_id)
            self._uploads[upload_id] = flush
            flush.task = asyncio.create_task(self._run(flush), name=f"spool-flush-{upload_id[:8]}")
        flush.wake.set()

    def seal(self, upload_id: str) -> None:
        """The upload was completed: send its tail now, without waiting for
        more parts or the idle time."""
        self.notify(upload_id)
        flush = self._uploads.get(upload_id)
        if flush is not None:
            flush.sealed = True

    async def flushed(self, upload_id: str, part_numbers: Sequence[int]) -> None:
        """Wait until none of these parts of `upload_id` is in the spool.

        Raises FlushFailed when they cannot be sent now (no usable bot, or a
        permanent Telegram error); transient trouble is waited out."""
        while True:
            async with session_scope(self._sessionmaker) as session:
                waiting = await SpoolRepository(session).pending_parts(upload_id, part_numbers)
            if not waiting:
                return
            if self._damaged and (damaged := await self._damaged_of(upload_id, waiting)):
                raise FlushFailed(
                    f"spooled part(s) {sorted(damaged)} do not match their MD5: "
                    "the bytes on disk are damaged, upload the part again",
                    final=True,
                )
            self.notify(upload_id)
            flush = self._uploads.get(upload_id)
            if flush is None:
                raise FlushFailed("the service is shutting down", final=True)
            flush.sealed = True
            flush.wake.set()
            error = flush.last_error
            if isinstance(error, FlushFailed) and error.final:
                raise error
            flush.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await flush.changed.wait()

    async def stop(self, grace: float) -> None:
        """Let running sends finish within `grace`, then cancel; what is left
        stays in the spool for the next start."""
        self._stopping = True
        tasks = [f.task for f in self._uploads.values() if f.task is not None]
        for flush in self._uploads.values():
            flush.wake.set()
        if tasks:
            _, running = await asyncio.wait(tasks, timeout=grace)
            for task in running:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- the work on one upload ---------------------------------------------------

    async def _run(self, flush: _UploadFlush) -> None:
        try:
            while not self._stopping:
                try:
                    done = await self._round(flush)
                except asyncio.CancelledError:
                    raise
                except _PartsGone as exc:
                    if not await self._still_spooled(flush.upload_id, exc.spool_ids):
                        # Aborted or replaced meanwhile: nothing to report.
                        log.debug("spool_parts_gone", upload_id=flush.upload_id)
                        continue
                    await self._failed_round(flush, exc)
                    continue
                except Exception as exc:
                    await self._failed_round(flush, exc)
                    continue
                flush.last_error = None
                if done:
                    return
        finally:
            if self._uploads.get(flush.upload_id) is flush:
                del self._uploads[flush.upload_id]
            flush.changed.set()
            if flush.wake.is_set() and not self._stopping:
                # A part came after the last look at the spool: a new run takes it.
                self.notify(flush.upload_id)

    async def _failed_round(self, flush: _UploadFlush, exc: Exception) -> None:
        """Report the failure to whoever waits for the upload, then wait
        before the next round (or until woken)."""
        flush.last_error = exc
        flush.changed.set()
        log.warning(
            "spool_flush_failed",
            upload_id=flush.upload_id,
            error=str(exc),
            retry_in=self._retry_delay,
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._retry_delay):
                while not self._stopping:
                    flush.wake.clear()
                    await flush.wake.wait()

    async def _still_spooled(self, upload_id: str, spool_ids: set[int]) -> bool:
        return any(row.id in spool_ids for row in await self._load(upload_id))

    async def _round(self, flush: _UploadFlush) -> bool:
        """Flush what is spooled (and what comes meanwhile) until nothing is
        left; True when the upload has no spooled part any more."""
        # The round's chunks stay pending until their parts are whole: it runs
        # as one upload for the periodic sweep.
        with self._writer.running():
            return await self._flush_round(flush)

    async def _flush_round(self, flush: _UploadFlush) -> bool:
        queue: deque[_Part] = deque()
        known: set[int] = set()
        chunk_ids: list[int] = []
        cuts = 0  # chunks cut so far
        plan = short_chunks(self._chunk_size, self._writer.parallelism())
        sends: set[asyncio.Task[None]] = set()
        lanes = asyncio.Semaphore(self._writer.parallelism())
        tail = False  # idle long enough: send what is there, full chunk or not
        try:
            while not self._stopping:
                flush.wake.clear()
                rows = await self._load(flush.upload_id)
                for row in rows:
                    if row.id not in known:
                        known.add(row.id)
                        if row.id not in self._damaged:
                            queue.append(
                                _Part(row.id, row.part_number, row.path, row.size, row.md5)
                            )
                await self._drop_vanished(queue, {row.id for row in rows})
                _raise_failed(sends)
                ready = sum(part.size - part.cut for part in queue)
                if not ready and not sends:
                    return not known or not await self._load(flush.upload_id, damaged=False)
                if ready >= self._chunk_size or (ready and (flush.sealed or tail)):
                    tail = False
                    await lanes.acquire()
                    await self._writer.buffers.acquire()
                    # Past the first few, a few bytes short, differing chunk to chunk.
                    segments = _cut(queue, plan.length(cuts))
                    cuts += 1
                    try:
                        data = [await self._read(flush, segments)]
                    except BaseException:
                        self._writer.buffers.release()
                        lanes.release()
                        raise
                    task = asyncio.create_task(
                        self._send(flush, data, segments, chunk_ids, lanes), name="spool-chunk"
                    )
                    del data  # the task's now: its bytes go when it is done
                    sends.add(task)
                    task.add_done_callback(lambda _: flush.wake.set())
                    continue
                # Too little for a full chunk: wait for more parts, a send to
                # end, Complete, or the idle time that flushes a tail anyway.
                try:
                    async with asyncio.timeout(self._idle_flush):
                        await flush.wake.wait()
                except TimeoutError:
                    tail = bool(ready and not sends)
            return False
        finally:
            for task in sends:
                if self._stopping:
                    task.cancel()
            await asyncio.gather(*sends, return_exceptions=True)
            # Chunks of parts that were not committed (replaced, aborted, or
            # this round failed) go; those committed parts use are kept.
            if chunk_ids:
                await self._gc.release_chunks(chunk_ids, reason="failed_upload")

    async def _damaged_of(self, upload_id: str, part_numbers: set[int]) -> set[int]:
        """Which of these spooled parts of the upload were found damaged."""
        return {
            row.part_number
            for row in await self._load(upload_id)
            if row.id in self._damaged and row.part_number in part_numbers
        }

    async def _drop_vanished(self, queue: deque[_Part], current: set[int]) -> None:
        """Parts that are no longer this instance's to send, before any of
        their bytes were cut. A row that went (its pending object deleted or
        replaced, its upload aborted): its file is deleted, which its deleter
        cannot do (the row went with an object row, in SQL). A row another
        instance adopted (this one was taken for dead during a stall): its
        file is the adopter's to flush now, and stays."""
        gone = [part for part in queue if part.cut == 0 and part.row_id not in current]
        if not gone:
            return
        for part in gone:
            queue.remove(part)
        async with session_scope(self._sessionmaker) as session:
            adopted = await SpoolRepository(session).existing(part.row_id for part in gone)
        if adopted:
            log.warning("spool_parts_adopted_elsewhere", parts=len(adopted))
            # The adopter counts them in its spool from now on.
            self._spool.unreserve(sum(part.size for part in gone if part.row_id in adopted))
        await self._spool.delete(part.path for part in gone if part.row_id not in adopted)

    async def _read(self, flush: _UploadFlush, segments: list[_Segment]) -> bytearray:
        """The chunk's bytes from the parts' files, each through its part's
        hash (segments come in part order: `_cut` hands them out so, and
        chunks are read one after another); a part read to its end is
        checked against its MD5 here, before the chunk is sent."""
        failure: FlushFailed | None = None
        data = bytearray(sum(segment.length for segment in segments))
        view = memoryview(data)
        try:
            at = 0
            for segment in segments:
                # Each slice is released once filled and hashed: a slice of a
                # memoryview holds the buffer by itself, even once the view it
                # was cut from is released. Left in a frame that a failed
                # read's traceback keeps until the cyclic GC's next full
                # collection, it kept the whole chunk alive (issue 55: +92 MiB
                # of chunk buffers in 3 minutes of a soak).
                with view[at : at + segment.length] as target:
                    await self._spool.read_into(segment.part.path, segment.offset, target)
                    # hashlib lets go of the GIL for large updates: off the loop.
                    await asyncio.to_thread(segment.part.read.update, target)
                part = segment.part
                if segment.offset + segment.length == part.size:
                    self._check(flush, part)
                at += segment.length
        except FileNotFoundError as exc:
            failure = _PartsGone(str(exc), {segment.part.row_id for segment in segments})
        except OSError as exc:
            failure = FlushFailed(str(exc), final=False)
        finally:
            view.release()
        if failure is not None:
            raise failure
        return data

    def _check(self, flush: _UploadFlush, part: _Part) -> None:
        """The part has been read whole: mark it damaged unless its bytes
        match the MD5 recorded as its file was written."""
        actual = part.read.hexdigest()
        if part.md5 is None or actual == part.md5:
            return
        part.damaged = True
        self._damaged.add(part.row_id)
        log.error(
            "spool_part_damaged",
            upload_id=flush.upload_id,
            part_number=part.part_number,
            path=part.path,
            expected_md5=part.md5,
            actual_md5=actual,
            detail="not stored: reads of its object fail until the part is uploaded again",
        )

    async def _send(
        self,
        flush: _UploadFlush,
        holder: list[bytearray],
        segments: list[_Segment],
        chunk_ids: list[int],
        lanes: asyncio.Semaphore,
    ) -> None:
        failure: FlushFailed | None = None
        data = holder.pop()
        try:
            piece = await self._writer.store_chunk(
                data, label=f"upload {flush.upload_id[:8]}", index=len(chunk_ids)
            )
        except (TelegramError, OSError, InstanceFenced) as exc:
            # Raised below, outside this block: a traceback keeps the frames of
            # the send alive, and with them the chunk's bytes. (Fenced: the
            # part is retried once this instance has registered anew, if it
            # is still its own.)
            final = isinstance(exc, NoUsableBot | PermanentError)
            failure = FlushFailed(str(exc), final=final)
            # The error's own traceback holds the writer's frames, each with the
            # chunk, in a cycle (the frame that re-raised it names it) that
            # only a full collection frees: their locals go now.
            traceback.clear_frames(exc.__traceback__)
        finally:
            data = bytearray()
            self._writer.buffers.release()
            lanes.release()
        if failure is not None:
            raise failure
        chunk_ids.append(piece.chunk_id)
        at = 0
        for segment in segments:
            part = segment.part
            part.pieces[segment.offset] = PieceSpec(piece.chunk_id, at, segment.length)
            part.stored += segment.length
            at += segment.length
            if part.stored == part.size and not part.damaged:
                await self._commit(flush, part)

    async def _commit(self, flush: _UploadFlush, part: _Part) -> None:
        pieces = [part.pieces[offset] for offset in sorted(part.pieces)]

        # Parts of one upload commit side by side, beside its Complete: a
        # deadlock Postgres breaks is retried here, not by a round that would
        # send the part's bytes to Telegram again.
        async def commit(session: AsyncSession) -> bool:
            return await SpoolRepository(session).commit_pieces(part.row_id, pieces)

        committed = await in_transaction(self._sessionmaker, commit)
        await self._spool.delete([part.path])
        log.debug(
            "spool_part_flushed",
            upload_id=flush.upload_id,
            part_number=part.part_number,
            committed=committed,
        )
        flush.changed.set()

    async def _load(self, upload_id: str, *, damaged: bool = True) -> list[SpooledPart]:
        """The upload's spooled parts this instance owns (`damaged`: with
        those found damaged, which are never sent)."""
        async with session_scope(self._sessionmaker) as session:
            rows = await SpoolRepository(session).owned(self._spool.instance_id, upload_id)
        return rows if damaged else [row for row in rows if row.id not in self._damaged]


def _cut(queue: deque[_Part], size: int) -> list[_Segment]:
    """The next chunk: up to `size` bytes from the parts in the queue, in order."""
    segments: list[_Segment] = []
    while size and queue:
        part = queue[0]
        length = min(size, part.size - part.cut)
        segments.append(_Segment(part, part.cut, length))
        part.cut += length
        size -= length
        if part.cut == part.size:
            queue.popleft()
    return segments


def _raise_failed(sends: set[asyncio.Task[None]]) -> None:
    for task in list(sends):
        if not task.done():
            continue
        sends.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
