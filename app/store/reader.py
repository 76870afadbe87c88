"""The download pipeline: stream a byte range of an object back from Telegram.

Only the pieces the range touches are read. Each piece is fetched by its own
task into a bounded buffer: the piece being sent streams straight through,
and the next few are fetched at the same time (prefetch), each holding at most
`buffer_bytes` in memory, so a slow client stalls the fetches rather than
filling memory.

A failed read is retried from the byte where it stopped. If it still fails,
the iterator raises: the HTTP layer has already sent its headers then, and it
must abort the connection rather than end a short body that looks complete.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import structlog

from app.store.errors import ContentUnavailable
from app.store.locator import ChunkLocator, ChunkRef
from app.telegram.errors import TelegramError

log = structlog.get_logger("app.store.reader")

READ_BLOCK = 256 * 1024
FETCH_ATTEMPTS = 4


@dataclass(frozen=True, slots=True)
class PieceSpan:
    """The part of one piece to send: `length` bytes from `offset` in its chunk."""

    chunk: ChunkRef
    offset: int
    length: int


class _End:
    pass


_END = _End()


class RangeReader:
    def __init__(
        self,
        locator: ChunkLocator,
        *,
        prefetch: int = 2,
        buffer_bytes: int = 8 * 1024 * 1024,
        retry_delay: float = 0.5,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._locator = locator
        self._on_bytes = on_bytes
        self._prefetch = max(0, prefetch)
        self._queue_blocks = max(1, buffer_bytes // READ_BLOCK)
        self._retry_delay = retry_delay

    async def stream(self, spans: Sequence[PieceSpan]) -> AsyncIterator[bytes]:
        """Yield the bytes of `spans` in order."""
        queues: list[asyncio.Queue[bytes | _End | BaseException]] = []
        tasks: list[asyncio.Task[None]] = []

        def launch(index: int) -> None:
            queue: asyncio.Queue[bytes | _End | BaseException] = asyncio.Queue(self._queue_blocks)
            queues.append(queue)
            tasks.append(asyncio.create_task(self._fetch(spans[index], queue)))

        try:
            for index in range(min(len(spans), self._prefetch + 1)):
                launch(index)
            for index in range(len(spans)):
                queue = queues[index]
                while True:
                    item = await queue.get()
                    if isinstance(item, _End):
                        break
                    if isinstance(item, BaseException):
                        raise item
                    if self._on_bytes is not None:
                        self._on_bytes(len(item))
                    yield item
                # This piece is done: start the next one in the prefetch window.
                following = index + self._prefetch + 1
                if following < len(spans):
                    launch(following)
        finally:
            for task in tasks:
                task.cancel()
            # Shielded: when the client goes away this runs inside the response's
            # cancelled anyio scope, which cancels this task again on every loop
            # turn; an unshielded gather passes each of those on to the fetches
            # and cuts short httpx's closing of their half-read connections,
            # which then stay open (and Telegram's downloads with them) for good.
            with contextlib.suppress(BaseException):
                await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))

    async def _fetch(
        self, span: PieceSpan, queue: asyncio.Queue[bytes | _End | BaseException]
    ) -> None:
        progress = _Progress()
        last_error: BaseException | None = None
        for attempt in range(1, FETCH_ATTEMPTS + 1):
            try:
                await self._fetch_from(span, progress, queue)
                await queue.put(_END)
                return
            except TelegramError as exc:
                # The next attempt starts at the byte where this one stopped.
                last_error = exc
                log.warning(
                    "chunk_read_failed",
                    chunk_id=span.chunk.chunk_id,
                    attempt=attempt,
                    delivered=progress.delivered,
                    error=str(exc),
                )
                self._locator.forget(span.chunk)
                await asyncio.sleep(self._retry_delay * attempt)
        await queue.put(
            ContentUnavailable(
                f"chunk {span.chunk.chunk_id} could not be read from Telegram: {last_error}"
            )
        )

    async def _fetch_from(
        self,
        span: PieceSpan,
        progress: _Progress,
        queue: asyncio.Queue[bytes | _End | BaseException],
    ) -> None:
        """Send the span's bytes from `progress.delivered` on into the queue."""
        client, file_path = await self._locator.locate(span.chunk)
        skip = span.offset + progress.delivered
        async with client.open_file(file_path) as body:
            async for data in body:
                if skip >= len(data):
                    skip -= len(data)
                    continue
                data = data[skip : skip + span.length - progress.delivered]
                skip = 0
                for start in range(0, len(data), READ_BLOCK):
                    block = data[start : start + READ_BLOCK]
                    await queue.put(block)
                    progress.delivered += len(block)
                if progress.delivered >= span.length:
                    return
        raise TelegramError(
            f"chunk {span.chunk.chunk_id} ended after {progress.delivered} of {span.length} bytes"
        )


@dataclass(slots=True)
class _Progress:
    delivered: int = 0
