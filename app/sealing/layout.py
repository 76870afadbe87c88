"""Where the frames of a sealed chunk lie (no cryptography here).

A chunk of n plaintext bytes is sealed as `frame_count(n)` frames of
`FRAME_SIZE` plaintext bytes each (the last may be shorter; an empty chunk is
one empty frame), each followed by its 16-byte tag. Frame i of the sealed
stream therefore starts at i * SEALED_FRAME_SIZE, which is what lets a Range
read fetch only the frames it touches.
"""

from __future__ import annotations

# The same as the verified reads' block (app.store.blocks): a Range read
# holds back at most one frame, the download budget's unit.
FRAME_SIZE = 64 * 1024
TAG_SIZE = 16
SEALED_FRAME_SIZE = FRAME_SIZE + TAG_SIZE


def frame_count(size: int) -> int:
    """Frames of a chunk of `size` plaintext bytes (at least one)."""
    return max(1, -(-size // FRAME_SIZE))


def sealed_size(size: int) -> int:
    """The stored size of a chunk of `size` plaintext bytes."""
    return size + frame_count(size) * TAG_SIZE


def frame_plaintext_size(size: int, index: int) -> int:
    """The plaintext bytes in frame `index` of a chunk of `size` bytes."""
    if not 0 <= index < frame_count(size):
        raise ValueError(f"frame {index} is outside a chunk of {size} bytes")
    return min(FRAME_SIZE, size - index * FRAME_SIZE)


def largest_plaintext(limit: int) -> int:
    """The largest chunk whose sealed size is at most `limit` bytes."""
    full, rest = divmod(limit, SEALED_FRAME_SIZE)
    return full * FRAME_SIZE + max(0, rest - TAG_SIZE)
