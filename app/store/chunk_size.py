"""How big the chunks of one stream are (the writer's plan: app.store.writer,
and the spool's flusher: app.store.flusher)."""

from __future__ import annotations

from dataclasses import dataclass

# The official Bot API server spaces one bot's uploads of the *same* total
# size by up to 0.9 s (telegram-bot-api's Client.cpp, on_cmd): on a link
# faster than about 11 MB/s per bot, a run of equal chunks waits on it (1.76
# times as long for ten 19 MiB chunks at 50 MB/s: bench/spacing_bench.py).
# Chunk i of a stream is therefore `i % SPREAD` bytes off its size: the
# chunks a bot takes from one stream in a row differ (SPREAD is prime, so a
# pool of fewer bots than it never takes one size twice in a row), for at
# most 60 bytes of a 19 MiB chunk.
SPREAD = 61
# The server lets about two equal uploads per bot through at once (a second
# of burst): a stream's first 2 x bots chunks meet no spacing. A stream of
# unknown length keeps them whole; only its later chunks are a few bytes
# short (so such a stream ends in one chunk more only when its length falls
# within those few bytes above a whole number of chunks).
FREE_PER_BOT = 2


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """The lengths of a stream's chunks: `size`, give or take a few bytes
    that differ from one chunk to the next (SPREAD): up to `spread` more
    (`down`: fewer), never above the largest chunk."""

    size: int
    spread: int = SPREAD - 1
    down: bool = True
    first: int = 0  # the chunks before this one keep `size`

    def length(self, index: int) -> int:
        if index < self.first:
            return self.size
        step = index % (self.spread + 1)
        return self.size - step if self.down else self.size + step


def short_chunks(max_chunk: int, lanes: int) -> ChunkPlan:
    """The chunks of a stream of unknown length (a spooled upload's too): the
    first 2 x `lanes` whole, the others a few bytes short."""
    return ChunkPlan(max_chunk, spread=min(SPREAD - 1, max_chunk // 2), first=FREE_PER_BOT * lanes)


def plan_chunks(expected_size: int | None, max_chunk: int, lanes: int) -> ChunkPlan:
    """`plan_chunk_size`, spread (SPREAD). A stream of unknown length:
    `short_chunks`. A body of at most `max_chunk`: one
    chunk. Equal chunks: a few bytes longer, as far as `max_chunk` leaves
    room (none for a body of exactly so many full chunks: those stay equal),
    the last one taking what is left, never more than the others."""
    if expected_size is None:
        return short_chunks(max_chunk, lanes)
    if expected_size <= max_chunk:
        return ChunkPlan(max_chunk, spread=0)
    size = plan_chunk_size(expected_size, max_chunk, lanes)
    return ChunkPlan(size, spread=min(SPREAD - 1, max_chunk - size), down=False)


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
