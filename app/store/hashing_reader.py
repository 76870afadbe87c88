"""A client's upload stream, read only when asked and hashed as it comes
(the writer's input: app.store.writer)."""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import AsyncIterator, Callable

from app.store.errors import UploadTooLarge


class HashingReader:
    """Reads a client's stream on demand, hashing and counting as bytes arrive.

    Nothing is read before `read` asks for it: the caller decides when the
    client's bytes may come into memory.
    """

    def __init__(
        self,
        stream: AsyncIterator[bytes],
        *,
        max_size: int | None,
        on_bytes: Callable[[int], None] | None,
    ) -> None:
        self._stream = stream.__aiter__()
        self._max_size = max_size
        self._on_bytes = on_bytes
        self._pending: deque[bytes] = deque()
        self._pending_size = 0
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.sha256 = hashlib.sha256()
        self.total = 0
        self.eof = False

    @property
    def buffered(self) -> int:
        return self._pending_size

    async def fill(self, size: int) -> None:
        """Read until `size` bytes are buffered or the stream ends."""
        while self._pending_size < size and not self.eof:
            try:
                data = await anext(self._stream)
            except StopAsyncIteration:
                self.eof = True
                break
            if not data:
                continue
            self.total += len(data)
            if self._max_size is not None and self.total > self._max_size:
                raise UploadTooLarge(self._max_size)
            self.md5.update(data)
            self.sha256.update(data)
            if self._on_bytes is not None:
                self._on_bytes(len(data))
            self._pending.append(bytes(data))
            self._pending_size += len(data)

    def take(self, size: int) -> bytearray:
        """The first `size` buffered bytes (or all there are), as one buffer.

        Copied piece by piece into a buffer of the final size, each piece
        dropped as soon as it is in: joining would hold the chunk twice."""
        size = min(size, self._pending_size)
        self._pending_size -= size
        chunk = bytearray(size)
        filled = 0
        while filled < size:
            head = self._pending.popleft()
            if len(head) > size - filled:
                self._pending.appendleft(head[size - filled :])
                head = head[: size - filled]
            chunk[filled : filled + len(head)] = head
            filled += len(head)
        return chunk
