"""The range reader against a fake Telegram: stalls on either side, errors of
any kind, 429s, and the download budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.kit.consumer_abort import CONSUMER_ABORT
from app.store import reader as reader_module
from app.store.blocks import block_hashes, hashes_root
from app.store.download_budget import DownloadBudget
from app.store.errors import ClientStalled, ContentUnavailable, DownloadStalled
from app.store.locator import ChunkRef, CopyRef
from app.store.reader import READ_BLOCK, PieceSpan, RangeReader
from app.telegram.errors import RateLimited, TransientError
from tests.running_service import eventually, payload

KiB = 1024
PIECE = 16 * KiB  # what the fake hands over per read, as httpx does


@dataclass
class Open:
    """What one open_file of a chunk does: fail at once, or serve `serve`
    bytes (all when None) and then fail with `then`, or hang."""

    error: BaseException | None = None
    serve: int | None = None
    then: BaseException | None = None
    hang: bool = False


@dataclass
class FakeTelegram:
    """A bot client and a locator in one: chunk i is `files[i]`."""

    files: dict[int, bytes]
    plans: dict[int, list[Open]] = field(default_factory=dict)
    opens: int = 0
    open_now: int = 0
    most_open: int = 0
    forgotten: list[int] = field(default_factory=list)
    locate_error: BaseException | None = None
    # Closing a download takes until this is set (httpx's aclose awaits too).
    close_gate: asyncio.Event | None = None

    async def locate(self, copy: CopyRef) -> tuple[FakeTelegram, str]:
        if self.locate_error is not None:
            raise self.locate_error
        return self, str(copy.copy_id)

    async def confirm(self, copy: CopyRef, size: int) -> tuple[FakeTelegram, str]:
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
        self.forgotten.append(copy.copy_id)

    def chunk(self, chunk_id: int) -> ChunkRef:
        """Chunk `chunk_id` of `files`, with its one copy and its block hashes."""
        data = self.files[chunk_id]
        hashes = block_hashes(data)
        return ChunkRef(
            chunk_id=chunk_id,
            size=len(data),
            sha256=hashes_root(hashes),
            block_hashes=hashes,
            copies=(CopyRef(chunk_id, 1, f"f{chunk_id}", -1, 1),),
        )

    @contextlib.asynccontextmanager
    async def open_file_at(
        self, file_path: str, offset: int, end: int | None = None
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """As a file server that ignores Range: the whole file, from 0."""
        async with self.open_file(file_path) as body:
            yield 0, body

    @contextlib.asynccontextmanager
    async def open_file(self, file_path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        chunk = int(file_path)
        plan = self.plans.get(chunk, [])
        step = plan.pop(0) if plan else Open()
        self.opens += 1
        if step.error is not None:
            raise step.error
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            yield self._body(self.files[chunk], step)
        finally:
            if self.close_gate is not None:
                await self.close_gate.wait()
            self.open_now -= 1

    async def _body(self, data: bytes, step: Open) -> AsyncIterator[bytes]:
        end = len(data) if step.serve is None else step.serve
        for start in range(0, end, PIECE):
            yield data[start : min(start + PIECE, end)]
        if step.hang:
            await asyncio.Event().wait()
        if step.then is not None:
            raise step.then


def whole(telegram: FakeTelegram) -> list[PieceSpan]:
    return [
        PieceSpan(telegram.chunk(chunk_id), 0, len(data))
        for chunk_id, data in sorted(telegram.files.items())
    ]


def make_reader(
    telegram: FakeTelegram, budget: DownloadBudget | None = None, **options: Any
) -> RangeReader:
    budget = budget or DownloadBudget(buffer_bytes=1024 * KiB, connections=4, block_size=READ_BLOCK)
    return RangeReader(telegram, budget, retry_delay=0.01, **options)  # type: ignore[arg-type]


def idle(budget: DownloadBudget) -> bool:
    status = budget.status()
    return status.bytes_in_use == status.connections_in_use == status.readers == 0


async def collect(stream: AsyncIterator[bytes]) -> bytes:
    """Everything the stream yields; a stream that stops yielding for 10 s
    fails the test (a hang guard, not a timing)."""
    out = bytearray()
    async with asyncio.timeout(10):
        async for block in stream:
            assert len(block) <= READ_BLOCK
            out += block
    return bytes(out)


async def until(check: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return check()

    await eventually(holds)


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses the reader takes between attempts, taken at once."""
    taken: list[float] = []

    async def pause(seconds: float) -> None:
        taken.append(seconds)

    monkeypatch.setattr(reader_module, "_pause", pause)
    return taken


