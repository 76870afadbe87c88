"""The one runner of the service's background loops (app/kit/periodic.py)."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from app.kit.periodic import Periodic


async def test_rounds_go_on_after_a_failure_which_is_logged_counted_and_observed() -> None:
    outcomes: list[tuple[str, str]] = []
    calls = 0
    third = asyncio.Event()

    async def body() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("database away")
        if calls == 3:
            third.set()

    loop = Periodic(
        "sample",
        body,
        interval=0.01,
        on_round=lambda name, outcome, _seconds: outcomes.append((name, outcome)),
    )
    with capture_logs() as logs:
        loop.start()
        await asyncio.wait_for(third.wait(), 5)
        await loop.stop()
    assert outcomes[:3] == [("sample", "ok"), ("sample", "failed"), ("sample", "ok")]
    assert loop.failures == 1
    failed = [line for line in logs if line["event"] == "sample_round_failed"]
    assert failed == [
        {"event": "sample_round_failed", "error": "database away", "log_level": "warning"}
    ]


async def test_wake_runs_a_round_before_the_interval_is_over() -> None:
    ran = asyncio.Event()

    async def body() -> None:
        ran.set()

    loop = Periodic("woken", body, interval=3600)
    loop.start()
    await asyncio.sleep(0)
    assert not ran.is_set()
    loop.wake()
    await asyncio.wait_for(ran.wait(), 5)
    await loop.stop()
    assert loop.rounds == 1


async def test_a_round_may_ask_for_the_next_one_at_once() -> None:
    """The GC after a full batch: more is due now, not after the interval."""
    calls = 0
    done = asyncio.Event()

    async def body() -> float | None:
        nonlocal calls
        calls += 1
        if calls == 3:
            done.set()
        return 0.0

    loop = Periodic("eager", body, interval=3600, run_at_start=True)
    loop.start()
    await asyncio.wait_for(done.wait(), 5)
    await loop.stop()


async def test_stop_cancels_the_round_in_progress_and_nothing_runs_after() -> None:
    started = asyncio.Event()
    cancelled = False

    async def body() -> None:
        nonlocal cancelled
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled = True
            raise

    loop = Periodic("long", body, interval=0.01, run_at_start=True)
    loop.start()
    await asyncio.wait_for(started.wait(), 5)
    await loop.stop()
    assert cancelled
    assert not loop.running
    rounds = loop.rounds
    loop.wake()
    await asyncio.sleep(0.05)
    assert loop.rounds == rounds
    await loop.stop()  # a second stop is harmless


def test_jitter_spreads_the_wait_within_its_fraction() -> None:
    async def body() -> None:
        return None

    loop = Periodic("spread", body, interval=10.0, jitter=0.2)
    waits = {loop.next_wait() for _ in range(200)}
    assert all(8.0 <= wait <= 12.0 for wait in waits)
    assert len(waits) > 100  # not one fixed value
    with pytest.raises(ValueError, match="jitter"):
        Periodic("bad", body, interval=1.0, jitter=1.5)


def test_an_interval_may_be_read_afresh_for_every_wait() -> None:
    """Shared paths: short while readers ask, long when idle."""
    busy = True

    async def body() -> None:
        return None

    loop = Periodic("adaptive", body, interval=lambda: 0.1 if busy else 0.5)
    assert loop.next_wait() == 0.1
    busy = False
    assert loop.next_wait() == 0.5
