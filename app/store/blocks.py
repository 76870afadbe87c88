"""What a chunk's bytes must hash to, block by block.

A chunk is cut into blocks of `BLOCK_SIZE` bytes (the last may be shorter),
and the first `DIGEST_BYTES` of each block's digest are stored with the
chunk, in order (`chunks.block_hashes`): 4.8 KiB for a 19 MiB chunk. A read
checks each block it touches before it sends a byte of it, so a small Range
read holds back at most one block (64 KiB, the download budget's unit), not
a whole chunk. The chunk's `sha256` is the SHA-256 of its block digests, one
after another: the scrub checks a whole copy against it without a second
pass over the bytes.

Two digests (`chunks.block_digest` says which a chunk's blocks have):
SHA-256 (NULL: every chunk stored before BLAKE3) and BLAKE3, a quarter of
SHA-256's CPU per byte on the machines measured (bench/README.md,
ingest_bench.py). New chunks get BLAKE3 once every live instance reads it
(`digest_for_new_chunks`, fed by app/store/instance.py): an instance of an
earlier release would take a BLAKE3 chunk's copies for corrupt.

Sixteen bytes of either leave 128 bits: finding other bytes with the same
digest is out of reach, which is what guarding against a changed copy needs.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, TypeVarTuple

import blake3

from app.telegram.chunk_pieces import ChunkPieces

T = TypeVar("T")
Args = TypeVarTuple("Args")

BLOCK_SIZE = 64 * 1024
DIGEST_BYTES = 16

# The block digests a chunk may have: its `chunks.block_digest` (NULL: SHA256).
SHA256 = "sha256"
BLAKE3 = "blake3"
# What this release checks, as every registration of it tells the fleet
# (`instances.block_digests`, comma-separated).
READABLE = f"{SHA256},{BLAKE3}"


# Each digest's hasher, fed a block (or its parts) and cut to DIGEST_BYTES.
# BLAKE3's first 16 bytes are its 16-byte output (an extendable output).
_HASHERS: dict[str, Callable[[bytes | bytearray | memoryview], Any]] = {
    SHA256: hashlib.sha256,
    BLAKE3: blake3.blake3,
}


def digest_for_new_chunks(fleet: Iterable[str]) -> str:
    """BLAKE3 if every live instance reads it (`fleet`: each one's
    `instances.block_digests`), else SHA-256, which every release reads."""
    return BLAKE3 if all(BLAKE3 in readable.split(",") for readable in fleet) else SHA256


def digest_of(kind: str | None) -> str:
    """A chunk's `block_digest` column as a digest name (NULL: SHA-256).
    ValueError for one this release cannot check (a later release's)."""
    name = SHA256 if kind is None else kind
    if name not in _HASHERS:
        raise ValueError(f"block digest {name!r} is unknown to this release")
    return name


def block_digest(block: bytes | bytearray | memoryview, kind: str = SHA256) -> bytes:
    return _truncated(_HASHERS[kind](block))


def block_hashes(data: bytes | bytearray | memoryview | ChunkPieces, kind: str = SHA256) -> bytes:
    """The digests of every block of `data`, one after another."""
    blocks = BlockDigester(kind)
    for piece in data if isinstance(data, ChunkPieces) else (data,):
        blocks.update(piece)
    return blocks.digests()


class BlockDigester:
    """`block_hashes` of bytes given in pieces of any size, in order: a block
    that spans two pieces is hashed across them, uncopied."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._hasher = _HASHERS[kind]
        self._digests: list[bytes] = []
        self._partial: Any = None  # a hasher of the block begun, not yet full
        self._partial_size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        at = 0
        if self._partial is not None:
            at = min(BLOCK_SIZE - self._partial_size, len(view))
            self._partial.update(view[:at])
            self._partial_size += at
            if self._partial_size == BLOCK_SIZE:
                self._digests.append(_truncated(self._partial))
                self._partial = None
        while len(view) - at >= BLOCK_SIZE:
            self._digests.append(_truncated(self._hasher(view[at : at + BLOCK_SIZE])))
            at += BLOCK_SIZE
        if at < len(view):
            self._partial = self._hasher(view[at:])
            self._partial_size = len(view) - at

    def digests(self) -> bytes:
        """Every block's digest, the last one's too if it is short."""
        if self._partial is not None:
            self._digests.append(_truncated(self._partial))
            self._partial = None
        return b"".join(self._digests)


def _truncated(hasher: Any) -> bytes:
    digest: bytes = hasher.digest()
    return digest[:DIGEST_BYTES]


@dataclass(frozen=True, slots=True)
class ChunkDigests:
    """A chunk's block digests, and which digest they are."""

    kind: str
    hashes: bytes


@functools.cache
def _hashing() -> ThreadPoolExecutor:
    """Threads of their own: hashing releases the GIL, so a chunk's hashes
    are computed beside the event loop, and never wait behind other work of
    the default executor (a full one would stall every upload)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="hashing")


async def off_loop(function: Callable[[*Args], T], *args: *Args) -> T:
    """`function(*args)` in a hashing thread."""
    return await asyncio.get_running_loop().run_in_executor(_hashing(), function, *args)


async def block_hashes_off_loop(data: bytes | bytearray | ChunkPieces, kind: str) -> ChunkDigests:
    """`block_hashes(data, kind)`, in a hashing thread."""
    return ChunkDigests(kind, await off_loop(block_hashes, data, kind))


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

    def __init__(self, size: int, sha256: str, hashes: bytes | None, kind: str = SHA256) -> None:
        self._size = size
        self._sha256 = sha256
        self._expected = hashes
        self._kind = kind
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
        digest = block_digest(block, self._kind)
        index = len(self._digests)
        if self._expected is not None and expected_digest(self._expected, index) != digest:
            raise BlockMismatch(index)
        self._digests.append(digest)
