"""Two dispatcher behaviours that the Docker push benchmark
(bench/s3_push_bench.py) found wrong, now fixed:

1. Sequential sends (a registry uploading one S3 part at a time) must rotate
   over the idle bots. They used to land on one bot: the job was routed to the
   least recently assigned idle bot, but another idle worker took it from that
   bot's queue first.
2. Pacing must count a send when Telegram does, when the message is posted at
   the end of the upload; counting at the start of the call drifted from
   Telegram's window and drew 429s with uploads of different lengths.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import respx

from app.telegram.dispatcher import Dispatcher
from tests.telegram.test_dispatcher import (
    FakeTelegram,
    PostingTelegram,
    SkewedClock,
    make_dispatcher,
)


@pytest.fixture
def mock_api() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


@pytest.fixture
async def stopper() -> AsyncIterator[list[Dispatcher]]:
    started: list[Dispatcher] = []
    yield started
    for dispatcher in started:
        await dispatcher.stop(grace=1)


async def test_sequential_sends_rotate_over_idle_bots(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2, 3])
    dispatcher, _ = await make_dispatcher([1, 2, 3])
    stopper.append(dispatcher)

    for i in range(6):
        await dispatcher.send_document(b"x" * 64, f"c{i}", caption=f"job{i}")

    assert [fake.bots[b].calls for b in (1, 2, 3)] == [2, 2, 2]


async def test_pacing_at_telegrams_limit_gets_no_429_with_uneven_uploads(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    # 2 posts per second; a long upload (3 s of the shared clock), then short
    # ones (1 ms). The long one starts at 0 and is posted at 3; the second is
    # posted just after. Pacing by start times would let the third start at
    # once (its window, from 0, is long past) and be posted within 1 s of the
    # first two: a 429. Pacing by post times makes it wait until 4. The
    # uploads' time is simulated, so a slow machine cannot hide the difference.
    clock = SkewedClock()
    telegram = PostingTelegram(mock_api, clock, budget=2, window=1.0, bandwidth=1000)
    dispatcher, _ = await make_dispatcher([1], sends_per_minute=2, pacing_window=1.0, clock=clock)
    stopper.append(dispatcher)

    for size in (3000, 1, 1, 1):
        await dispatcher.send_document(b"x" * size, "c")

    assert telegram.rate_limited == 0
    assert telegram.sent == 4
