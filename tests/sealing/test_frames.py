"""The frame format (app/sealing/frames.py): whatever part of a sealed
stream is read comes back exactly, and any change to the stored bytes, or
any frame moved, cut or taken from another stream, is refused."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sealing.frames import FrameCorrupt, FrameOpener, SealedBody, open_all
from app.sealing.keys import copy_cipher, new_data_key, new_salt
from app.sealing.layout import (
    FRAME_SIZE,
    SEALED_FRAME_SIZE,
    TAG_SIZE,
    frame_count,
    largest_plaintext,
    sealed_size,
)

DATA_KEY = new_data_key()
SALT = new_salt()
CIPHER = copy_cipher(DATA_KEY, SALT)
# Up to three frames and a bit: every kind of frame (first, middle, final,
# a short final one, an empty chunk's one empty frame).
SIZES = st.integers(min_value=0, max_value=3 * FRAME_SIZE + 100)


def plaintext(size: int) -> bytes:
    return bytes((i * 7 + i // 251) % 256 for i in range(size))


def seal(data: bytes, cipher: object = CIPHER) -> bytes:
    body = SealedBody(cipher, data)  # type: ignore[arg-type]
    sealed = body.read()
    assert sealed is not None and len(sealed) == len(body) == sealed_size(len(data))
    return sealed


def read_range(sealed: bytes, size: int, start: int, end: int, *, whole: bool) -> bytes:
    """What a Range read of [start, end) gets: from the first frame it
    touches (or, `whole`, from a server that ignored the Range and sent
    everything), fed in uneven pieces."""
    first = start // FRAME_SIZE
    at = 0 if whole else first * SEALED_FRAME_SIZE
    opener = FrameOpener(CIPHER, size, first, at=at)
    got = bytearray()
    stream = sealed[at:]
    for cut in range(0, len(stream), 5000):
        for index, frame in opener.feed(stream[cut : cut + 5000]):
            got += frame
            if index * FRAME_SIZE + len(frame) >= end:
                base = first * FRAME_SIZE
                return bytes(got[start - base : end - base])
    opener.finish()
    base = first * FRAME_SIZE
    return bytes(got[start - base : end - base])


@given(SIZES, st.data())
def test_any_range_of_a_sealed_stream_reads_back_exactly(size: int, data: st.DataObject) -> None:
    plain = plaintext(size)
    sealed = seal(plain)
    start = data.draw(st.integers(min_value=0, max_value=max(0, size - 1)))
    end = data.draw(st.integers(min_value=min(start + 1, size), max_value=size))
    whole = data.draw(st.booleans())
    assert read_range(sealed, size, start, end, whole=whole) == plain[start:end]
    assert open_all(CIPHER, size, sealed) == plain


@given(SIZES, st.data())
def test_any_single_bit_flipped_anywhere_is_refused(size: int, data: st.DataObject) -> None:
    sealed = bytearray(seal(plaintext(size)))
    bit = data.draw(st.integers(min_value=0, max_value=len(sealed) * 8 - 1))
    sealed[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(FrameCorrupt):
        open_all(CIPHER, size, sealed)


def test_swapped_frames_are_refused() -> None:
    size = 3 * FRAME_SIZE
    sealed = seal(plaintext(size))
    frames = [sealed[i : i + SEALED_FRAME_SIZE] for i in range(0, len(sealed), SEALED_FRAME_SIZE)]
    swapped = frames[1] + frames[0] + frames[2]
    with pytest.raises(FrameCorrupt, match="frame 0"):
        open_all(CIPHER, size, swapped)


def test_a_stream_cut_at_a_frame_boundary_is_refused_even_with_a_size_to_match() -> None:
    """The final flag: the first frame of two does not pass for a whole
    one-frame chunk, and a stream that just ends is refused too."""
    sealed = seal(plaintext(2 * FRAME_SIZE))
    first = sealed[:SEALED_FRAME_SIZE]
    with pytest.raises(FrameCorrupt, match="frame 0"):
        open_all(CIPHER, FRAME_SIZE, first)
    with pytest.raises(FrameCorrupt, match="ends in frame 1"):
        open_all(CIPHER, 2 * FRAME_SIZE, first)
    with pytest.raises(FrameCorrupt):
        open_all(CIPHER, 2 * FRAME_SIZE, sealed[:-1])


def test_a_frame_from_another_copy_or_chunk_is_refused() -> None:
    """Each copy seals under a key of its own (another salt, or another
    chunk's data key): the same plaintext at the same place, still refused."""
    size = 2 * FRAME_SIZE
    plain = plaintext(size)
    ours = seal(plain)
    for other in (copy_cipher(DATA_KEY, new_salt()), copy_cipher(new_data_key(), SALT)):
        theirs = seal(plain, other)
        assert theirs != ours
        spliced = ours[:SEALED_FRAME_SIZE] + theirs[SEALED_FRAME_SIZE:]
        with pytest.raises(FrameCorrupt, match="frame 1"):
            open_all(CIPHER, size, spliced)


def test_a_sealed_body_reads_the_same_after_a_seek_and_in_any_pieces() -> None:
    """What a retried send relies on: seek(0) and read again, the same bytes."""
    plain = plaintext(2 * FRAME_SIZE + 3)
    body = SealedBody(CIPHER, bytearray(plain))
    first = body.read()
    assert body.seek(0, io.SEEK_END) == len(first or b"")
    body.seek(0)
    pieces = b""
    while chunk := body.read(7777):
        pieces += chunk
    assert pieces == first
    body.close()


def test_the_layout_arithmetic() -> None:
    assert frame_count(0) == 1 and sealed_size(0) == TAG_SIZE
    assert sealed_size(FRAME_SIZE) == SEALED_FRAME_SIZE
    assert sealed_size(FRAME_SIZE + 1) == FRAME_SIZE + 1 + 2 * TAG_SIZE
    # Telegram's 20 MB: the largest chunk that fits, sealed, and one more byte does not.
    limit = 20 * 10**6
    largest = largest_plaintext(limit)
    assert sealed_size(largest) <= limit < sealed_size(largest + 1)
    assert largest == 19_995_104


@given(SIZES, st.sampled_from([1, 4096, SEALED_FRAME_SIZE, 3 * SEALED_FRAME_SIZE]))
def test_a_sealed_body_read_in_any_steps_is_the_sealed_stream_again_after_a_seek(
    size: int, step: int
) -> None:
    """httpx reads a body in steps of its own choosing and, on a retry,
    from 0 again: both times it must get the same sealed stream."""
    plain = plaintext(size)
    body = SealedBody(CIPHER, plain)
    first = b"".join(iter(lambda: body.read(step), b""))
    body.seek(0)
    again = b"".join(iter(lambda: body.read(step), b""))

    assert first == again
    assert len(first) == len(body) == sealed_size(size)
    assert open_all(CIPHER, size, first) == plain
