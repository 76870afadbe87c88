"""A chunk as the pieces its client's body arrived in, sent on as they are.

Joining the pieces into one buffer, and then cutting that buffer into the
pieces the HTTP client sends, were two copies of every byte an upload
forwards: 0.36 and ~0.2 CPU-s per GiB of the event loop's time, for bytes
that were already in memory in pieces of a good size (bench/README.md,
ingest_bench.py). The pieces are `bytes`, so h11 hands each on to the socket
uncopied.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from app.kit.seekable_body import SEND_PIECE, SeekableBody

# A piece this long is sent as it came. A shorter one is joined with its
# short neighbours (up to SEND_PIECE): a slow client's body comes in pieces of
# a few KiB. Chosen when a trip cost 30 us (anyio's sockets), about what
# copying 192 KiB into a fresh buffer costs; at 7 us now, 64 KiB pieces sent
# as they came still cost more than short ones joined (bench/README.md,
# send_pieces_bench.py in bench/README.md), so the bound stays.
UNCOPIED_PIECE = 192 * 1024


class ChunkPieces:
    """A chunk's bytes, in order, as `bytes` pieces: the long ones as they
    came, runs of short ones joined (`_coalesced`). Immutable: the hashing
    thread and every copy's send read it at once."""

    __slots__ = ("_pieces", "_size")

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = tuple(_coalesced(pieces))
        self._size = sum(map(len, self._pieces))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._pieces)

    def __bytes__(self) -> bytes:
        return b"".join(self._pieces)

    def body(self) -> PiecesBody:
        """The chunk as a file to send (close it once sent)."""
        return PiecesBody(self._pieces, self._size)


def contiguous(data: bytes | bytearray | ChunkPieces) -> bytes | bytearray:
    """`data` as one buffer: joined if it is in pieces, else as it is."""
    return bytes(data) if isinstance(data, ChunkPieces) else data


class PiecesBody(SeekableBody):
    """A ChunkPieces as a file (app.telegram.types.DocumentBody). `read`
    hands out a whole piece, uncopied, whatever size is asked (httpx asks
    for 64 KiB). `close()` drops the pieces."""

    def __init__(self, pieces: tuple[bytes, ...], size: int) -> None:
        super().__init__(size)
        self._pieces = pieces
        self._index = 0  # the piece `_position` is in
        self._start = 0  # where that piece starts

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._index, self._start = 0, 0
        return super().seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        piece, within = self._piece_at_position()
        if piece is None:
            return b""
        self._position += len(piece) - within
        return piece if within == 0 else piece[within:]

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        written = 0
        while written < len(out):
            piece, within = self._piece_at_position()
            if piece is None:
                break
            count = min(len(piece) - within, len(out) - written)
            out[written : written + count] = piece[within : within + count]
            written += count
            self._position += count
        return written

    def close(self) -> None:
        self._pieces = ()
        super().close()

    def _piece_at_position(self) -> tuple[bytes | None, int]:
        """The piece holding `_position`, and where in it; (None, 0) at the end."""
        while self._index < len(self._pieces):
            piece = self._pieces[self._index]
            if self._position < self._start + len(piece):
                return piece, self._position - self._start
            self._start += len(piece)
            self._index += 1
        return None, 0


def _coalesced(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """`pieces`, the long ones (UNCOPIED_PIECE or more) as they are, each run
    of short ones joined into pieces of up to SEND_PIECE. A joined piece is
    shorter than UNCOPIED_PIECE only before a long piece or at the end."""
    run: list[bytes] = []
    run_size = 0
    for piece in pieces:
        if not piece:
            continue
        if len(piece) >= UNCOPIED_PIECE:
            if run:
                yield b"".join(run)
                run, run_size = [], 0
            yield piece
            continue
        if run_size + len(piece) > SEND_PIECE:
            yield b"".join(run)
            run, run_size = [], 0
        run.append(piece)
        run_size += len(piece)
    if run:
        yield b"".join(run)
