"""Routing across several storage chats (app/telegram/dispatcher.py), against a
mocked Bot API (respx) that posts into whichever chat a call names.

Pacing counts per (bot, chat): with pacing as the binding limit, each chat adds
a bot's budget. The dispatcher's clock is a fake that never moves, so a
bot whose budget in every chat is spent waits for the next window, which
never comes during the test: what is counted is what one window allows.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import ChatForbidden, NoUsableBot, PermanentError

API = "https://api.telegram.org"
CHATS = [-1001, -1002, -1003]


def token(bot_id: int) -> BotToken:
    return BotToken(bot_id=bot_id, secret=f"secret{bot_id}" + "x" * 30)


def field(request: httpx.Request, name: str) -> str:
    """A form field of a Bot API call (multipart or url-encoded)."""
    content = request.content
    if request.headers.get("content-type", "").startswith("multipart/"):
        marker = f'name="{name}"\r\n\r\n'.encode()
        start = content.index(marker) + len(marker)
        return content[start : content.index(b"\r\n", start)].decode()
    return httpx.QueryParams(content.decode())[name]


class Channels:
    """Telegram's side: each chat numbers its own messages; every post is
    recorded as (bot, chat)."""

    def __init__(self, router: respx.MockRouter, bot_ids: list[int]) -> None:
        self.posts: list[tuple[int, int]] = []
        # (bot, chat) -> (status, description) Telegram answers its posts with.
        self.refusals: dict[tuple[int, int], tuple[int, str]] = {}
        self.refused: list[tuple[int, int]] = []
        self.last_id: Counter[int] = Counter()
        self.posted = asyncio.Event()
        for bot_id in bot_ids:
            for method in ("sendDocument", "forwardMessage"):
                router.post(f"{API}/bot{token(bot_id).value}/{method}").mock(
                    side_effect=self._handler(bot_id)
                )

    def _handler(self, bot_id: int) -> Callable[[httpx.Request], httpx.Response]:
        def handle(request: httpx.Request) -> httpx.Response:
            chat_id = int(field(request, "chat_id"))
            refusal = self.refusals.get((bot_id, chat_id))
            if refusal is not None:
                self.refused.append((bot_id, chat_id))
                status, description = refusal
                return httpx.Response(
                    status, json={"ok": False, "error_code": status, "description": description}
                )
            self.last_id[chat_id] += 1
            message_id = self.last_id[chat_id]
            self.posts.append((bot_id, chat_id))
            self.posted.set()
            return httpx.Response(
                200,
                json={
                    "ok": True,
                    "result": {
                        "message_id": message_id,
                        "chat": {"id": chat_id, "type": "channel"},
                        "date": 0,
                        "document": {
                            "file_id": f"file-{bot_id}-{chat_id}-{message_id}",
                            "file_unique_id": f"uniq-{chat_id}-{message_id}",
                            "file_size": 1,
                        },
                    },
                },
            )

        return handle

    async def wait_for(self, posts: int) -> None:
        async with asyncio.timeout(10):
            while len(self.posts) < posts:
                self.posted.clear()
                await self.posted.wait()

    def per_pair(self) -> Counter[tuple[int, int]]:
        return Counter(self.posts)


@pytest.fixture
def mock_api() -> respx.MockRouter:
    with respx.mock(assert_all_called=False) as router:
        yield router


@pytest.fixture
async def pools() -> AsyncIterator[list[Dispatcher]]:
    started: list[Dispatcher] = []
    yield started
    for pool in started:
        await pool.stop(grace=0)


async def make_pool(
    pools: list[Dispatcher], bot_ids: list[int], chat_ids: list[int], **options: Any
) -> Dispatcher:
    clients = [BotClient(token(bot_id), api_base=API) for bot_id in bot_ids]
    pool = Dispatcher(clients, chat_ids=chat_ids, clock=lambda: 1000.0, **options)
    await pool.start()
    pools.append(pool)
    return pool


async def paced_posts(
    mock_api: respx.MockRouter, pools: list[Dispatcher], chats: list[int]
) -> Counter[tuple[int, int]]:
    """Posts per (bot, chat) that 2 paced bots make in one window with 20
    sends waiting."""
    budget = 3
    telegram = Channels(mock_api, [1, 2])
    pool = await make_pool(pools, [1, 2], chats, sends_per_minute=budget)
    sends = [
        asyncio.create_task(pool.send_document(b"x", f"{i}.bin", caption=str(i))) for i in range(20)
    ]
    await telegram.wait_for(2 * budget * len(chats))
    # The budget of every (bot, chat) is spent: nothing more goes out.
    await asyncio.sleep(0.3)
    for task in sends:
        task.cancel()
    await asyncio.gather(*sends, return_exceptions=True)
    return telegram.per_pair()


async def test_each_chat_adds_a_paced_bots_budget(
    mock_api: respx.MockRouter, pools: list[Dispatcher]
) -> None:
    one = await paced_posts(mock_api, pools, CHATS[:1])
    assert one == {(1, CHATS[0]): 3, (2, CHATS[0]): 3}

    mock_api.reset()
    two = await paced_posts(mock_api, pools, CHATS[:2])
    assert two == {(bot, chat): 3 for bot in (1, 2) for chat in CHATS[:2]}
    assert sum(two.values()) == 2 * sum(one.values())


async def test_new_chunks_spread_evenly_across_chats(
    mock_api: respx.MockRouter, pools: list[Dispatcher]
) -> None:
    Channels(mock_api, [1, 2])
    pool = await make_pool(pools, [1, 2], CHATS, sends_per_minute=0)

    documents = await asyncio.gather(*(pool.send_document(b"x", f"{i}.bin") for i in range(12)))

    assert Counter(d.chat_id for d in documents) == dict.fromkeys(CHATS, 4)
    # Each document says where it went: the chat and that chat's own id.
    assert sorted((d.chat_id, d.message_id) for d in documents) == sorted(
        (chat, n) for chat in CHATS for n in range(1, 5)
    )


async def test_sends_into_a_given_chat_go_there_and_wait_for_its_budget_only(
    mock_api: respx.MockRouter, pools: list[Dispatcher]
) -> None:
    telegram = Channels(mock_api, [1])
    pool = await make_pool(pools, [1], CHATS[:2], sends_per_minute=2)

    # A probe into the second chat, and a forward of a message stored there.
    probe = await pool.send_document(b"p", "probe.bin", chat_id=CHATS[1])
    copy = await pool.forward_message(CHATS[1], probe.message_id)
    assert (probe.chat_id, copy.chat_id) == (CHATS[1], CHATS[1])
    # The second chat's budget is spent; the first chat's is whole.
    third = asyncio.create_task(pool.send_document(b"q", "q.bin", chat_id=CHATS[1]))
    free = await pool.send_document(b"r", "r.bin")
    assert free.chat_id == CHATS[0]
    await asyncio.sleep(0.3)
    assert not third.done()
    third.cancel()
    assert telegram.per_pair() == {(1, CHATS[1]): 2, (1, CHATS[0]): 1}


@pytest.mark.parametrize(
    "description",
    [
        "Bad Request: chat not found",
        "Bad Request: not enough rights to send documents to the chat",
        "Bad Request: CHAT_WRITE_FORBIDDEN",
        "Bad Request: have no rights to send a message",
    ],
)
async def test_a_400_saying_the_bot_may_not_post_takes_it_out_of_that_chat_only(
    mock_api: respx.MockRouter, pools: list[Dispatcher], description: str
) -> None:
    telegram = Channels(mock_api, [1])
    telegram.refusals[(1, CHATS[0])] = (400, description)
    pool = await make_pool(pools, [1], CHATS[:2], sends_per_minute=0)

    documents = await asyncio.gather(*(pool.send_document(b"x", f"{i}.bin") for i in range(4)))

    assert {d.chat_id for d in documents} == {CHATS[1]}
    assert telegram.refused == [(1, CHATS[0])]  # asked once, then left alone
    assert pool.usable_bots() == [1]
    assert (pool.usable_bots(CHATS[0]), pool.usable_bots(CHATS[1])) == ([], [1])
    # Counted as what it is: the bot still works, in the other chat.
    (status,) = pool.status()
    assert status.errors == {"chat_refused": 1}


async def test_a_send_into_a_chat_that_refuses_every_bot_fails_without_touching_other_chats(
    mock_api: respx.MockRouter, pools: list[Dispatcher]
) -> None:
    telegram = Channels(mock_api, [1, 2])
    for bot in (1, 2):
        telegram.refusals[(bot, CHATS[0])] = (400, "Bad Request: chat not found")
    pool = await make_pool(pools, [1, 2], CHATS[:2], sends_per_minute=0)

    with pytest.raises(NoUsableBot, match=f"may post in chat {CHATS[0]}"):
        await pool.send_document(b"x", "x.bin", chat_id=CHATS[0])

    assert sorted(telegram.refused) == [(1, CHATS[0]), (2, CHATS[0])]
    assert sorted(pool.usable_bots(CHATS[1])) == [1, 2]
    document = await pool.send_document(b"y", "y.bin")
    assert document.chat_id == CHATS[1]


async def test_any_other_400_still_fails_the_job_and_keeps_the_bots_chats(
    mock_api: respx.MockRouter, pools: list[Dispatcher]
) -> None:
    telegram = Channels(mock_api, [1, 2])
    for bot in (1, 2):
        telegram.refusals[(bot, CHATS[0])] = (400, "Bad Request: message caption is too long")
    pool = await make_pool(pools, [1, 2], CHATS[:1], sends_per_minute=0)

    with pytest.raises(PermanentError, match="caption is too long"):
        await pool.send_document(b"x", "x.bin", caption="long")

    assert len(telegram.refused) == 1
    assert sorted(pool.usable_bots(CHATS[0])) == [1, 2]


async def test_a_403_on_a_delete_takes_the_bot_out_of_that_chat_only(
    mock_api: respx.MockRouter, pools: list[Dispatcher]
) -> None:
    mock_api.post(f"{API}/bot{token(1).value}/deleteMessage").mock(
        return_value=httpx.Response(
            403, json={"ok": False, "error_code": 403, "description": "Forbidden: bot was kicked"}
        )
    )
    pool = await make_pool(pools, [1], CHATS[:2], sends_per_minute=0)

    with pytest.raises(ChatForbidden) as caught:
        await pool.call(1, "deleteMessage", lambda c: c.delete_message(CHATS[0], 7))

    assert caught.value.chat_id == CHATS[0]
    assert pool.usable_bots() == [1]
    assert (pool.usable_bots(CHATS[0]), pool.usable_bots(CHATS[1])) == ([], [1])
