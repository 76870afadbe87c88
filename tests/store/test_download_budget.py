"""The process-wide download budget: fairness, progress, and giving back."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from app.store.download_budget import Claim, DownloadBudget, ReaderClosed

BLOCK = 1024
T = TypeVar("T")


async def until(check: Callable[[], bool]) -> None:
    """Let other tasks run until `check()` holds (no clock involved)."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def done(task: asyncio.Task[T]) -> T:
    """The task's result; a task still waiting after 5 s fails the test
    (a hang guard, not a timing)."""
    async with asyncio.timeout(5):
        return await task


def start(awaitable: Awaitable[T]) -> asyncio.Task[T]:
    async def run() -> T:
        return await awaitable

    return asyncio.create_task(run())


def in_use(budget: DownloadBudget) -> tuple[int, int]:
    status = budget.status()
    return status.bytes_in_use, status.connections_in_use


async def connected(budget: DownloadBudget, *, current: bool = True) -> Claim:
    claim = budget.open_reader().claim(current=current)
    await claim.connect()
    return claim


# --- connections ----------------------------------------------------------------------


async def test_current_pieces_get_connections_first_come_first_served() -> None:
    budget = DownloadBudget(buffer_bytes=8 * BLOCK, connections=2, block_size=BLOCK)
    a, b = await connected(budget), await connected(budget)
    c = budget.open_reader().claim(current=True)
    d = budget.open_reader().claim(current=True)
    waiting_c = start(c.connect())
    await until(lambda: budget.status().waiting_readers == 1)
    waiting_d = start(d.connect())
    await until(lambda: budget.status().waiting_readers == 2)

    a.disconnect()
    await done(waiting_c)
    assert not waiting_d.done()
    b.disconnect()
    await done(waiting_d)
    assert budget.status().connections_in_use == 2


async def test_prefetch_takes_a_connection_only_while_one_stays_free() -> None:
    budget = DownloadBudget(buffer_bytes=8 * BLOCK, connections=3, block_size=BLOCK)
    reader = budget.open_reader()
    await reader.claim(current=True).connect()
    await reader.claim(current=False).connect()  # 1 of 3 left afterwards
    third = reader.claim(current=False)
    prefetch = start(third.connect())
    await until(lambda: third.waiter is not None)

    # The slot prefetch may not take is there for the next reader's current piece.
    newcomer = await connected(budget)
    assert budget.status().connections_in_use == 3
    assert not prefetch.done()
    newcomer.disconnect()
    await until(lambda: budget.status().connections_in_use == 2)
    assert not prefetch.done()  # taking it would leave none free
    prefetch.cancel()


async def test_a_piece_that_becomes_current_goes_ahead_of_waiting_prefetch() -> None:
    budget = DownloadBudget(buffer_bytes=8 * BLOCK, connections=1, block_size=BLOCK)
    holder = await connected(budget)
    early = budget.open_reader().claim(current=False)
    late = budget.open_reader().claim(current=False)
    early_wait, late_wait = start(early.connect()), start(late.connect())
    await until(lambda: early.waiter is not None and late.waiter is not None)

    late.make_current()  # its reader reached it: the client waits for it now
    holder.disconnect()

    await done(late_wait)
    assert not early_wait.done()
    early_wait.cancel()


async def test_prefetch_gets_no_connection_beyond_its_readers_fair_share() -> None:
    budget = DownloadBudget(buffer_bytes=8 * BLOCK, connections=4, block_size=BLOCK)
    first, second = budget.open_reader(), budget.open_reader()
    await first.claim(current=True).connect()
    await second.claim(current=True).connect()
    # Two readers, four slots: each may hold two; the first asks for a third.
    await first.claim(current=False).connect()
    greedy = first.claim(current=False)
    waiting = start(greedy.connect())
    await until(lambda: greedy.waiter is not None)

    assert budget.status().connections_in_use == 3
    second.close()
    await done(waiting)  # one reader left: the whole pool is its share
    assert budget.status().connections_in_use == 3


# --- bytes ----------------------------------------------------------------------------


