"""The range reader fetching parts of chunks at once (FETCH_RANGE): against a
fake file server that honours Range, as Telegram's does, and one that does not."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from app.store.blocks import block_hashes, hashes_root
from app.store.download_budget import DownloadBudget
from app.store.locator import ChunkRef, CopyRef
from app.store.reader import READ_BLOCK, PieceSpan, RangeReader
from tests.running_service import payload
from tests.store.test_reader import PIECE, collect, idle

KiB = 1024
RANGE = 4 * READ_BLOCK  # 256 KiB parts: a 1 MiB chunk is four fetches


@dataclass
class RangeServer:
    """A bot client and a locator in one, honouring `bytes=a-b`: chunk i's
    copy c is `files[i]`, or `corrupt[(i, c)]` where that is set."""

    files: dict[int, bytes]
    corrupt: dict[tuple[int, int], bytes] = field(default_factory=dict)
    honour_range: bool = True
    # Seconds before a file's first byte, as Telegram's time to first byte.
    latency: float = 0.0
    asked: list[tuple[int, int, int, int | None]] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0
    bad: list[tuple[int, int, str]] = field(default_factory=list)

    async def locate(self, copy: CopyRef) -> tuple[RangeServer, str]:
        return self, copy.file_id

    async def confirm(self, copy: CopyRef, size: int) -> tuple[RangeServer, str]:
        return await self.locate(copy)

    @contextlib.asynccontextmanager
    async def open_copy(
        self, copy: CopyRef, size: int, offset: int, end: int | None = None
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """As ChunkLocator.open_copy: locate, then open the file."""
        client, path = await self.locate(copy)
        async with client.open_file_at(path, offset, end) as opened:
            yield opened

    def forget(self, copy: CopyRef) -> None:
        pass

    def chunk(self, chunk_id: int, copies: int = 1) -> ChunkRef:
        data = self.files[chunk_id]
        hashes = block_hashes(data)
        return ChunkRef(
            chunk_id=chunk_id,
            size=len(data),
            sha256=hashes_root(hashes),
            block_hashes=hashes,
            copies=tuple(CopyRef(c, 1, f"{chunk_id}/{c}", -1, 1) for c in range(copies)),
        )

    @contextlib.asynccontextmanager
    async def open_file_at(
        self, file_path: str, offset: int, end: int | None = None
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        chunk_id, copy_id = (int(part) for part in file_path.split("/"))
        data = self.corrupt.get((chunk_id, copy_id), self.files[chunk_id])
        self.asked.append((chunk_id, copy_id, offset, end))
        if not self.honour_range:
            offset, end = 0, None
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await asyncio.sleep(self.latency)
            yield offset, self._body(data[offset : len(data) if end is None else end])
        finally:
            self.open_now -= 1

    async def _body(self, data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), PIECE):
            await asyncio.sleep(0)  # a network: the other fetches get turns
            yield data[start : start + PIECE]


def reader(server: RangeServer, budget: DownloadBudget) -> RangeReader:
    return RangeReader(
        server,  # type: ignore[arg-type]
        budget,
        fetch_range=RANGE,
        retry_delay=0.01,
        on_bad_copy=lambda chunk, copy, state: server.bad.append((chunk, copy, state)),
    )


async def test_a_chunk_is_fetched_as_concurrent_ranges_that_come_back_in_order() -> None:
    server = RangeServer(
        {0: payload(1024 * KiB, seed=1), 1: payload(300 * KiB, seed=2)}, latency=0.01
    )
    budget = DownloadBudget(buffer_bytes=2048 * KiB, connections=8, block_size=READ_BLOCK)
    spans = [
        PieceSpan(server.chunk(0), 100, 1024 * KiB - 100),  # from inside the first block
        PieceSpan(server.chunk(1), 0, 300 * KiB - 7),
    ]

    data = await collect(reader(server, budget).stream(spans))

    assert data == server.files[0][100:] + server.files[1][: 300 * KiB - 7]
    # Each fetch asks for whole blocks of its own part, and only those.
    assert sorted(server.asked) == [
        (0, 0, 0, 256 * KiB),
        (0, 0, 256 * KiB, 512 * KiB),
        (0, 0, 512 * KiB, 768 * KiB),
        (0, 0, 768 * KiB, 1024 * KiB),
        (1, 0, 0, 256 * KiB),
        (1, 0, 256 * KiB, 300 * KiB),  # the last block is the chunk's end
    ]
    # Several parts at once (how many grows as the client waits: next test).
    assert server.most_open >= 3
    assert idle(budget)


async def test_a_reader_opens_more_fetches_only_while_its_client_waits_for_telegram() -> None:
    files = {i: payload(1024 * KiB, seed=i) for i in range(3)}
    server = RangeServer(files, latency=0.01)
    budget = DownloadBudget(buffer_bytes=16 * 1024 * KiB, connections=16, block_size=READ_BLOCK)
    spans = [PieceSpan(server.chunk(i), 0, 1024 * KiB) for i in sorted(files)]

    stream = reader(server, budget).stream(spans)
    first = await anext(stream)
    # Its first byte came with the current part and one ahead open, not with
    # all the twelve parts the budget would let one reader alone have: a
    # reader that comes a moment before others takes no head start.
    assert len(server.asked) == 2
    rest = await collect(stream)

    assert first + rest == b"".join(files[i] for i in sorted(files))
    # Its client kept waiting for Telegram, so it went deeper part by part.
    assert server.most_open > 3
    assert idle(budget)


async def test_a_slow_client_holds_at_most_its_window_and_readers_stay_in_the_budget() -> None:
    files = {i: payload(512 * KiB, seed=i) for i in range(6)}
    server = RangeServer(files)
    budget = DownloadBudget(buffer_bytes=1024 * KiB, connections=8, block_size=READ_BLOCK)
    limit = budget.buffer_bytes + budget.connections * READ_BLOCK
    spans = [PieceSpan(server.chunk(i), 0, 512 * KiB) for i in sorted(files)]
    seen: list[tuple[int, int]] = []  # (bytes in use, readers) at each check

    async def read(lag: int) -> bytes:
        out = bytearray()
        async for block in reader(server, budget).stream(spans):
            for _ in range(lag):
                await asyncio.sleep(0)  # this client reads slowly; fetches run ahead
            status = budget.status()
            seen.append((status.bytes_in_use, status.readers))
            assert status.bytes_in_use <= limit
            assert status.connections_in_use <= budget.connections
            out += block
        return bytes(out)

    async with asyncio.timeout(10):
        # A client that takes one block and pauses: its reader starts the
        # current part and one ahead, no more (its client never waited for a
        # whole part), within its window (here the whole buffer, 1 MiB).
        paused = reader(server, budget).stream(spans)
        await anext(paused)
        for _ in range(500):
            await asyncio.sleep(0)
        assert len(server.asked) == 2  # of twelve parts
        assert budget.status().bytes_in_use <= budget.buffer_bytes
        await paused.aclose()
        alone = await read(lag=50)
        together = await asyncio.gather(*(read(lag) for lag in (0, 5, 50, 200)))

    whole = b"".join(files[i] for i in sorted(files))
    assert alone == whole and all(data == whole for data in together)
    # With four readers each holds its quarter: the slow ones do not starve the others.
    assert max(used for used, readers in seen if readers == 4) <= limit
    assert idle(budget)


async def test_a_corrupt_block_inside_a_part_is_read_around_from_the_other_copy() -> None:
    good = payload(1024 * KiB, seed=3)
    flipped = bytearray(good)
    flipped[600 * KiB + 5] ^= 0xFF  # inside the third 256 KiB part, mid-block
    server = RangeServer({0: good}, corrupt={(0, 0): bytes(flipped)})
    budget = DownloadBudget(buffer_bytes=2048 * KiB, connections=8, block_size=READ_BLOCK)

    data = await collect(
        reader(server, budget).stream([PieceSpan(server.chunk(0, 2), 0, len(good))])
    )

    assert data == good
    assert server.bad == [(0, 0, "corrupt")]  # reported once: only that part met it
    # The third part went on from the other copy at the block where the first stopped.
    assert (0, 1, 576 * KiB, 768 * KiB) in server.asked
    assert idle(budget)


async def test_a_file_server_that_ignores_range_gets_whole_chunk_reads() -> None:
    files = {i: payload(1024 * KiB, seed=i) for i in range(2)}
    server = RangeServer(files, honour_range=False)
    budget = DownloadBudget(buffer_bytes=2048 * KiB, connections=8, block_size=READ_BLOCK)
    spans = [PieceSpan(server.chunk(i), 0, 1024 * KiB) for i in sorted(files)]
    range_reader = reader(server, budget)

    first = await collect(range_reader.stream(spans))
    server.asked.clear()
    second = await collect(range_reader.stream(spans))

    assert first == second == files[0] + files[1]
    # Once a whole file came for a part, a chunk is one fetch, not four of it from 0.
    assert sorted(server.asked) == [(0, 0, 0, 1024 * KiB), (1, 0, 0, 1024 * KiB)]
    assert idle(budget)
