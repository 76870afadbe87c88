"""What a chunk's bytes must hash to, block by block.

A chunk is cut into blocks of `BLOCK_SIZE` bytes (the last may be shorter),
and the first `DIGEST_BYTES` of each block's SHA-256 are stored with the
chunk, in order (`chunks.block_hashes`): 4.8 KiB for a 19 MiB chunk. A read
checks each block it touches before it sends a byte of it, so a small Range
read holds back at most one block (64 KiB, the download budget's unit), not
a whole chunk. The chunk's `sha256` is the SHA-256 of its block digests, one
after another: the scrub checks a whole copy against it without a second
pass over the bytes.

Sixteen bytes of SHA-256 leave 128 bits: finding other bytes with the same
digest is out of reach, which is what guarding against a changed copy needs.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, TypeVarTuple

T = TypeVar("T")
Args = TypeVarTuple("Args")

BLOCK_SIZE = 64 * 1024
DIGEST_BYTES = 16


def block_digest(block: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(block).digest()[:DIGEST_BYTES]


def block_hashes(data: bytes | bytearray | memoryview) -> bytes:
    """The digests of every block of `data`, one after another."""
    view = memoryview(data)
    return b"".join(
        block_digest(view[start : start + BLOCK_SIZE]) for start in range(0, len(view), BLOCK_SIZE)
    )


@functools.cache
def _hashing() -> ThreadPoolExecutor:
    """Threads of their own: hashing releases the GIL, so a chunk's hashes
    are computed beside the event loop, and never wait behind other work of
    the default executor (a full one would stall every upload)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="hashing")


async def off_loop(function: Callable[[*Args], T], *args: *Args) -> T:
    """`function(*args)` in a hashing thread."""
    return await asyncio.get_running_loop().run_in_executor(_hashing(), function, *args)


async def block_hashes_off_loop(data: bytes | bytearray) -> bytes:
    """`block_hashes(data)`, in a hashing thread."""
    return await off_loop(block_hashes, data)


def hashes_root(hashes: bytes) -> str:
    """The chunk's `sha256`: the SHA-256 of its block digests (hex)."""
    return hashlib.sha256(hashes).hexdigest()


def blocks_in(size: int) -> int:
    return -(-size // BLOCK_SIZE)


def expected_digest(hashes: bytes, index: int) -> bytes:
    return hashes[index * DIGEST_BYTES : (index + 1) * DIGEST_BYTES]


class BlockMismatch(Exception):
    """A block of a copy does not hash to what was stored for it."""

    def __init__(self, index: int) -> None:
        super().__init__(f"block {index} does not match its stored hash")
        self.index = index


class WholeChunkCheck:
    """Hashes a copy read from its first byte to its last, for a chunk whose
    block digests are known (each block checked as it completes) or not (the
    whole SHA-256 checked at the end, and the digests made on the way)."""

    def __init__(self, size: int, sha256: str, hashes: bytes | None) -> None:
        self._size = size
        self._sha256 = sha256
        self._expected = hashes
        self._whole = hashlib.sha256() if hashes is None else None
        self._pending = bytearray()
        self._digests: list[bytes] = []
        self._seen = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """More of the copy; raises BlockMismatch at the first wrong block."""
        if self._whole is not None:
            self._whole.update(data)
        self._seen += len(data)
        self._pending += data
        while len(self._pending) >= BLOCK_SIZE:
            self._close_block(bytes(self._pending[:BLOCK_SIZE]))
            del self._pending[:BLOCK_SIZE]

    def finish(self) -> bytes:
        """The block digests; raises BlockMismatch (or ValueError for a copy
        of the wrong length) unless every byte was right."""
        if self._pending:
            self._close_block(bytes(self._pending))
            self._pending.clear()
        if self._seen != self._size:
            raise ValueError(f"the copy has {self._seen} bytes, the chunk {self._size}")
        hashes = b"".join(self._digests)
        if self._whole is not None and self._whole.hexdigest() != self._sha256:
            raise BlockMismatch(-1)
        if self._expected is not None and hashes_root(hashes) != self._sha256:
            # The stored digests themselves disagree with the stored root.
            raise BlockMismatch(-1)
        return hashes

    def _close_block(self, block: bytes) -> None:
        digest = block_digest(block)
        index = len(self._digests)
        if self._expected is not None and expected_digest(self._expected, index) != digest:
            raise BlockMismatch(index)
        self._digests.append(digest)