async def test_readers_share_the_buffer_evenly_and_take_turns() -> None:
    budget = DownloadBudget(buffer_bytes=8 * BLOCK, connections=8, block_size=BLOCK)
    big, small = budget.open_reader(), budget.open_reader()
    big_pieces = [big.claim(current=False) for _ in range(2)]
    small_piece = small.claim(current=False)
    for claim in (*big_pieces, small_piece):
        await claim.connect()
    # Each wants far more than the buffer holds.
    granted: list[str] = []

    async def fill(claim: Claim, name: str) -> None:
        while True:
            await claim.take(BLOCK)
            granted.append(name)

    fills = [
        asyncio.create_task(fill(big_pieces[0], "big")),
        asyncio.create_task(fill(big_pieces[1], "big")),
        asyncio.create_task(fill(small_piece, "small")),
    ]
    await until(lambda: all(claim.waiter is not None for claim in (*big_pieces, small_piece)))
    # Shares of 4 blocks, one block of headroom for current pieces.
    assert big.shared <= 4 * BLOCK and small.shared <= 4 * BLOCK
    assert budget.status().bytes_in_use <= 7 * BLOCK

    # As the clients take blocks, the big download's two pieces do not get
    # two turns for the small one's one.
    granted.clear()
    for _ in range(6):
        for claim in (big_pieces[0], small_piece):
            claim.give(BLOCK)
        await until(lambda: len(granted) >= 2)
        assert sorted(granted) == ["big", "small"]
        granted.clear()
    for task in fills:
        task.cancel()


async def test_a_current_piece_always_gets_one_block_so_no_reader_deadlocks() -> None:
    budget = DownloadBudget(buffer_bytes=4 * BLOCK, connections=2, block_size=BLOCK)
    # A stalled reader holds its whole share...
    stalled = budget.open_reader().claim(current=True)
    await stalled.connect()
    for _ in range(4):
        await stalled.take(BLOCK)
    # ...and a second reader's prefetched piece what else it could get.
    reader = budget.open_reader()
    current, ahead = reader.claim(current=True), reader.claim(current=False)
    await current.connect()

    await current.take(BLOCK)  # the buffer is spent, yet the current piece gets its block
    assert budget.status().bytes_in_use == 5 * BLOCK
    second = start(current.take(BLOCK))
    await until(lambda: current.waiter is not None)

    # Only its own client can free it: taking the first block lets the second in.
    current.give(BLOCK)
    await done(second)
    assert ahead.shared == 0
    assert budget.status().bytes_in_use <= budget.buffer_bytes + budget.connections * BLOCK


async def test_a_reserved_block_keeps_its_slot_until_it_is_sent() -> None:
    budget = DownloadBudget(buffer_bytes=BLOCK, connections=1, block_size=BLOCK)
    piece = budget.open_reader().claim(current=True)
    await piece.connect()
    await piece.take(BLOCK)
    await piece.take(BLOCK)  # past the buffer: the slot's reserved block
    piece.disconnect()  # the fetch is done; two blocks still wait for the client
    assert in_use(budget) == (2 * BLOCK, 1)

    next_reader = budget.open_reader().claim(current=True)
    waiting = start(next_reader.connect())
    await until(lambda: next_reader.waiter is not None)
    piece.give(BLOCK)
    await done(waiting)
    piece.give(BLOCK)
    assert in_use(budget) == (0, 1)


# --- giving back ----------------------------------------------------------------------


async def test_closing_a_reader_returns_everything_and_ends_its_waits() -> None:
    budget = DownloadBudget(buffer_bytes=2 * BLOCK, connections=1, block_size=BLOCK)
    reader = budget.open_reader()
    piece = reader.claim(current=True)
    await piece.connect()
    for _ in range(3):  # the buffer, then the reserved block
        await piece.take(BLOCK)
    waiting_bytes = start(piece.take(BLOCK))
    prefetch = reader.claim(current=False)
    waiting_slot = start(prefetch.connect())
    other = budget.open_reader().claim(current=True)
    other_wait = start(other.connect())
    await until(lambda: None not in (piece.waiter, prefetch.waiter, other.waiter))

    reader.close()

    for task in (waiting_bytes, waiting_slot):
        with pytest.raises(ReaderClosed):
            await task
    await done(other_wait)  # the freed slot goes to whoever waited
    assert in_use(budget) == (0, 1)
    assert budget.status().readers == 1
    with pytest.raises(ReaderClosed):
        await reader.claim(current=True).connect()


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    budget = DownloadBudget(buffer_bytes=2 * BLOCK, connections=1, block_size=BLOCK)
    holder = await connected(budget)
    quitter = budget.open_reader().claim(current=True)
    patient = budget.open_reader().claim(current=True)
    quitting = start(quitter.connect())
    waiting = start(patient.connect())
    await until(lambda: budget.status().waiting_readers == 2)

    quitting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitting
    holder.disconnect()
    await done(waiting)
    assert budget.status().waiting_readers == 0
    assert in_use(budget) == (0, 1)


