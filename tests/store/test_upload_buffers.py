"""The process-wide budget of upload chunk buffers."""

from __future__ import annotations

import asyncio

import pytest

from app.store.upload_buffers import UploadBuffers


async def test_never_more_in_use_than_the_budget() -> None:
    buffers = UploadBuffers(3)
    peak = 0
    gate = asyncio.Event()

    async def hold() -> None:
        nonlocal peak
        await buffers.acquire()
        peak = max(peak, buffers.in_use)
        await gate.wait()
        buffers.release()

    tasks = [asyncio.create_task(hold()) for _ in range(10)]
    for _ in range(3):
        await asyncio.sleep(0)  # every task has run up to its first wait
    assert (buffers.in_use, buffers.waiting) == (3, 7)
    gate.set()
    await asyncio.gather(*tasks)
    assert peak == 3
    assert (buffers.in_use, buffers.waiting) == (0, 0)


async def test_waiting_uploads_are_served_in_turn() -> None:
    # A big upload that keeps asking cannot starve one that asked after it.
    buffers = UploadBuffers(1)
    served: list[str] = []
    await buffers.acquire()

    async def upload(name: str, chunks: int) -> None:
        for _ in range(chunks):
            await buffers.acquire()
            served.append(name)
            buffers.release()

    big = asyncio.create_task(upload("big", 3))
    await asyncio.sleep(0)
    small = asyncio.create_task(upload("small", 1))
    await asyncio.sleep(0)
    buffers.release()
    await asyncio.gather(big, small)
    assert served == ["big", "small", "big", "big"]


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    buffers = UploadBuffers(1)
    await buffers.acquire()
    gone = asyncio.create_task(buffers.acquire())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    buffers.release()
    # The buffer went back to the pool, not to the cancelled waiter.
    assert (buffers.in_use, buffers.waiting) == (0, 0)
    await asyncio.wait_for(buffers.acquire(), 1)


async def test_a_buffer_handed_to_a_waiter_cancelled_meanwhile_is_passed_on() -> None:
    buffers = UploadBuffers(1)
    await buffers.acquire()
    first = asyncio.create_task(buffers.acquire())
    second = asyncio.create_task(buffers.acquire())
    await asyncio.sleep(0)
    buffers.release()  # handed to `first` ...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    assert buffers.in_use == 1


def test_releasing_more_than_taken_is_a_bug() -> None:
    with pytest.raises(RuntimeError):
        UploadBuffers(1).release()
