"""Bots join the pool as their getMe check passes, without holding up the
others (respx stands in for the Bot API; pauses are zero so the retries are
counted, not timed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import respx
from structlog.testing import capture_logs

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import NoUsableBot
from app.telegram.probe import BotProber
from app.telegram.types import BotInfo
from tests.running_service import eventually

API = "https://api.telegram.org"
SLOW, LATE, REVOKED = 1, 2, 3


def token(bot_id: int) -> BotToken:
    return BotToken(bot_id=bot_id, secret=f"secret{bot_id}" + "x" * 30)


def me(bot_id: int) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "ok": True,
            "result": {
                "id": bot_id,
                "is_bot": True,
                "first_name": "b",
                "username": f"bot{bot_id}_bot",
            },
        },
    )


def failing() -> httpx.Response:
    return httpx.Response(502, json={"ok": False, "error_code": 502, "description": "Bad Gateway"})


class GetMe:
    """getMe of one bot: fails until `passing`, counting the calls."""

    def __init__(self, bot_id: int, *, fail_first: int = 0, forever: bool = False) -> None:
        self.bot_id = bot_id
        self.fail_first = fail_first
        self.forever = forever
        self.calls = 0
        self.called_often = asyncio.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls >= 5:
            self.called_often.set()
        if self.forever or self.calls <= self.fail_first:
            return failing()
        return me(self.bot_id)


def admin_everywhere(router: respx.MockRouter) -> None:
    """getChatMember: every bot is an administrator that may post, in every chat."""
    router.post(url__regex=rf"{API}/bot.*/getChatMember").mock(
        return_value=httpx.Response(
            200,
            json={
                "ok": True,
                "result": {
                    "status": "administrator",
                    "user": {"id": 0, "is_bot": True, "first_name": "b"},
                    "can_post_messages": True,
                    "can_delete_messages": True,
                },
            },
        )
    )


@pytest.fixture
async def dispatcher() -> AsyncIterator[Dispatcher]:
    clients = [BotClient(token(bot_id), api_base=API) for bot_id in (SLOW, LATE, REVOKED)]
    pool = Dispatcher(clients, chat_ids=[-1001], checked=False)
    await pool.start()
    yield pool
    await pool.stop(grace=0)


async def test_bots_join_the_pool_as_they_pass_and_a_rejected_one_stays_out(
    dispatcher: Dispatcher,
) -> None:
    slow = GetMe(SLOW, fail_first=2)
    late = GetMe(LATE, forever=True)
    admitted: list[int] = []
    late_admitted = asyncio.Event()

    def on_admitted(info: BotInfo) -> None:
        admitted.append(info.id)
        if info.id == LATE:
            late_admitted.set()

    with respx.mock(assert_all_called=False) as router:
        admin_everywhere(router)
        router.post(f"{API}/bot{token(SLOW).value}/getMe").mock(side_effect=slow)
        router.post(f"{API}/bot{token(LATE).value}/getMe").mock(side_effect=late)
        router.post(f"{API}/bot{token(REVOKED).value}/getMe").mock(
            return_value=httpx.Response(
                401, json={"ok": False, "error_code": 401, "description": "Unauthorized"}
            )
        )
        prober = BotProber(dispatcher, on_admitted=on_admitted, first_pause=0, max_pause=0)
        # Before any check: nothing may be sent, and the caller hears why.
        with pytest.raises(NoUsableBot, match="getMe"):
            await dispatcher.send_document(b"x", "x.bin")
        try:
            prober.start()
            async with asyncio.timeout(10):
                await prober.one_admitted.wait()
                assert dispatcher.usable_bots() == [SLOW]
                assert prober.bots[SLOW].username == "bot1_bot"
                # The late bot is still being checked, again and again.
                await late.called_often.wait()
                assert dispatcher.probing_bots() == [LATE]
                # Telegram lets it through at last: it joins the pool.
                late.forever = False
                await late_admitted.wait()
        finally:
            await prober.stop()
    assert admitted == [SLOW, LATE]
    assert sorted(dispatcher.usable_bots()) == [SLOW, LATE]
    assert dispatcher.probing_bots() == []  # the revoked bot is out for good
    assert slow.calls == 3
    status = {s.bot_id: s for s in dispatcher.status()}
    assert not status[REVOKED].usable and not status[REVOKED].probing


async def test_a_check_goes_through_the_bots_lanes_and_waits_out_its_cooldown() -> None:
    """A bot's getMe check is a call like any other (issue 56): it waits for
    the lease, honours the cooldown the lease brought (a 429, or a call the
    last holder abandoned that Telegram may still be running), and runs in
    the bot's lanes, so nothing else is ever sent beside it."""
    clients = [BotClient(token(bot_id), api_base=API) for bot_id in (SLOW, LATE)]
    pool = Dispatcher(clients, chat_ids=[-1001], checked=False, leased=True)
    await pool.start()
    cooled = GetMe(LATE)
    try:
        with respx.mock(assert_all_called=False) as router:
            admin_everywhere(router)
            router.post(f"{API}/bot{token(SLOW).value}/getMe").mock(return_value=me(SLOW))
            router.post(f"{API}/bot{token(LATE).value}/getMe").mock(side_effect=cooled)
            prober = BotProber(pool, first_pause=0, max_pause=0)
            prober.start()
            try:
                now = time.monotonic()
                # Both leases come: one bot free, the other still cooling down.
                pool.grant(LATE, now + 60, now + 60)
                pool.grant(SLOW, now + 60, 0.0)
                async with asyncio.timeout(10):
                    await prober.one_admitted.wait()
                assert pool.usable_bots() == [SLOW]
                # Checked through its lanes, the cooling bot was not asked.
                assert cooled.calls == 0
                assert pool.probing_bots() == [LATE]
            finally:
                await prober.stop()
    finally:
        await pool.stop(grace=0)


async def test_a_bot_that_may_post_but_not_pin_is_admitted_and_named(
    dispatcher: Dispatcher,
) -> None:
    may_not_pin = {
        "status": "administrator",
        "user": {"id": 0, "is_bot": True, "first_name": "b"},
        "can_post_messages": True,
        "can_delete_messages": True,
        "can_edit_messages": False,
    }
    with respx.mock(assert_all_called=False) as router, capture_logs() as logs:
        router.post(url__regex=rf"{API}/bot.*/getChatMember").mock(
            return_value=httpx.Response(200, json={"ok": True, "result": may_not_pin})
        )
        router.post(url__regex=rf"{API}/bot.*/getMe").mock(return_value=me(SLOW))
        prober = BotProber(dispatcher, first_pause=0, max_pause=0)
        try:
            prober.start()
            await eventually(lambda: len(dispatcher.usable_bots()) == 3)
        finally:
            await prober.stop()

    named = [entry for entry in logs if entry["event"] == "bot_may_not_pin"]
    assert sorted(entry["bot_id"] for entry in named) == [SLOW, LATE, REVOKED]
    assert all("can_edit_messages" in entry["detail"] for entry in named)