async def test_a_slot_granted_to_a_wait_cancelled_meanwhile_goes_back() -> None:
    budget = DownloadBudget(buffer_bytes=2 * BLOCK, connections=1, block_size=BLOCK)
    holder = await connected(budget)
    claim = budget.open_reader().claim(current=True)
    waiting = start(claim.connect())
    await until(lambda: claim.waiter is not None)

    holder.disconnect()  # granted: the waiting task is woken but has not run yet
    waiting.cancel()  # ...and is cancelled before it does
    with pytest.raises(asyncio.CancelledError):
        await done(waiting)
    assert in_use(budget) == (0, 0)


async def test_a_wait_cancelled_just_before_its_turn_is_passed_over() -> None:
    budget = DownloadBudget(buffer_bytes=2 * BLOCK, connections=1, block_size=BLOCK)
    holder = await connected(budget)
    first = budget.open_reader().claim(current=True)
    second = budget.open_reader().claim(current=True)
    leaving, staying = start(first.connect()), start(second.connect())
    await until(lambda: budget.status().waiting_readers == 2)

    leaving.cancel()  # its wait is cancelled, but the task has not run yet...
    holder.disconnect()  # ...when the slot frees

    with pytest.raises(asyncio.CancelledError):
        await done(leaving)
    await done(staying)
    assert not first.holds_slot and second.holds_slot
    second.disconnect()
    assert in_use(budget) == (0, 0)


# --- many readers at once --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
async def test_many_readers_all_finish_within_the_limits(seed: int) -> None:
    """Readers that fetch pieces with prefetch, as RangeReader does, clients
    that read at random paces, some that give up: everybody who stays gets every
    byte, the limits hold at every step, and everything comes back."""
    rng = random.Random(seed)
    budget = DownloadBudget(buffer_bytes=16 * BLOCK, connections=3, block_size=BLOCK)
    limit = budget.buffer_bytes + budget.connections * BLOCK

    def check() -> None:
        status = budget.status()
        assert status.bytes_in_use <= limit
        assert status.connections_in_use <= budget.connections

    async def fetch(claim: Claim, blocks: int, queue: asyncio.Queue[int]) -> None:
        await claim.connect()
        try:
            for _ in range(blocks):
                await claim.take(BLOCK)
                check()
                queue.put_nowait(BLOCK)
        finally:
            claim.disconnect()

    async def download(pieces: int, blocks: int, gives_up: bool) -> int:
        reader = budget.open_reader()
        queues: list[asyncio.Queue[int]] = []
        claims: list[Claim] = []
        tasks: list[asyncio.Task[None]] = []

        def launch(index: int) -> None:
            claim = reader.claim(current=index == 0)
            queue: asyncio.Queue[int] = asyncio.Queue()
            claims.append(claim)
            queues.append(queue)
            tasks.append(asyncio.create_task(fetch(claim, blocks, queue)))

        received = 0
        try:
            for index in range(min(pieces, 3)):
                launch(index)
            for index in range(pieces):
                claims[index].make_current()
                for _ in range(blocks):
                    size = await queues[index].get()
                    for _ in range(rng.randrange(4)):
                        await asyncio.sleep(0)  # a client of its own pace
                    claims[index].give(size)
                    received += size
                    check()
                    if gives_up and rng.random() < 0.05:
                        return received
                if index + 3 < pieces:
                    launch(index + 3)
            return received
        finally:
            for task in tasks:
                task.cancel()
            ended = await asyncio.gather(*tasks, return_exceptions=True)
            reader.close()
            # A limit broken in a fetch of a reader that gave up must fail
            # the test, not die with the cancelled task.
            for outcome in ended:
                if isinstance(outcome, Exception):
                    raise outcome

    plans = [(rng.randrange(1, 6), rng.randrange(1, 12), rng.random() < 0.3) for _ in range(25)]
    async with asyncio.timeout(30):  # a deadlock guard, not a timing
        results = await asyncio.gather(*(download(*plan) for plan in plans))

    for (pieces, blocks, gives_up), received in zip(plans, results, strict=True):
        if not gives_up:
            assert received == pieces * blocks * BLOCK
    assert budget.status() == budget.status().__class__(
        buffer_bytes=budget.buffer_bytes,
        bytes_in_use=0,
        connections=budget.connections,
        connections_in_use=0,
        readers=0,
        waiting_readers=0,
    )
