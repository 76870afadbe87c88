"""The download pipeline: stream a byte range of an object back from Telegram.

Only the pieces the range touches are read, and a piece is at most
`FETCH_RANGE` bytes of a chunk: a chunk is fetched as several Range requests
at once, so that one download keeps several Telegram connections busy (each
gives only so much) within the same byte budget. Each piece is fetched by its
own task into a queue: the piece being sent (the current one) streams
straight through, and the next ones are fetched meanwhile (read-ahead). How
far ahead a reader fetches follows its client: it starts with the current
piece and one ahead, and goes deeper (slow start) only after pieces for which
its client waited for Telegram; pieces are started only while the bytes
fetched and not yet sent stay within the reader's window (its equal share of
the buffer), so a slow client holds at most its window and a paused one
starts no fetch. How many bytes the fetches may queue and how many
Telegram connections they may open is decided by the process-wide
`DownloadBudget`, which every download shares.

Nothing waits for ever:

* A client that takes nothing for `stall_seconds` is dropped: its fetches are
  cancelled, its budget goes back, and its connection is aborted (through
  `CONSUMER_ABORT`, which the HTTP server sets for each request).
* A client that waits `stall_seconds` for its next byte has its download
  aborted, whatever held the byte up: Telegram, retries, a 429, or every
  Telegram connection being busy with other downloads.
* Whatever a fetch raises reaches the stream.

A failed read is retried from the byte where it stopped; a 429 waits the
`retry_after` Telegram asks for. getFile's failed-download answer is retried
by the locator (app/store/locator.py); one it could not get past is the
next copy's turn, and counted against this one (`on_unavailable`: it is
missing only once such failures spread over time, app/store/copy_failures.py).
If the read still fails, the headers are long
sent: the connection is aborted (CONSUMER_ABORT) and the stream ends, or,
without that hook, the iterator raises and the server closes the connection.
Either way no short body can pass for a complete one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import structlog

from app.kit.consumer_abort import CONSUMER_ABORT
from app.sealing.layout import FRAME_SIZE
from app.store.blocks import BLOCK_SIZE
from app.store.copy_failures import is_gone, is_unavailable
from app.store.copy_fetch import CopyCorrupt, HashesFound, fetch_checked
from app.store.download_budget import Claim, DownloadBudget
from app.store.errors import ClientStalled, ContentUnavailable, DownloadStalled, ObjectDamaged
from app.store.locator import ChunkLocator, ChunkRef, CopyRef
from app.store.stall_watch import StallWatch
from app.telegram.errors import FilesUnreachable, NoUsableBot, RateLimited, TelegramError

#: A copy found bad: (chunk id, copy id, "missing" or "corrupt").
BadCopy = Callable[[int, int, str], None]
#: A copy Telegram could not serve this time: (chunk id, copy id).
UnavailableCopy = Callable[[int, int], None]
#: A copy served whole and checked: (copy id).
ServedCopy = Callable[[int], None]


class CopyGone(Exception):
    """Telegram says the copy's file, message or chat is gone."""


class CopyUnreachable(Exception):
    """No bot of this instance can reach the copy now."""


class CopyUnavailable(CopyUnreachable):
    """Telegram could not serve the copy, asked again and through a forward."""


log = structlog.get_logger("app.store.reader")

# What the budget counts as one block. httpx hands over at most 64 KiB per read,
# so blocks are seldom cut.
READ_BLOCK = BLOCK_SIZE
FETCH_ATTEMPTS = 4
# The most one fetch asks for: at 40 MB/s per connection and 20 ms to the first
# byte, 4 MiB keeps a connection busy for ~100 ms per request, and a 64 MiB
# buffer still holds 16 of them. A multiple of the block and of the sealed
# frame, so that every fetch starts on a boundary it can check from.
FETCH_RANGE = 4 * 1024 * 1024
assert FETCH_RANGE % BLOCK_SIZE == 0 and FETCH_RANGE % FRAME_SIZE == 0
# The pause between attempts. Tests replace it to see what is waited for
# rather than time it.
_pause = asyncio.sleep

DROPPED_CLIENT = "client_stalled"
DROPPED_TELEGRAM = "telegram_stalled"


@dataclass(frozen=True, slots=True)
class PieceSpan:
    """The part of one piece to send: `length` bytes from `offset` in its chunk."""

    chunk: ChunkRef
    offset: int
    length: int


