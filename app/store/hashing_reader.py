"""A client's upload stream, read only when asked and hashed in order
(the writer's input: app.store.writer)."""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import AsyncIterator, Callable

from app.store.blocks import BLOCK_SIZE, BlockDigester, ChunkDigests, off_loop
from app.store.errors import UploadTooLarge
from app.telegram.chunk_pieces import ChunkPieces

# Taken pieces this big or bigger are hashed in a hashing thread; smaller
# ones (inline objects) on the loop, where a thread's hand-off costs more.
OFF_LOOP_MIN = 256 * 1024
# Hashed three ways before the next: small enough to stay in a core's cache,
# and whole blocks, so that the block digests come out the same.
CACHED_WINDOW = 16 * BLOCK_SIZE


class HashingReader:
    """Reads a client's stream on demand, counting bytes as they arrive, and
    hashes (MD5 and SHA-256) what it hands out.

    Nothing is read before `fill` asks for it: the caller decides when the
    client's bytes may come into memory. A chunk taken is hashed in a hashing
    thread while the event loop goes on reading: on the loop, MD5 and
    SHA-256 were a third of its time during an upload (bench/README.md,
    ingest_bench.py). Each chunk's hashing starts when the one before it is
    done, so the digests follow the stream's order.
    """

    def __init__(
        self,
        stream: AsyncIterator[bytes],
        *,
        max_size: int | None,
        on_bytes: Callable[[int], None] | None,
        block_digest: str | None = None,
        joined: bool = False,
    ) -> None:
        self._stream = stream.__aiter__()
        self._max_size = max_size
        self._on_bytes = on_bytes
        self._block_digest = block_digest
        # Each chunk taken as one piece: a sealed chunk is sealed frame by
        # frame from one buffer, and joining it later would hold it twice.
        self._joined = joined
        self._pending: deque[bytes] = deque()
        self._pending_size = 0
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._sha256 = hashlib.sha256()
        #: The hashing of the last piece taken, if it is off the loop: its
        #: block digests (app.store.blocks) of kind `block_digest`, if given.
        self.hashing: asyncio.Future[ChunkDigests | None] | None = None
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
            if self._on_bytes is not None:
                self._on_bytes(len(data))
            self._pending.append(bytes(data))
            self._pending_size += len(data)

    def take(self, size: int) -> ChunkPieces:
        """The first `size` buffered bytes (or all there are), in the pieces
        they arrived in (app.telegram.chunk_pieces), or `joined`."""
        size = min(size, self._pending_size)
        self._pending_size -= size
        taken: list[bytes] = []
        filled = 0
        while filled < size:
            head = self._pending.popleft()
            if len(head) > size - filled:
                self._pending.appendleft(head[size - filled :])
                head = head[: size - filled]
            taken.append(head)
            filled += len(head)
        chunk = ChunkPieces([b"".join(taken)] if self._joined else taken)
        del taken
        self._hash(chunk)
        return chunk

    async def digests(self) -> tuple[str, str]:
        """(MD5, SHA-256) in hex of everything taken."""
        if self.hashing is not None:
            await self.hashing
        return self._md5.hexdigest(), self._sha256.hexdigest()

    def discard(self) -> None:
        """Stop hashing (the upload failed)."""
        if self.hashing is not None:
            self.hashing.cancel()

    def _hash(self, chunk: ChunkPieces) -> None:
        if self.hashing is None and len(chunk) < OFF_LOOP_MIN:
            _update(self._md5, self._sha256, chunk, None)
        elif chunk:
            self.hashing = asyncio.ensure_future(self._hash_after(self.hashing, chunk))

    async def _hash_after(
        self, previous: asyncio.Future[ChunkDigests | None] | None, chunk: ChunkPieces
    ) -> ChunkDigests | None:
        if previous is not None:
            await previous
        return await off_loop(_update, self._md5, self._sha256, chunk, self._block_digest)


def _update(
    md5: hashlib._Hash, sha256: hashlib._Hash, chunk: ChunkPieces, block_digest: str | None
) -> ChunkDigests | None:
    """MD5 and SHA-256 of `chunk`, and its block digests of kind
    `block_digest` if given, in one pass: window by window, each window
    hashed three ways while it is in the CPU's cache. Three passes over a
    chunk that has left the cache cost 2.9 CPU-s per GiB here, one pass 2.3
    (bench/README.md, ingest_bench.py)."""
    blocks = None if block_digest is None else BlockDigester(block_digest)
    for piece in chunk:
        view = memoryview(piece)
        for start in range(0, len(view), CACHED_WINDOW):
            window = view[start : start + CACHED_WINDOW]
            md5.update(window)
            sha256.update(window)
            if blocks is not None:
                blocks.update(window)
    return None if blocks is None else ChunkDigests(blocks.kind, blocks.digests())
