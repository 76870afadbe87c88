"""Unit tests of the per-bot dispatcher against a mocked Bot API (respx).

Each fake bot answers sendDocument through a scripted list of replies, and
records how many calls were in flight on its token at once. The tests wait
for events (a call arrived, a document was orphaned), never for a guessed
time, and assert orders and counts, never durations: timings are measured by
bench/dispatcher_bench.py.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import respx

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import (
    DispatcherClosed,
    NoUsableBot,
    PermanentError,
    RateLimited,
    TransientError,
)
from app.telegram.types import StoredDocument
from tests.running_service import eventually

API = "https://api.telegram.org"
CHAT_ID = -1001


def token(bot_id: int) -> BotToken:
    return BotToken(bot_id=bot_id, secret=f"secret{bot_id}" + "x" * 30)


def ok_message(bot_id: int, message_id: int, size: int) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "ok": True,
            "result": {
                "message_id": message_id,
                "chat": {"id": CHAT_ID, "type": "channel"},
                "document": {
                    "file_id": f"file-{bot_id}-{message_id}",
                    "file_unique_id": f"uniq-{message_id}",
                    "file_size": size,
                },
            },
        },
    )


def error(status: int, description: str, retry_after: int | None = None) -> httpx.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return httpx.Response(status, json=body)


def too_many(retry_after: int = 1) -> httpx.Response:
    return error(429, f"Too Many Requests: retry after {retry_after}", retry_after)


@dataclass
class FakeBot:
    """Scripted replies for one bot; `None` in the script means success."""

    bot_id: int
    script: list[Callable[[], httpx.Response] | None] = field(default_factory=list)
    delay: float = 0.0
    calls: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    gate: asyncio.Event | None = None
    # Set when a call reaches this bot (before its gate).
    called: asyncio.Event = field(default_factory=asyncio.Event)


class FakeTelegram:
    def __init__(self, router: respx.MockRouter, bot_ids: list[int]) -> None:
        self.bots = {bot_id: FakeBot(bot_id) for bot_id in bot_ids}
        self.order: list[tuple[int, str]] = []
        self.messages = defaultdict(int)
        # Called with the bot as each call arrives, before its gate.
        self.on_call: Callable[[FakeBot], None] | None = None
        for bot in self.bots.values():
            router.post(f"{API}/bot{token(bot.bot_id).value}/sendDocument").mock(
                side_effect=self._handler(bot)
            )

    def _handler(self, bot: FakeBot) -> Callable[[httpx.Request], Any]:
        async def handle(request: httpx.Request) -> httpx.Response:
            bot.calls += 1
            bot.in_flight += 1
            bot.max_in_flight = max(bot.max_in_flight, bot.in_flight)
            bot.called.set()
            if self.on_call is not None:
                self.on_call(bot)
            try:
                if bot.gate is not None:
                    await bot.gate.wait()
                if bot.delay:
                    await asyncio.sleep(bot.delay)
                caption = _caption(request)
                self.order.append((bot.bot_id, caption))
                step = bot.script.pop(0) if bot.script else None
                if step is not None:
                    return step()
                self.messages[bot.bot_id] += 1
                return ok_message(bot.bot_id, bot.calls, _document_size(request))
            finally:
                bot.in_flight -= 1

        return handle


def _caption(request: httpx.Request) -> str:
    marker = b'name="caption"\r\n\r\n'
    content = request.content
    start = content.find(marker)
    if start < 0:
        return ""
    start += len(marker)
    return content[start : content.find(b"\r\n", start)].decode()


def _document_size(request: httpx.Request) -> int:
    content = request.content
    head = content.find(b'name="document"')
    start = content.find(b"\r\n\r\n", head) + 4
    boundary = request.headers["content-type"].split("boundary=")[1].encode()
    end = content.find(b"\r\n--" + boundary, start)
    return end - start


@pytest.fixture
def mock_api() -> respx.MockRouter:
    with respx.mock(assert_all_called=False) as router:
        yield router


async def make_dispatcher(bot_ids: list[int], **options: Any) -> tuple[Dispatcher, list[BotClient]]:
    clients = [BotClient(token(bot_id), api_base=API) for bot_id in bot_ids]
    options.setdefault("transient_backoff", 0.01)
    options.setdefault("all_failed_pause", 0.2)
    dispatcher = Dispatcher(clients, chat_ids=[CHAT_ID], **options)
    await dispatcher.start()
    return dispatcher, clients


@pytest.fixture
async def stopper() -> AsyncIterator[list[Dispatcher]]:
    started: list[Dispatcher] = []
    yield started
    for dispatcher in started:
        await dispatcher.stop(grace=1)


async def send(dispatcher: Dispatcher, n: int, size: int = 64) -> list[StoredDocument]:
    return await asyncio.gather(
        *(dispatcher.send_document(b"x" * size, f"c{i}", caption=f"job{i}") for i in range(n))
    )


# --- the pick -------------------------------------------------------------------


async def test_pick_returns_bot_with_fewest_pending_jobs(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    FakeTelegram(mock_api, [1, 2, 3])
    dispatcher, _ = await make_dispatcher([1, 2, 3])
    stopper.append(dispatcher)
    # Load the bots unevenly by hand: bot 1 has 2 jobs waiting, bot 3 has 1.
    w1, w2, w3 = dispatcher.workers[1], dispatcher.workers[2], dispatcher.workers[3]
    w1.queue.extend([object(), object()])  # type: ignore[list-item]
    w3.queue.append(object())  # type: ignore[arg-type]
    assert dispatcher.pick_bot() is w2
    w2.queue.extend([object(), object(), object()])  # type: ignore[list-item]
    assert dispatcher.pick_bot() is w3
    for worker in (w1, w2, w3):
        worker.queue.clear()


async def test_pick_skips_rate_limited_and_unusable_bots(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    FakeTelegram(mock_api, [1, 2, 3])
    dispatcher, _ = await make_dispatcher([1, 2, 3])
    stopper.append(dispatcher)
    dispatcher.workers[1].cooldown_until = float("inf")
    dispatcher.workers[2].usable = False
    assert dispatcher.pick_bot() is dispatcher.workers[3]
    dispatcher.workers[3].cooldown_until = float("inf")
    assert dispatcher.pick_bot() is None


# --- spreading and serialising ------------------------------------------------------


async def test_each_bot_runs_one_call_at_a_time_and_load_is_spread(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2, 3])
    for bot in fake.bots.values():
        bot.delay = 0.02
    dispatcher, _ = await make_dispatcher([1, 2, 3])
    stopper.append(dispatcher)

    docs = await send(dispatcher, 30)

    assert len(docs) == 30
    assert all(bot.max_in_flight == 1 for bot in fake.bots.values())
    assert all(bot.calls >= 5 for bot in fake.bots.values()), [b.calls for b in fake.bots.values()]
    assert {doc.bot_id for doc in docs} == {1, 2, 3}


async def test_one_bot_runs_its_jobs_sequentially(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [7])
    fake.bots[7].delay = 0.01
    dispatcher, _ = await make_dispatcher([7])
    stopper.append(dispatcher)

    await send(dispatcher, 5)

    assert fake.bots[7].calls == 5
    assert fake.bots[7].max_in_flight == 1


async def test_result_names_the_uploading_bot_and_message(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    FakeTelegram(mock_api, [5])
    dispatcher, _ = await make_dispatcher([5])
    stopper.append(dispatcher)

    (doc,) = await send(dispatcher, 1, size=100)

    assert doc.bot_id == 5
    assert doc.file_id == "file-5-1"
    assert doc.chat_id == CHAT_ID
    assert doc.message_id == 1
    assert doc.size == 100


# --- rate limits ------------------------------------------------------------------


async def test_429_on_one_bot_moves_the_job_to_another(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    fake.bots[1].script = [lambda: too_many(30)]
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)
    # Make sure the first pick is bot 1.
    dispatcher.workers[2].last_assigned = 10**9

    (doc,) = await send(dispatcher, 1)

    assert doc.bot_id == 2
    assert fake.bots[1].calls == 1
    status = {s.bot_id: s for s in dispatcher.status()}
    assert status[1].cooling_down_for > 25
    assert status[1].rate_limited == 1


async def test_jobs_queued_behind_a_rate_limited_bot_move_to_others(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    gate = asyncio.Event()
    fake.bots[1].gate = gate
    fake.bots[1].script = [lambda: too_many(60)]
    fake.bots[2].gate = gate
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)

    tasks = [asyncio.create_task(dispatcher.send_document(b"x" * 8, f"c{i}")) for i in range(6)]
    await fake.bots[1].called.wait()
    await fake.bots[2].called.wait()
    # Both bots are busy, and jobs wait in both queues.
    assert len(dispatcher.workers[1].queue) >= 1
    gate.set()
    done = await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)

    # Bot 1 cools down for 60 s, yet all jobs finished at once on bot 2.
    assert len(done) == 6
    assert fake.bots[1].calls == 1
    assert all(doc.bot_id == 2 for doc in done)


async def test_all_bots_rate_limited_waits_then_succeeds(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    fake.bots[1].script = [lambda: too_many(1)]
    fake.bots[2].script = [lambda: too_many(1)]
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)
    cooling_when_called: list[float] = []

    def note_cooldown(bot: FakeBot) -> None:
        (status,) = [s for s in dispatcher.status() if s.bot_id == bot.bot_id]
        cooling_when_called.append(status.cooling_down_for)

    fake.on_call = note_cooldown
    (doc,) = await send(dispatcher, 1)

    assert doc.bot_id in (1, 2)
    # Both bots asked for 1 s; the third call went to a bot whose cooldown
    # was over: the job waited for it rather than hammering the bots.
    assert fake.bots[1].calls + fake.bots[2].calls == 3
    assert cooling_when_called == [0.0, 0.0, 0.0]
    assert sorted(s.rate_limited for s in dispatcher.status()) == [1, 1]


# --- errors -----------------------------------------------------------------------


async def test_transient_error_retries_on_the_same_bot(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    fake.bots[1].script = [lambda: error(502, "Bad Gateway")]
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)
    dispatcher.workers[2].last_assigned = 10**9

    (doc,) = await send(dispatcher, 1)

    assert doc.bot_id == 1
    assert fake.bots[1].calls == 2
    assert fake.bots[2].calls == 0


async def test_repeated_transient_errors_move_to_another_bot(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    fake.bots[1].script = [lambda: error(500, "Internal Server Error")] * 3
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)
    dispatcher.workers[2].last_assigned = 10**9

    (doc,) = await send(dispatcher, 1)

    assert doc.bot_id == 2
    assert fake.bots[1].calls == 3


async def test_a_bot_backing_off_for_a_caller_that_left_takes_the_next_job_at_once(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    """A download given up during a retry's backoff must not hold its bot for
    the rest of the backoff: the next download would wait behind a retry
    that is never made (and miss its own stall timeout)."""
    fake = FakeTelegram(mock_api, [1])
    fake.bots[1].script = [lambda: error(502, "Bad Gateway")]
    dispatcher, _ = await make_dispatcher([1], transient_backoff=30.0)
    stopper.append(dispatcher)

    given_up = asyncio.create_task(dispatcher.send_document(b"x" * 8, "a", caption="given up"))
    await fake.bots[1].called.wait()
    # Until the 502 is answered and the bot backs off (no event says so).
    while fake.bots[1].in_flight:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    given_up.cancel()
    async with asyncio.timeout(5):  # the backoff alone would be 24-36 s
        doc = await dispatcher.send_document(b"x" * 8, "b", caption="next")

    assert doc.bot_id == 1
    assert [caption for _, caption in fake.order] == ["given up", "next"]


async def test_connection_error_is_transient(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1])

    def refuse() -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    fake.bots[1].script = [refuse]
    dispatcher, _ = await make_dispatcher([1])
    stopper.append(dispatcher)

    (doc,) = await send(dispatcher, 1)

    assert doc.bot_id == 1
    assert fake.bots[1].calls == 2


async def test_permanent_error_fails_at_once_with_telegrams_description(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    # (A 400 that says the bot may not post in the chat is no fault of the
    # request: test_dispatcher_chats.py.)
    fake.bots[1].script = [lambda: error(400, "Bad Request: message caption is too long")]
    fake.bots[2].script = [lambda: error(400, "Bad Request: message caption is too long")]
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)

    with pytest.raises(PermanentError, match="caption is too long"):
        await send(dispatcher, 1)
    assert fake.bots[1].calls + fake.bots[2].calls == 1


async def test_attempt_budget_exhausted_raises_the_last_error(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    for bot in fake.bots.values():
        bot.script = [lambda: error(503, "Service Unavailable")] * 20
    dispatcher, _ = await make_dispatcher([1, 2], max_attempts=4)
    stopper.append(dispatcher)

    with pytest.raises(TransientError, match="Service Unavailable"):
        await send(dispatcher, 1)
    assert fake.bots[1].calls + fake.bots[2].calls == 4


async def test_rate_limits_count_against_the_attempt_budget(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2, 3])
    for bot in fake.bots.values():
        bot.script = [lambda: too_many(0)] * 20
    dispatcher, _ = await make_dispatcher([1, 2, 3], max_attempts=5)
    stopper.append(dispatcher)

    with pytest.raises(RateLimited):
        await send(dispatcher, 1)
    assert sum(bot.calls for bot in fake.bots.values()) == 5


async def test_revoked_token_takes_the_bot_out_of_the_pool(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1, 2])
    fake.bots[1].script = [lambda: error(401, "Unauthorized")]
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)
    dispatcher.workers[2].last_assigned = 10**9

    docs = await send(dispatcher, 4)

    assert all(doc.bot_id == 2 for doc in docs)
    assert fake.bots[1].calls == 1
    assert dispatcher.usable_bots() == [2]


async def test_no_usable_bot_left_fails_fast(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1])
    fake.bots[1].script = [lambda: error(403, "Forbidden: bot was kicked from the channel chat")]
    dispatcher, _ = await make_dispatcher([1])
    stopper.append(dispatcher)

    with pytest.raises(NoUsableBot):
        await send(dispatcher, 1)
    with pytest.raises(NoUsableBot):
        await asyncio.wait_for(send(dispatcher, 1), timeout=1)
    assert fake.bots[1].calls == 1


async def test_errors_never_contain_the_token(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1])
    secret = token(1).secret
    fake.bots[1].script = [lambda: error(400, f"Bad Request: weird {token(1).value}")]
    dispatcher, _ = await make_dispatcher([1])
    stopper.append(dispatcher)

    with pytest.raises(PermanentError) as caught:
        await send(dispatcher, 1)
    assert secret not in str(caught.value)
    assert "1:***" in str(caught.value)


# --- callers that leave, and stopping ------------------------------------------------


async def test_job_of_a_caller_that_left_is_dropped_before_it_starts(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1])
    gate = asyncio.Event()
    fake.bots[1].gate = gate
    dispatcher, _ = await make_dispatcher([1])
    stopper.append(dispatcher)

    first = asyncio.create_task(dispatcher.send_document(b"x" * 8, "a", caption="first"))
    second = asyncio.create_task(dispatcher.send_document(b"x" * 8, "b", caption="second"))
    await fake.bots[1].called.wait()  # the first runs, the second waits behind it
    second.cancel()
    gate.set()
    await first
    # One bot runs its jobs in order: the second, had it not been dropped,
    # would have been sent before the third.
    await dispatcher.send_document(b"x" * 8, "c", caption="third")

    assert [caption for _, caption in fake.order] == ["first", "third"]


async def test_a_document_whose_caller_left_mid_call_is_handed_to_the_orphan_handler(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1])
    gate = asyncio.Event()
    fake.bots[1].gate = gate
    orphans: list[StoredDocument] = []
    orphaned = asyncio.Event()

    def on_orphan(document: StoredDocument) -> None:
        orphans.append(document)
        orphaned.set()

    dispatcher, _ = await make_dispatcher([1], on_orphan=on_orphan)
    stopper.append(dispatcher)

    task = asyncio.create_task(dispatcher.send_document(b"x" * 8, "a"))
    await fake.bots[1].called.wait()  # the call is in flight
    task.cancel()
    gate.set()
    await asyncio.wait_for(orphaned.wait(), timeout=5)

    assert len(orphans) == 1
    assert orphans[0].bot_id == 1
    assert orphans[0].message_id == 1


async def test_stop_finishes_running_jobs_and_refuses_new_ones(
    mock_api: respx.MockRouter,
) -> None:
    fake = FakeTelegram(mock_api, [1])
    gate = asyncio.Event()
    fake.bots[1].gate = gate
    dispatcher, _ = await make_dispatcher([1])

    running = asyncio.create_task(dispatcher.send_document(b"x" * 8, "a"))
    await fake.bots[1].called.wait()  # the call is in flight
    stopping = asyncio.create_task(dispatcher.stop(grace=5))
    await asyncio.sleep(0)  # one turn of the loop (no time passes): the stop begins
    assert not stopping.done()  # it waits for the running call
    gate.set()
    await stopping

    assert (await running).bot_id == 1
    with pytest.raises(DispatcherClosed):
        await dispatcher.send_document(b"x" * 8, "b")


async def test_stop_cancels_what_outlives_the_grace_period(
    mock_api: respx.MockRouter,
) -> None:
    fake = FakeTelegram(mock_api, [1])
    fake.bots[1].gate = asyncio.Event()  # never opens
    abandoned_sends: list[int] = []
    attempts: list[tuple[int, str, str]] = []
    dispatcher, _ = await make_dispatcher(
        [1],
        on_abandoned_send=abandoned_sends.append,
        on_attempt=lambda bot, method, outcome, _s: attempts.append((bot, method, outcome)),
    )

    running = asyncio.create_task(dispatcher.send_document(b"x" * 8, "a"))
    queued = asyncio.create_task(dispatcher.send_document(b"x" * 8, "b"))
    await fake.bots[1].called.wait()  # one call in flight, one job queued
    await dispatcher.stop(grace=0.1)

    for task in (running, queued):
        with pytest.raises(DispatcherClosed):
            await task
    # Telegram may still post the send that was cut off: it is reported for
    # the reconciliation of orphans. The queued one never reached Telegram.
    assert abandoned_sends == [1]
    assert attempts == [(1, "sendDocument", "abandoned")]


# --- pacing -------------------------------------------------------------------------


class SkewedClock:
    """The monotonic clock plus simulated time: a fake upload "takes" seconds
    by moving this clock on instead of sleeping. The dispatcher and the fake
    Telegram read the same clock, so what one sees of the other's timing does
    not depend on how fast the machine runs the test."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skew

    def advance(self, seconds: float) -> None:
        self.skew += seconds