# --- reading ---------------------------------------------------------------------------


async def test_streams_exactly_the_requested_bytes_of_each_piece() -> None:
    files = {i: payload(300 * KiB, seed=i) for i in range(3)}
    telegram = FakeTelegram(files)
    budget = DownloadBudget(buffer_bytes=128 * KiB, connections=3, block_size=READ_BLOCK)
    spans = [
        PieceSpan(telegram.chunk(0), 10, 300 * KiB - 10),
        PieceSpan(telegram.chunk(1), 0, 300 * KiB),
        PieceSpan(telegram.chunk(2), 0, 5 * KiB),
    ]

    data = await collect(make_reader(telegram, budget).stream(spans))

    assert data == files[0][10:] + files[1] + files[2][: 5 * KiB]
    assert idle(budget)


async def test_a_slow_client_holds_no_more_than_the_budget() -> None:
    files = {i: payload(512 * KiB, seed=i) for i in range(4)}
    telegram = FakeTelegram(files)
    budget = DownloadBudget(buffer_bytes=128 * KiB, connections=3, block_size=READ_BLOCK)
    limit = budget.buffer_bytes + budget.connections * READ_BLOCK
    out = bytearray()
    async with asyncio.timeout(10):
        async for block in make_reader(telegram, budget).stream(whole(telegram)):
            for _ in range(20):
                await asyncio.sleep(0)  # the client lags; fetches run ahead
            status = budget.status()
            assert status.bytes_in_use <= limit
            assert status.connections_in_use <= budget.connections
            out += block

    assert bytes(out) == b"".join(files[i] for i in range(4))
    assert 1 < telegram.most_open <= budget.connections  # prefetch, within the cap
    assert idle(budget)


# --- stalls ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_abort", [True, False])
async def test_a_client_that_takes_nothing_is_dropped(with_abort: bool) -> None:
    files = {i: payload(1024 * KiB, seed=i) for i in range(3)}
    telegram = FakeTelegram(files)
    budget = DownloadBudget(buffer_bytes=256 * KiB, connections=4, block_size=READ_BLOCK)
    dropped: list[str] = []
    aborted: list[bool] = []
    reader = make_reader(telegram, budget, stall_seconds=0.05, on_dropped=dropped.append)
    if with_abort:
        CONSUMER_ABORT.set(lambda: aborted.append(True))
    stream = reader.stream(whole(telegram))

    await anext(stream)  # ...and then nothing more
    await until(lambda: bool(dropped))

    assert dropped == ["client_stalled"]
    assert idle(budget)
    await until(lambda: telegram.open_now == 0)  # the Telegram downloads are closed
    if with_abort:
        assert aborted == [True]
        # The connection is gone; nothing more comes, no short body is "ended".
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
    else:
        with pytest.raises(ClientStalled):
            await anext(stream)


async def test_a_dropped_download_lets_its_telegram_reads_finish_closing() -> None:
    """Cancelled once, not again while closing: a second cancellation would cut
    httpx's closing short and leave the half-read connection open for good."""
    telegram = FakeTelegram({0: payload(1024 * KiB)}, close_gate=asyncio.Event())
    budget = DownloadBudget(buffer_bytes=128 * KiB, connections=4, block_size=READ_BLOCK)
    dropped: list[str] = []
    reader = make_reader(telegram, budget, stall_seconds=0.05, on_dropped=dropped.append)
    CONSUMER_ABORT.set(lambda: None)
    stream = reader.stream(whole(telegram))
    await anext(stream)
    await until(lambda: bool(dropped))

    ending = asyncio.create_task(anext(stream, b"end"))  # the server resumes it
    await until(lambda: telegram.open_now == 1 and not ending.done())
    assert telegram.close_gate is not None
    telegram.close_gate.set()

    assert await ending == b"end"
    assert telegram.open_now == 0


