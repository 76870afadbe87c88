"""The process-wide budget of chunk buffers for uploads.

Every chunk an upload holds in memory (being filled from the client, or being
sent to Telegram) holds one buffer from this pool, and the pool has a fixed
number of them (`UPLOAD_BUFFER_CHUNKS`). However many clients upload at once,
upload memory stays near buffers x chunk size: an upload that finds no free
buffer waits, and while it waits nobody reads its socket, so TCP slows the
client down instead of the process growing.

Waiting uploads are served first come, first served, and an upload asks for one
buffer at a time, so buffers go round-robin between the uploads that want
them: one 50 GiB upload cannot starve a 1 MiB one.
"""

from __future__ import annotations

import asyncio
from collections import deque


class UploadBuffers:
    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("the upload budget needs at least one buffer")
        self.count = count
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def in_use(self) -> int:
        return self.count - self._free

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        """Take one buffer, waiting in line for it if none is free."""
        if self._free and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Handed a buffer in the same turn as the cancel: pass it on.
                self.release()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Give one buffer back: to the first upload waiting, else to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
        if self._free > self.count:
            raise RuntimeError("more upload buffers released than acquired")
