"""A document's bytes as a file that can be read again from 0.

httpx sends a file with a known length as a Content-Length body, and a send
that is retried reads it again from the start. Every document we send is
such a file: a chunk in one buffer (app.telegram.client), a chunk in the
pieces it arrived in (app.telegram.chunk_pieces), a sealed stream
(app.sealing.frames). They differ only in how they read.
"""

from __future__ import annotations

import io

# Bytes a body hands the connection at a time (at least, when it can): each
# read is a trip through httpx, httpcore, h11 and a socket write, about 7 us
# of CPU here (bench/README.md, send_pieces_bench.py: 19 MiB in 8 KiB pieces cost 1.6
# CPU-s per GiB sent, in 1 MiB pieces 0.5; 30 us a trip on anyio's sockets).
SEND_PIECE = 1024 * 1024


class SeekableBody(io.RawIOBase):
    """Readable and seekable, `length` bytes long; a subclass reads from
    `_position` and moves it."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self._length = length
        self._position = 0

    def __len__(self) -> int:
        return self._length

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}
        self._position = max(0, base[whence] + offset)
        return self._position