async def test_telegram_sending_nothing_fails_the_download() -> None:
    # A block and a half, then nothing: the half block is never checked, so
    # never sent.
    served = READ_BLOCK + READ_BLOCK // 2
    telegram = FakeTelegram({0: payload(256 * KiB)}, plans={0: [Open(serve=served, hang=True)]})
    budget = DownloadBudget(buffer_bytes=1024 * KiB, connections=4, block_size=READ_BLOCK)
    dropped: list[str] = []
    reader = make_reader(telegram, budget, stall_seconds=0.05, on_dropped=dropped.append)
    received = bytearray()

    with pytest.raises(DownloadStalled, match=r"no byte of chunk 0 came from Telegram for 0\.05 s"):
        async with asyncio.timeout(10):
            async for block in reader.stream(whole(telegram)):
                received += block

    assert bytes(received) == payload(256 * KiB)[:READ_BLOCK]
    assert dropped == ["telegram_stalled"]
    assert idle(budget)
    assert telegram.open_now == 0


async def test_a_download_that_waits_too_long_for_a_connection_is_aborted() -> None:
    files = {0: payload(512 * KiB, seed=0), 1: payload(512 * KiB, seed=1)}
    budget = DownloadBudget(buffer_bytes=64 * KiB, connections=1, block_size=READ_BLOCK)
    first = FakeTelegram({0: files[0]})
    second = FakeTelegram({1: files[1]})
    dropped: list[str] = []
    patient = make_reader(first, budget, stall_seconds=600)
    hasty = make_reader(second, budget, stall_seconds=0.05, on_dropped=dropped.append)
    holder = patient.stream(whole(first))
    head = await anext(holder)  # holds the only connection, and stops reading

    with pytest.raises(DownloadStalled):
        await collect(hasty.stream(whole(second)))
    assert second.opens == 0
    assert dropped == ["telegram_stalled"]

    # The one holding the connection is not disturbed.
    assert head + await collect(holder) == files[0]
    assert idle(budget)


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "locate_error", "expected"),
    [
        ([], RuntimeError("a bug in the locator"), RuntimeError),
        ([Open(error=KeyError("a bug in the client"))], None, KeyError),
        ([Open(serve=2 * PIECE, then=ValueError("a bug mid-body"))], None, ValueError),
    ],
)
async def test_every_exception_of_a_fetch_reaches_the_stream(
    plan: list[Open], locate_error: BaseException | None, expected: type[BaseException]
) -> None:
    telegram = FakeTelegram({0: payload(256 * KiB)}, plans={0: plan}, locate_error=locate_error)
    budget = DownloadBudget(buffer_bytes=1024 * KiB, connections=4, block_size=READ_BLOCK)

    with pytest.raises(expected):
        await collect(make_reader(telegram, budget).stream(whole(telegram)))
    assert telegram.opens <= 1  # a bug is not retried
    assert idle(budget)


async def test_a_fetch_cancelled_from_outside_fails_the_stream() -> None:
    telegram = FakeTelegram({0: payload(64 * KiB)})

    async def cancelled(chunk: ChunkRef) -> Any:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    telegram.locate = cancelled  # type: ignore[method-assign]

    with pytest.raises(ContentUnavailable, match="the read of chunk 0 was cancelled"):
        await collect(make_reader(telegram).stream(whole(telegram)))


async def test_a_broken_read_resumes_where_it_stopped(pauses: list[float]) -> None:
    data = payload(256 * KiB)
    telegram = FakeTelegram(
        {0: data}, plans={0: [Open(serve=5 * PIECE, then=TransientError("connection reset"))]}
    )

    assert await collect(make_reader(telegram).stream(whole(telegram))) == data
    assert telegram.opens == 2
    assert telegram.forgotten == [0]  # the file path may have expired
    assert pauses == [0.01]


async def test_a_429_on_a_read_waits_what_telegram_asks(pauses: list[float]) -> None:
    data = payload(256 * KiB)
    limited = RateLimited("Too Many Requests: retry after 7", retry_after=7, bot_id=1)
    telegram = FakeTelegram({0: data}, plans={0: [Open(error=limited)]})

    assert await collect(make_reader(telegram, stall_seconds=60).stream(whole(telegram))) == data
    assert pauses == [7]
    assert telegram.forgotten == []  # the path is fine; only the rate is not


async def test_a_429_longer_than_the_stall_timeout_fails_at_once(pauses: list[float]) -> None:
    limited = RateLimited("Too Many Requests: retry after 120", retry_after=120, bot_id=1)
    telegram = FakeTelegram({0: payload(64 * KiB)}, plans={0: [Open(error=limited)]})

    with pytest.raises(ContentUnavailable, match="asks to wait 120 s"):
        await collect(make_reader(telegram, stall_seconds=60).stream(whole(telegram)))
    assert pauses == []
    assert telegram.opens == 1
