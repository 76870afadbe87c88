"""A chunk kept in the pieces it arrived in (app/telegram/chunk_pieces.py):
however a client's body was cut, what is sent is its bytes exactly, again
on a retry; long pieces go out as they came (the copy it saves is the
point); and the block digests made piece by piece are the ones a read
checks (app/store/blocks.py)."""

from __future__ import annotations

import hashlib
import io
import random

import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store.blocks import BLAKE3, BLOCK_SIZE, SHA256, BlockDigester, block_hashes
from app.telegram.chunk_pieces import SEND_PIECE, UNCOPIED_PIECE, ChunkPieces, contiguous

# Up to two SEND_PIECEs and a bit, in pieces from one byte up.
SIZES = st.integers(min_value=0, max_value=2 * SEND_PIECE + 123)


def cut(data: bytes, draw: st.DataObject) -> list[bytes]:
    """`data` in pieces whose sizes hypothesis picks: tiny, around
    UNCOPIED_PIECE, and long; whatever they leave is one last long piece.
    (Drawn as one list: a draw per piece made hypothesis the test's cost.)"""
    sizes = draw.draw(
        st.lists(
            st.one_of(
                st.integers(1, 100),
                st.integers(UNCOPIED_PIECE - 2, UNCOPIED_PIECE + 2),
                st.integers(1, 3 * UNCOPIED_PIECE),
            ),
            max_size=24,
        )
    )
    pieces = []
    at = 0
    for size in sizes:
        if at >= len(data):
            break
        pieces.append(data[at : at + size])
        at += size
    if at < len(data):
        pieces.append(data[at:])
    return pieces


def body_bytes(chunk: ChunkPieces, read_size: int) -> bytes:
    body = chunk.body()
    assert body.seek(0, io.SEEK_END) == len(body) == len(chunk)
    body.seek(0)
    return b"".join(iter(lambda: body.read(read_size), b""))


@settings(max_examples=60, deadline=None)
@given(SIZES, st.data())
def test_any_cut_is_sent_exactly_and_again_on_a_retry(size: int, draw: st.DataObject) -> None:
    data = random.Random(size).randbytes(size)
    pieces = cut(data, draw)
    chunk = ChunkPieces(pieces)

    assert len(chunk) == len(data)
    assert bytes(chunk) == data
    read_size = draw.draw(st.sampled_from([1, 4096, 65536, -1]))
    assert body_bytes(chunk, read_size) == data
    assert body_bytes(chunk, read_size) == data  # a retry reads it again from 0
    # A long piece goes out as the very object the client's body gave; short
    # ones are joined, to no more than SEND_PIECE, and a joined piece is short
    # only when it is the last or a long piece follows it.
    sent = list(chunk)
    long_ones = [piece for piece in pieces if len(piece) >= UNCOPIED_PIECE]
    assert all(any(piece is out for out in sent) for piece in long_ones)
    for index, piece in enumerate(sent):
        if any(piece is long for long in long_ones):
            continue
        assert len(piece) <= SEND_PIECE
        if index + 1 < len(sent) and len(sent[index + 1]) < UNCOPIED_PIECE:
            assert len(piece) >= UNCOPIED_PIECE


@settings(max_examples=30, deadline=None)
@given(SIZES, st.data())
def test_readinto_from_anywhere_reads_what_is_there(size: int, draw: st.DataObject) -> None:
    data = random.Random(size).randbytes(size)
    body = ChunkPieces(cut(data, draw)).body()
    start = draw.draw(st.integers(0, size))
    buffer = bytearray(draw.draw(st.integers(1, 2 * UNCOPIED_PIECE)))

    body.seek(start)
    count = body.readinto(buffer)

    expected = data[start : start + len(buffer)]
    assert bytes(buffer[:count]) == expected
    assert body.tell() == start + len(expected)


@settings(max_examples=60, deadline=None)
@given(SIZES, st.sampled_from([SHA256, BLAKE3]), st.data())
def test_block_digests_made_piece_by_piece_are_the_blocks_own(
    size: int, kind: str, draw: st.DataObject
) -> None:
    data = random.Random(size).randbytes(size)
    blocks = BlockDigester(kind)
    for piece in cut(data, draw):
        blocks.update(piece)

    assert blocks.digests() == block_hashes(data, kind) == own_digests(data, kind)


def own_digests(data: bytes, kind: str) -> bytes:
    """Each 64 KiB block's first 16 bytes of digest, made by the hash
    libraries themselves (BLAKE3 asked for a 16-byte output)."""
    blocks = [data[at : at + BLOCK_SIZE] for at in range(0, len(data), BLOCK_SIZE)]
    if kind == BLAKE3:
        return b"".join(blake3.blake3(block).digest(16) for block in blocks)
    return b"".join(hashlib.sha256(block).digest()[:16] for block in blocks)


def test_a_closed_body_holds_no_piece() -> None:
    """The send closes its body: a chunk whose send ended must not stay in
    memory through a body httpx still holds in a reference cycle."""
    chunk = ChunkPieces([bytes(BLOCK_SIZE), bytes(UNCOPIED_PIECE)])
    body = chunk.body()
    body.read()
    body.close()

    assert body.closed
    assert body._pieces == ()


def test_a_chunk_of_one_piece_is_its_own_buffer() -> None:
    """A sealed upload takes each chunk joined, as one piece, and sealing
    reads that piece itself: the chunk is never in memory twice."""
    buffer = random.Random(1).randbytes(3 * UNCOPIED_PIECE)
    chunk = ChunkPieces([buffer])

    assert contiguous(chunk) is buffer
    assert bytes(chunk) is buffer