class PostingTelegram:
    """One bot whose chat counts a message when it is posted, at the end of the
    upload (which takes size / `bandwidth` seconds of `clock`, or none), and
    refuses more than `budget` posts in any `window` seconds with 429, as
    Telegram does."""

    def __init__(
        self,
        router: respx.MockRouter,
        clock: SkewedClock,
        *,
        budget: int,
        window: float,
        bandwidth: float | None = None,
    ) -> None:
        self.posts: deque[float] = deque()
        self.rate_limited = 0
        self.sent = 0

        async def handle(request: httpx.Request) -> httpx.Response:
            size = _document_size(request)
            if bandwidth is not None:
                clock.advance(size / bandwidth)
            now = clock()
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


async def test_pacing_keeps_a_bot_within_telegrams_window(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    # Four sends at once, two allowed per 0.5 s: sent as they come, the third
    # would be refused.
    clock = SkewedClock()
    telegram = PostingTelegram(mock_api, clock, budget=2, window=0.5)
    dispatcher, _ = await make_dispatcher([1], sends_per_minute=2, pacing_window=0.5, clock=clock)
    stopper.append(dispatcher)

    await asyncio.gather(*(dispatcher.send_document(b"x" * 8, f"c{i}") for i in range(4)))

    assert telegram.rate_limited == 0
    assert telegram.sent == 4


async def test_get_file_is_pinned_to_the_bot_that_owns_the_file(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    FakeTelegram(mock_api, [1, 2])
    route = mock_api.post(f"{API}/bot{token(2).value}/getFile").mock(
        return_value=httpx.Response(
            200,
            json={
                "ok": True,
                "result": {"file_id": "f", "file_unique_id": "u", "file_path": "documents/1"},
            },
        )
    )
    dispatcher, _ = await make_dispatcher([1, 2])
    stopper.append(dispatcher)

    location = await dispatcher.call(2, "getFile", lambda c: c.get_file("f"))

    assert location.file_path == "documents/1"
    assert route.call_count == 1
    assert b"file_id=f" in route.calls.last.request.content


async def test_get_file_for_a_download_goes_ahead_of_queued_uploads(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    fake = FakeTelegram(mock_api, [1])
    gate = asyncio.Event()
    fake.bots[1].gate = gate

    def get_file(request: httpx.Request) -> httpx.Response:
        file_id = request.content.decode().partition("file_id=")[2]
        fake.order.append((1, f"getFile {file_id}"))
        result = {"file_id": file_id, "file_unique_id": "u", "file_path": f"documents/{file_id}"}
        return httpx.Response(200, json={"ok": True, "result": result})

    mock_api.post(f"{API}/bot{token(1).value}/getFile").mock(side_effect=get_file)
    # One lane: with the small-call lane on, the reads would not wait at all
    # (the next test).
    dispatcher, _ = await make_dispatcher([1], small_lane=False)
    stopper.append(dispatcher)
    worker = dispatcher.workers[1]

    async def queued(count: int) -> None:
        for _ in range(1000):
            if worker.running is not None and len(worker.queue) == count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"expected {count} queued jobs, found {len(worker.queue)}")

    uploads = [
        asyncio.create_task(dispatcher.send_document(b"x" * 8, f"c{i}", caption=f"upload{i}"))
        for i in range(3)
    ]
    await queued(2)  # upload0 runs (held at the gate), two more wait
    reads = []
    for file_id in ("a", "b"):
        reads.append(
            asyncio.create_task(
                dispatcher.call(1, "getFile", lambda c, f=file_id: c.get_file(f), priority=True)
            )
        )
        await queued(len(reads) + 2)
    gate.set()
    await asyncio.gather(*uploads, *reads)

    # Still one call at a time on the token: the reads wait for the running
    # upload, then go first, in the order they came.
    assert [what for _, what in fake.order] == [
        "upload0",
        "getFile a",
        "getFile b",
        "upload1",
        "upload2",
    ]


async def test_small_calls_run_one_at_a_time_beside_a_running_upload(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    """The small-call lane: a read's getFile does not wait for the bot's
    upload to end, and small calls still take turns among themselves."""
    fake = FakeTelegram(mock_api, [1])
    upload_gate = asyncio.Event()
    fake.bots[1].gate = upload_gate
    read_gate = asyncio.Event()
    arrived: list[str] = []
    small_in_flight = [0, 0]  # now, most

    async def get_file(request: httpx.Request) -> httpx.Response:
        file_id = request.content.decode().partition("file_id=")[2]
        arrived.append(file_id)
        small_in_flight[0] += 1
        small_in_flight[1] = max(small_in_flight)
        try:
            await read_gate.wait()
        finally:
            small_in_flight[0] -= 1
        fake.order.append((1, f"getFile {file_id}"))
        result = {"file_id": file_id, "file_unique_id": "u", "file_path": f"documents/{file_id}"}
        return httpx.Response(200, json={"ok": True, "result": result})

    mock_api.post(f"{API}/bot{token(1).value}/getFile").mock(side_effect=get_file)
    dispatcher, _ = await make_dispatcher([1])
    stopper.append(dispatcher)
    worker = dispatcher.workers[1]

    upload = asyncio.create_task(dispatcher.send_document(b"x" * 8, "c", caption="upload0"))
    await fake.bots[1].called.wait()  # the upload runs, held by Telegram
    reads = [asyncio.create_task(dispatcher.file_path(1, file_id)) for file_id in ("a", "b")]
    for _ in range(1000):
        if arrived and worker.small.queue:
            break
        await asyncio.sleep(0)
    # The first read's getFile runs beside the upload; the second waits its turn.
    assert arrived == ["a"]
    assert len(worker.small.queue) == 1
    read_gate.set()
    assert await asyncio.gather(*reads) == ["documents/a", "documents/b"]
    assert not upload.done()
    upload_gate.set()
    await upload
    assert [what for _, what in fake.order] == ["getFile a", "getFile b", "upload0"]
    assert small_in_flight[1] == 1
    assert fake.bots[1].max_in_flight == 1


async def test_a_lease_renewed_while_a_failed_call_backs_off_is_renewed(
    mock_api: respx.MockRouter, stopper: list[Dispatcher]
) -> None:
    """A lease round moves the cut of each call running on its bots (grant).
    A call that had ended with a transient error, its job backing off before
    its next try, still named its finished deadline: moving that raised
    'Cannot change state of finished Timeout', and the whole lease round
    failed (bot_lease_round_failed, in a soak's log). The retry then goes on
    under the renewed lease."""
    fake = FakeTelegram(mock_api, [1])
    fake.bots[1].script = [lambda: error(502, "Bad Gateway")]
    dispatcher, _ = await make_dispatcher([1], transient_backoff=2.0)
    stopper.append(dispatcher)
    sending = asyncio.ensure_future(send(dispatcher, 1))
    worker = dispatcher.workers[1]
    await eventually(lambda: worker.errors.get("transient", 0) == 1, within=10)

    now = time.monotonic()
    dispatcher.grant(1, now + 60, 0.0, cut_at=now + 55)

    (doc,) = await sending
    assert doc.bot_id == 1
    assert fake.bots[1].calls == 2
