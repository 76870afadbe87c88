"""How a stream of known length is cut into chunks."""

from __future__ import annotations

import pytest

from app.store.writer import plan_chunk_size

MiB = 1024 * 1024
CHUNK = 19 * MiB


@pytest.mark.parametrize(
    ("size", "lanes", "expected_chunks"),
    [
        (None, 6, None),  # unknown length: full chunks
        (5 * MiB, 6, 1),  # one chunk, stored as it is
        (CHUNK, 6, 1),
        (100 * MiB, 6, 6),  # 6 equal chunks instead of 5 full + a 5 MiB tail
        (120 * MiB, 6, 12),  # 7 would leave 5 bots idle for a round: 12 of 10 MiB
        (1024 * MiB, 6, 54),  # already a multiple of 6
        (CHUNK + 1, 6, 2),  # 6 chunks would be tiny: stay at 2
        (40 * MiB, 1, 3),
    ],
)
def test_plan_chunk_size(size: int | None, lanes: int, expected_chunks: int | None) -> None:
    chunk = plan_chunk_size(size, CHUNK, lanes)

    assert chunk <= CHUNK
    if size is None or expected_chunks is None:
        assert chunk == CHUNK
        return
    assert -(-size // chunk) == expected_chunks
    if expected_chunks > 1:
        # Equal chunks: the last one is at most one byte per chunk short.
        assert size - (expected_chunks - 1) * chunk >= chunk - expected_chunks