def split_spans(spans: Sequence[PieceSpan], size: int) -> list[PieceSpan]:
    """`spans` cut at every `size` bytes of their chunk. A chunk stored before
    block digests is kept whole: each of its reads fetches the whole copy."""
    out: list[PieceSpan] = []
    for span in spans:
        chunk = span.chunk
        if chunk.block_hashes is None and chunk.data_key is None:
            out.append(span)
            continue
        position, end = span.offset, span.offset + span.length
        while position < end:
            cut = min(end, (position // size + 1) * size)
            out.append(PieceSpan(chunk, position, cut - position))
            position = cut
    return out


async def first_fetched(stream: AsyncGenerator[bytes]) -> AsyncIterator[bytes]:
    """`stream` with its first block fetched (and checked) now, before the
    caller sends a header: content found damaged is an error it can answer,
    not a 200 cut short."""
    first = await anext(stream, None)
    return _after(first, stream)


async def _after(first: bytes | None, rest: AsyncGenerator[bytes]) -> AsyncIterator[bytes]:
    try:
        if first is not None:
            yield first
        async for data in rest:
            yield data
    finally:
        # At once, not when the garbage collector gets to it: the reader
        # gives its share of the download budget back as it closes.
        await rest.aclose()


class _End:
    pass


_END = _End()


class _Piece:
    """One span being fetched: its budget claim, its queue and its task."""

    def __init__(self, span: PieceSpan, claim: Claim) -> None:
        self.span = span
        self.claim = claim
        self.queue: asyncio.Queue[bytes | _End | BaseException] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def fetch_done(self, task: asyncio.Task[None]) -> None:
        # A finished task keeps its exception, whose traceback holds the frames
        # that hold this piece: a cycle that would keep the queued blocks alive
        # until a full garbage collection.
        self.task = None
        # However the fetch ended, the stream hears of it: a read never hangs.
        if task.cancelled():
            item: _End | BaseException = ContentUnavailable(
                f"the read of chunk {self.span.chunk.chunk_id} was cancelled"
            )
        else:
            item = task.exception() or _END
        self.queue.put_nowait(item)


class RangeReader:
    def __init__(
        self,
        locator: ChunkLocator,
        budget: DownloadBudget,
        *,
        prefetch: int = 1,
        fetch_range: int = FETCH_RANGE,
        stall_seconds: float = 60.0,
        retry_delay: float = 0.5,
        on_bytes: Callable[[int], None] | None = None,
        on_dropped: Callable[[str], None] | None = None,
        on_bad_copy: BadCopy | None = None,
        on_hashes: HashesFound | None = None,
        on_unavailable: UnavailableCopy | None = None,
        on_served: ServedCopy | None = None,
    ) -> None:
        self._locator = locator
        self._on_bad_copy = on_bad_copy
        self._on_unavailable = on_unavailable
        self._on_served = on_served
        self._on_hashes = on_hashes
        self._budget = budget
        self._prefetch = max(0, prefetch)
        if fetch_range <= 0 or fetch_range % BLOCK_SIZE or fetch_range % FRAME_SIZE:
            raise ValueError("fetch_range must be a positive multiple of the block and frame")
        self._fetch_range = fetch_range
        # Set once a file server sends whole files for ranges: then each part
        # of a chunk would cost the whole chunk, and chunks are read whole.
        self._whole_chunks = False
        self._stall = stall_seconds
        self._retry_delay = retry_delay
        self._on_bytes = on_bytes
        self._on_dropped = on_dropped

    async def stream(self, spans: Sequence[PieceSpan]) -> AsyncGenerator[bytes]:
        """Yield the bytes of `spans` in order."""
        if not spans:
            return
        if not self._whole_chunks:
            spans = split_spans(spans, self._fetch_range)
        share = self._budget.open_reader()
        abort = CONSUMER_ABORT.get()
        pieces: list[_Piece] = []
        sent = 0
        launched_bytes = 0
        dropped = False
        # How many pieces beyond `prefetch` may run ahead: doubled after each
        # piece for which the client had to wait for Telegram (slow start),
        # so depth follows what the client takes. Opened all at once, a
        # reader that came a moment before others would take as many fetches
        # as the budget allows one reader alone, and keep them (and what
        # their connections buffered) as a head start over the rest.
        depth = 0
        starved = False

        def launch_ahead() -> None:
            """Start the next pieces: always the current one and `prefetch`
            after it, more as far as `depth` allows while what is fetched
            and unsent fits the window and the pieces ahead fit the reader's
            share of the connections (both shrink as other readers come)."""
            nonlocal launched_bytes
            while len(pieces) < len(spans):
                span = spans[len(pieces)]
                ahead = len(pieces) - current
                if ahead > self._prefetch and (
                    ahead > self._prefetch + depth
                    or launched_bytes - sent + span.length > share.window()
                    or ahead >= share.fair_connections()
                ):
                    return
                piece = _Piece(span, share.claim(current=not pieces))
                piece.task = asyncio.create_task(self._fetch(piece))
                piece.task.add_done_callback(piece.fetch_done)
                pieces.append(piece)
                launched_bytes += span.length

        def drop() -> None:
            nonlocal dropped
            dropped = True
            _cancel(pieces)
            share.close()
            log.warning(
                "download_dropped",
                reason=DROPPED_CLIENT,
                stall_seconds=self._stall,
                bytes_sent=sent,
                first_chunk=spans[0].chunk.chunk_id,
            )
            if self._on_dropped is not None:
                self._on_dropped(DROPPED_CLIENT)
            if abort is not None:
                abort()

        def starve() -> None:
            piece = pieces[current]
            piece.queue.put_nowait(
                DownloadStalled(
                    f"no byte of chunk {piece.span.chunk.chunk_id} came from Telegram "
                    f"for {self._stall:g} s"
                )
            )

        watch = StallWatch(self._stall, on_client=drop, on_source=starve)
        current = 0
        try:
            launch_ahead()
            for current in range(len(spans)):
                launch_ahead()
                piece = pieces[current]
                piece.claim.make_current()
                while True:
                    if piece.queue.empty():
                        watch.waiting_for_source()
                        starved = True
                        item = await piece.queue.get()
                        watch.running()
                    else:
                        item = piece.queue.get_nowait()
                    if isinstance(item, _End):
                        if starved:
                            depth, starved = max(1, 2 * depth), False
                        break
                    if isinstance(item, BaseException):
                        if isinstance(item, DownloadStalled) and self._on_dropped is not None:
                            self._on_dropped(DROPPED_TELEGRAM)
                        # Before the first byte no header is sent yet: the
                        # HTTP layer answers the error itself.
                        first = current == 0 and sent == 0
                        if abort is None or first or not isinstance(item, ContentUnavailable):
                            raise item  # a bug keeps its traceback
                        # An expected failure: one line, not two tracebacks
                        # (Starlette's and uvicorn's) per cut download.
                        log.warning(
                            "download_aborted",
                            error=str(item),
                            bytes_sent=sent,
                            chunk_id=piece.span.chunk.chunk_id,
                        )
                        abort()
                        # One turn for the server to see the connection gone, so
                        # that the response ends without writing anything more.
                        await asyncio.sleep(0)
                        return
                    if self._on_bytes is not None:
                        self._on_bytes(len(item))
                    watch.waiting_for_client()
                    yield item
                    watch.running()
                    if dropped:
                        if abort is not None:
                            return  # the connection is gone: nobody can see an end
                        raise ClientStalled(
                            f"the client took no byte for {self._stall:g} s; dropped"
                        )
                    sent += len(item)
                    piece.claim.give(len(item))
                    launch_ahead()
        finally:
            watch.stop()
            tasks = _cancel(pieces)
            # Shielded: when the client goes away this runs inside the response's
            # cancelled anyio scope, which cancels this task again on every loop
            # turn; an unshielded gather passes each of those on to the fetches
            # and cuts short httpx's closing of their half-read connections,
            # which then stay open (and Telegram's downloads with them) for good.
            with contextlib.suppress(BaseException):
                await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
            share.close()

    async def _fetch(self, piece: _Piece) -> None:
        """The span's bytes from the chunk's copies, intact ones first: a copy
        that is gone or holds wrong bytes is reported and read around, at
        the byte where it stopped; one that keeps failing otherwise is left
        for the next."""
        span = piece.span
        chunk = span.chunk
        progress = _Progress()
        failures: list[str] = []
        damaged = 0
        for copy in chunk.copies:
            try:
                await self._fetch_copy(piece, copy, progress)
                if self._on_served is not None:
                    self._on_served(copy.copy_id)
                return
            except CopyCorrupt as exc:
                damaged += 1
                failures.append(str(exc))
                self._report(chunk, copy, "corrupt", str(exc))
            except CopyGone as exc:
                damaged += 1
                failures.append(str(exc))
                self._report(chunk, copy, "missing", str(exc))
            except CopyUnavailable as exc:
                failures.append(str(exc))
                if chunk.lost:
                    # Found missing before (its failures lasted: the rule of
                    # app/store/copy_failures.py), and Telegram still cannot
                    # serve it: as damaged as a copy found gone.
                    damaged += 1
            except (CopyUnreachable, ContentUnavailable) as exc:
                failures.append(str(exc))
        if chunk.copies and damaged == len(chunk.copies):
            raise ObjectDamaged(
                f"chunk {chunk.chunk_id} has no intact copy left "
                f"({len(chunk.copies)} tried: {'; '.join(failures)})"
            )
        if not chunk.copies:
            raise ObjectDamaged(f"chunk {chunk.chunk_id} has no copy")
        raise ContentUnavailable(
            f"chunk {chunk.chunk_id} could not be read from Telegram: {'; '.join(failures)}"
        )

    async def _fetch_copy(self, piece: _Piece, copy: CopyRef, progress: _Progress) -> None:
        """Queue the span's bytes from `copy`, from `progress.delivered` on;
        retried on errors that may pass (a 429 after the wait it asks for)."""
        span = piece.span
        last_error: TelegramError | None = None
        for attempt in range(1, FETCH_ATTEMPTS + 1):
            try:
                await self._fetch_from(piece, copy, progress)
                return
            except TelegramError as exc:
                if is_gone(exc):
                    raise CopyGone(f"copy {copy.copy_id}: {exc}") from None
                if isinstance(exc, NoUsableBot):
                    # No bot here may reach it now (its chat refuses them
                    # all): the next copy, at once.
                    raise CopyUnreachable(f"copy {copy.copy_id}: {exc}") from None
                if isinstance(exc, FilesUnreachable):
                    # The settings, not the copy: no retry helps.
                    log.error("telegram_files_unreachable", copy_id=copy.copy_id, error=str(exc))
                    raise CopyUnreachable(f"copy {copy.copy_id}: {exc}") from None
                if is_unavailable(exc):
                    # Asked again and through a forward already (the
                    # locator): counted against the copy, the next one read.
                    log.warning("chunk_copy_unavailable", copy_id=copy.copy_id, error=str(exc))
                    if self._on_unavailable is not None:
                        self._on_unavailable(span.chunk.chunk_id, copy.copy_id)
                    raise CopyUnavailable(f"copy {copy.copy_id}: {exc}") from None
                # The next attempt starts at the byte where this one stopped.
                last_error = exc
                log.warning(
                    "chunk_read_failed",
                    chunk_id=span.chunk.chunk_id,
                    copy_id=copy.copy_id,
                    attempt=attempt,
                    delivered=progress.delivered,
                    error=str(exc),
                )
                if attempt == FETCH_ATTEMPTS:
                    break
                if isinstance(exc, RateLimited):
                    # Asking again sooner only earns another 429; a wait longer
                    # than a download may stall would end it anyway.
                    if exc.retry_after > self._stall:
                        raise ContentUnavailable(
                            f"copy {copy.copy_id}: Telegram asks to wait "
                            f"{exc.retry_after:g} s, longer than a download may stall"
                        ) from None
                    await _pause(exc.retry_after)
                else:
                    self._locator.forget(copy)
                    await _pause(self._retry_delay * attempt)
        raise ContentUnavailable(f"copy {copy.copy_id}: {last_error}")

    async def _fetch_from(self, piece: _Piece, copy: CopyRef, progress: _Progress) -> None:
        """Queue the span's bytes from `progress.delivered` on, checked."""
        span, claim = piece.span, piece.claim

        async def deliver(data: bytes) -> None:
            await claim.take(len(data))
            piece.queue.put_nowait(data)
            progress.delivered += len(data)

        chunk = span.chunk
        await self._locator.confirm(copy, chunk.size)
        await claim.connect()
        try:
            start = span.offset + progress.delivered
            await fetch_checked(
                lambda offset, end: self._locator.open_copy(copy, chunk.size, offset, end),
                span.chunk,
                copy,
                start,
                span.offset + span.length,
                deliver,
                self._on_hashes,
                self._ranges_ignored,
            )
        finally:
            claim.disconnect()

    def _ranges_ignored(self) -> None:
        if not self._whole_chunks:
            log.warning("file_server_ignores_range", fallback="whole_chunks")
        self._whole_chunks = True

    def _report(self, chunk: ChunkRef, copy: CopyRef, state: str, error: str) -> None:
        log.warning(
            "chunk_copy_bad",
            chunk_id=chunk.chunk_id,
            copy_id=copy.copy_id,
            state=state,
            error=error,
        )
        if self._on_bad_copy is not None:
            self._on_bad_copy(chunk.chunk_id, copy.copy_id, state)


@dataclass(slots=True)
class _Progress:
    delivered: int = 0


def _cancel(pieces: list[_Piece]) -> list[asyncio.Task[None]]:
    """Cancel the fetches still running, each once; returns them.

    Once: a second cancellation lands in the fetch's `response.aclose()` and
    cuts it short, and httpcore then keeps the half-read connection in its pool
    for good, still reading what Telegram sends into memory."""
    running = [piece.task for piece in pieces if piece.task is not None]
    for task in running:
        if not task.done() and not task.cancelling():
            task.cancel()
    return running
