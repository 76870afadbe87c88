"""Reading bytes of one copy of a chunk, each checked before it is handed on.

A read of chunk bytes [start, end) asks Telegram's file server for the copy
from the start of the first block it touches to the end of the last one (a
Range request: the server serves static files and honours it; one that sends
the whole file instead is read from 0, the blocks before `start` skipped
unheld, and `on_whole_file` hears of it so that the reader stops asking for
parts of chunks). Every block the
range touches is hashed when it is complete and compared with the digest
stored for it (app.store.blocks).
Only then are its bytes in the range handed on. A block that does not match
raises CopyCorrupt: the caller reads around it, from another copy, at the
byte where this one stopped.

A chunk stored before verified reads has no block digests, only the SHA-256
of its whole bytes: its copy is read whole into a temporary file (on disk,
not in memory), checked, and only then handed on; its block digests are
reported (`on_hashes`) so that the next read goes block by block.

A sealed chunk (docs/encryption.md) is read from the first frame the range
touches, at its sealed offset; every frame is opened (its tag checked)
before a byte of it is handed on, and one that does not open raises
CopyCorrupt, exactly as a block with the wrong hash does.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from app.sealing.layout import FRAME_SIZE, SEALED_FRAME_SIZE
from app.store import encryption
from app.store.blocks import (
    BLOCK_SIZE,
    BlockMismatch,
    WholeChunkCheck,
    block_digest,
    expected_digest,
    hashes_root,
)
from app.store.locator import ChunkRef, CopyRef, Opened
from app.telegram.errors import TelegramError

#: Hands on checked bytes (the reader: its budget, then its queue).
Deliver = Callable[[bytes], Awaitable[None]]
#: A legacy chunk read whole and found right: (chunk id, block digests, root).
HashesFound = Callable[[int, bytes, str], None]
#: The file server sent a whole file where a range of it was asked for.
WholeFileSent = Callable[[], None]
#: Opens the copy from a byte (to another, exclusive, if given):
#: ChunkLocator.open_copy for one copy.
OpenAt = Callable[[int, int | None], AbstractAsyncContextManager[Opened]]

# How much of a legacy copy is handed on at a time (the budget's unit).
_HAND_ON = 64 * 1024


class CopyCorrupt(Exception):
    """A copy's bytes are not the chunk's: read around it."""


async def fetch_checked(
    open_at: OpenAt,
    chunk: ChunkRef,
    copy: CopyRef,
    start: int,
    end: int,
    deliver: Deliver,
    on_hashes: HashesFound | None = None,
    on_whole_file: WholeFileSent | None = None,
) -> None:
    """Hand on chunk bytes [start, end) of `copy`, every one checked."""
    if chunk.data_key is not None:
        await _fetch_sealed(open_at, chunk, copy, start, end, deliver, on_whole_file)
        return
    if chunk.block_hashes is None:
        await _fetch_legacy(open_at, chunk, copy, start, end, deliver, on_hashes)
        return
    hashes = chunk.block_hashes
    first_block = start // BLOCK_SIZE
    last_end = min(-(-end // BLOCK_SIZE) * BLOCK_SIZE, chunk.size)
    block = bytearray()
    # From the first block the range touches to the end of the last: the bytes
    # outside are never downloaded where the file server honours the Range.
    async with open_at(first_block * BLOCK_SIZE, last_end) as (
        served,
        body,
    ):
        if served < first_block * BLOCK_SIZE and on_whole_file is not None:
            on_whole_file()
        position = served  # the chunk offset of the next byte the copy sends
        async for data in body:
            view = memoryview(data)
            while view:
                if position >= chunk.size:
                    raise CopyCorrupt(
                        f"copy {copy.copy_id} of chunk {chunk.chunk_id} is longer than the chunk"
                    )
                index = position // BLOCK_SIZE
                block_end = min((index + 1) * BLOCK_SIZE, chunk.size)
                count = min(len(view), block_end - position)
                if index >= first_block:
                    block += view[:count]
                view = view[count:]
                position += count
                if index < first_block or position < block_end:
                    continue  # a block before the range (never held), or not whole yet
                if block_digest(block, chunk.block_digest) != expected_digest(hashes, index):
                    raise CopyCorrupt(
                        f"copy {copy.copy_id} of chunk {chunk.chunk_id}: block {index} "
                        "does not match its stored hash"
                    )
                block_start = index * BLOCK_SIZE
                first = max(start, block_start) - block_start
                await deliver(bytes(block[first : min(end, block_end) - block_start]))
                if block_end >= end:
                    await _see_end(body, served == first_block * BLOCK_SIZE)
                    return
                block.clear()
    raise TelegramError(
        f"copy {copy.copy_id} of chunk {chunk.chunk_id} ended after {position} of "
        f"{chunk.size} bytes"
    )


async def _see_end(body: AsyncIterator[bytes], ranged: bool) -> None:
    """Let the HTTP client see the end of a range whose last byte is read, so
    that its connection goes back to the pool: one closed half-read costs the
    next part a new TCP and TLS handshake. Only one more read, and only for a
    range answered as such (a whole file may have megabytes left)."""
    if ranged:
        await anext(body, None)


async def _fetch_sealed(
    open_at: OpenAt,
    chunk: ChunkRef,
    copy: CopyRef,
    start: int,
    end: int,
    deliver: Deliver,
    on_whole_file: WholeFileSent | None,
) -> None:
    assert chunk.data_key is not None
    if copy.salt is None:
        raise CopyCorrupt(f"copy {copy.copy_id} of sealed chunk {chunk.chunk_id} has no salt")
    first = start // FRAME_SIZE
    last = -(-end // FRAME_SIZE)  # the frame after the last one the range touches
    from app.sealing.frames import FrameCorrupt

    async with open_at(first * SEALED_FRAME_SIZE, last * SEALED_FRAME_SIZE) as (served, body):
        if served < first * SEALED_FRAME_SIZE and on_whole_file is not None:
            on_whole_file()
        frames = encryption.opener(chunk.data_key, copy.salt, chunk.size, first, at=served)
        try:
            async for data in body:
                for index, plain in frames.feed(data):
                    frame_start = index * FRAME_SIZE
                    frame_end = frame_start + len(plain)
                    lo = max(start, frame_start) - frame_start
                    if wanted := plain[lo : min(end, frame_end) - frame_start]:
                        await deliver(wanted)
                    if frame_end >= end:
                        await _see_end(body, served == first * SEALED_FRAME_SIZE)
                        return
        except FrameCorrupt as exc:
            raise CopyCorrupt(f"copy {copy.copy_id} of chunk {chunk.chunk_id}: {exc}") from None
    raise TelegramError(
        f"copy {copy.copy_id} of sealed chunk {chunk.chunk_id} ended before byte {end}"
    )


async def _fetch_legacy(
    open_at: OpenAt,
    chunk: ChunkRef,
    copy: CopyRef,
    start: int,
    end: int,
    deliver: Deliver,
    on_hashes: HashesFound | None,
) -> None:
    check = WholeChunkCheck(chunk.size, chunk.sha256, None)
    with tempfile.TemporaryFile(prefix="teleuploader-chunk-") as whole:
        async with open_at(0, None) as (_start, body):
            async for data in body:
                check.feed(data)
                whole.write(data)
        try:
            hashes = check.finish()
        except (BlockMismatch, ValueError) as exc:
            raise CopyCorrupt(f"copy {copy.copy_id} of chunk {chunk.chunk_id}: {exc}") from None
        if on_hashes is not None:
            on_hashes(chunk.chunk_id, hashes, hashes_root(hashes))
        whole.seek(start)
        left = end - start
        while left > 0:
            data = whole.read(min(_HAND_ON, left))
            if not data:
                raise CopyCorrupt(f"copy {copy.copy_id} of chunk {chunk.chunk_id} is short")
            left -= len(data)
            await deliver(data)
