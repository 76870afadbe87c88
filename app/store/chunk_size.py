"""How big the chunks of one stream are (the writer's plan: app.store.writer)."""

from __future__ import annotations


def plan_chunk_size(expected_size: int | None, max_chunk: int, lanes: int) -> int:
    """The chunk size for a stream whose length is known in advance.

    Cutting 100 MiB into 19 MiB chunks gives five full chunks and a 5 MiB
    tail: with six bots, five work for the whole upload and one for a quarter
    of it. Equal chunks keep every bot equally busy; when that takes a few more
    chunks (a multiple of the bots), it is worth it as long as the chunks stay
    at least half the maximum (each chunk is a message, and messages are
    rate-limited). Unknown lengths, and anything up to one chunk, keep the
    maximum.
    """
    if expected_size is None or expected_size <= max_chunk:
        return max_chunk
    count = -(-expected_size // max_chunk)
    rounded = -(-count // lanes) * lanes
    if expected_size / rounded >= max_chunk / 2:
        count = rounded
    return -(-expected_size // count)
