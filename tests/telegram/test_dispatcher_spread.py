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

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from app.telegram.dispatcher import Dispatcher
from tests.telegram.test_dispatcher import (
    API,
    FakeTelegram,
    _document_size,
    make_dispatcher,
    ok_message,
    token,
    too_many,
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


class PostingTelegram:
    """One bot whose upload takes `size / bandwidth` seconds and whose chat
    counts a message when it is posted (at the end of the upload), refusing
    more than `budget` posts in any `window` seconds with 429, as Telegram does."""

    def __init__(
        self, router: respx.MockRouter, *, bandwidth: float, budget: int, window: float
    ) -> None:
        self.posts: deque[float] = deque()
        self.rate_limited = 0
        self.sent = 0
        loop = asyncio.get_running_loop()

        async def handle(request: httpx.Request) -> httpx.Response:
            size = _document_size(request)
            await asyncio.sleep(size / bandwidth)
            now = loop.time()
            while self.posts and self.posts[0] <= now - window:
                self.posts.popleft()
            if len(self.posts) >= budget:
                self.rate_limited += 1
                return too_many(1)
            self.posts.append(now)
            self.sent += 1
            return ok_message(1, self.sent, size)

        handler: Callable[[httpx.Request], Any] = handle
        router.post(f"{API}/bot{token(1).value}/sendDocument").mock(side_effect=handler)


async def test_pacing_at_telegrams_limit_gets_no_429_with_uneven_uploads(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    # 2 posts per 0.4 s; a long upload (0.3 s), then short ones: the long one
    # starts at 0, is posted at 0.3; the second is posted at 0.3; pacing by
    # start times lets the third start (and be posted) at 0.4, the third post
    # within 0.4 s of the first two.
    telegram = PostingTelegram(mock_api, bandwidth=10_000, budget=2, window=0.4)
    dispatcher, _ = await make_dispatcher([1], sends_per_minute=2, pacing_window=0.4)
    stopper.append(dispatcher)

    for size in (3000, 10, 10, 10):
        await dispatcher.send_document(b"x" * size, "c")

    assert telegram.rate_limited == 0
    assert telegram.sent == 4
