"""AES-256-GCM frames: sealing, opening, and the streams of both.

Every key seals exactly one stream (a copy key is derived from a chunk's
random data key and the copy's random salt: app.sealing.keys.copy_cipher),
so the frame index alone is a nonce that never repeats under a key. The
associated data binds each frame to its place: the index (a frame moved
within the stream fails) and whether it is the last (a stream cut at a frame
boundary fails). Which chunk a frame belongs to is bound by the key itself:
a frame of another chunk or copy was sealed under another key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.kit.seekable_body import SEND_PIECE, SeekableBody
from app.sealing.layout import (
    FRAME_SIZE,
    SEALED_FRAME_SIZE,
    TAG_SIZE,
    frame_count,
    frame_plaintext_size,
    sealed_size,
)

MAGIC = b"TUF1"


class FrameCorrupt(Exception):
    """A frame did not open: wrong bytes, wrong place, wrong key or cut short."""


def _nonce(index: int) -> bytes:
    return index.to_bytes(12, "big")


def _aad(index: int, final: bool) -> bytes:
    return MAGIC + index.to_bytes(8, "big") + (b"\x01" if final else b"\x00")


def seal_frame(cipher: AESGCM, index: int, plaintext: bytes | memoryview, *, final: bool) -> bytes:
    return cipher.encrypt(_nonce(index), plaintext, _aad(index, final))


def open_frame(
    cipher: AESGCM, index: int, sealed: bytes | bytearray | memoryview, *, final: bool
) -> bytes:
    try:
        return cipher.decrypt(_nonce(index), sealed, _aad(index, final))
    except InvalidTag:
        raise FrameCorrupt(f"frame {index} does not open") from None


class FrameOpener:
    """Opens a sealed stream of a chunk of `size` plaintext bytes from frame
    `first` on, fed as it arrives. `at` is the sealed offset the fed bytes
    start from (0 when the server sent the whole file): the bytes before
    frame `first` are skipped unheld."""

    def __init__(self, cipher: AESGCM, size: int, first: int, *, at: int = 0) -> None:
        self._cipher = cipher
        self._size = size
        self._frames = frame_count(size)
        self._index = first
        self._skip = max(0, first * SEALED_FRAME_SIZE - at)
        self._pending = bytearray()

    @property
    def done(self) -> bool:
        return self._index >= self._frames

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[int, bytes]]:
        """(frame index, plaintext) of every frame the bytes complete."""
        view = memoryview(data)
        if self._skip:
            skipped = min(self._skip, len(view))
            self._skip -= skipped
            view = view[skipped:]
        while view:
            if self.done:
                raise FrameCorrupt("the stream is longer than its chunk")
            want = frame_plaintext_size(self._size, self._index) + TAG_SIZE
            take = min(want - len(self._pending), len(view))
            self._pending += view[:take]
            view = view[take:]
            if len(self._pending) < want:
                return
            index = self._index
            final = index == self._frames - 1
            plaintext = open_frame(self._cipher, index, self._pending, final=final)
            self._pending.clear()
            self._index += 1
            yield index, plaintext

    def finish(self) -> None:
        """Raises FrameCorrupt unless every frame has been opened."""
        if not self.done:
            raise FrameCorrupt(f"the stream ends in frame {self._index} of {self._frames}")


def open_all(cipher: AESGCM, size: int, sealed: bytes | bytearray | memoryview) -> bytes:
    """The plaintext of a whole sealed stream (tests, small objects)."""
    opener = FrameOpener(cipher, size, 0)
    plaintext = b"".join(frame for _, frame in opener.feed(sealed))
    opener.finish()
    return plaintext


class SealedBody(SeekableBody):
    """A chunk as its sealed stream, sealed frame by frame as it is read: the
    sealed chunk is never whole in memory (one frame is). A retry reads it
    again from 0 and gets the same bytes (the same key and nonces: nothing
    new is sealed under a nonce). `close()` drops the plaintext at once."""

    def __init__(self, cipher: AESGCM, plaintext: bytes | bytearray | memoryview) -> None:
        plain = memoryview(plaintext)
        super().__init__(sealed_size(len(plain)))
        self._cipher = cipher
        self._plain = plain
        self._size = len(plain)
        self._frames = frame_count(self._size)
        self._frame_index = -1
        self._frame = b""

    def read(self, size: int = -1) -> bytes:
        """Sealed frames to the end of the one that reaches SEND_PIECE bytes,
        whatever `size` asks: httpx asks for 64 KiB, one frame, and each read
        is a trip through it that costs more than the sealing's copy."""
        wanted = self._length - self._position if size < 0 else max(size, SEND_PIECE)
        parts: list[bytes] = []
        got = 0
        while got < wanted and self._position < self._length:
            index, within = divmod(self._position, SEALED_FRAME_SIZE)
            frame = self._sealed(index)
            part = frame[within:] if within else frame
            parts.append(part)
            got += len(part)
            self._position += len(part)
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        written = 0
        while written < len(out) and self._position < self._length:
            index, within = divmod(self._position, SEALED_FRAME_SIZE)
            frame = self._sealed(index)
            count = min(len(frame) - within, len(out) - written)
            out[written : written + count] = frame[within : within + count]
            written += count
            self._position += count
        return written

    def _sealed(self, index: int) -> bytes:
        if index != self._frame_index:
            start = index * FRAME_SIZE
            plain = self._plain[start : start + frame_plaintext_size(self._size, index)]
            self._frame = seal_frame(self._cipher, index, plain, final=index == self._frames - 1)
            self._frame_index = index
        return self._frame

    def close(self) -> None:
        self._plain.release()
        self._frame = b""
        super().close()
