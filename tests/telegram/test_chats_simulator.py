"""Several storage chats against the Telegram simulator over real HTTP.

The simulator enforces Telegram's flood limit per (bot, chat) (a bot posting
more than `sends_per_minute` into one chat within a minute gets 429) and
numbers each chat's messages on its own; its post log says which bot posted
into which chat when. With pacing as the binding limit, two chats must carry
twice the posts of one in the same minute, with no 429 and no (bot, chat)
pair over its budget: counted in the simulator, not timed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.probe import BotProber
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.simulator.config import SEND_WINDOW
from tests.running_service import assert_one_call_per_lane, eventually

CHATS = [-1001000000001, -1001000000002, -1001000000003]
BOTS = 2
BUDGET = 3  # posts per (bot, chat) per minute, in the simulator and the dispatcher


async def one_minute_of_posts(chats: list[int]) -> tuple[Counter[tuple[int, int]], int]:
    """Posts per (bot, chat) that a paced pool makes with far more sends
    waiting than a minute allows, and the 429s the simulator gave."""
    sim = TelegramSimulator(
        SimulatorConfig(tokens=make_tokens(BOTS), chat_ids=chats, sends_per_minute=BUDGET)
    )
    allowed = BOTS * BUDGET * len(chats)
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(clients, chat_ids=chats, sends_per_minute=BUDGET)
        await pool.start()
        sends = [
            asyncio.create_task(pool.send_document(b"x" * 1024, f"{i}.bin"))
            for i in range(3 * allowed)
        ]
        try:

            async def all_posted() -> bool:
                return len(sim.posts()) >= allowed

            await eventually(all_posted, within=20)
            # Every (bot, chat) has spent its minute: nothing more goes out.
            await asyncio.sleep(0.5)
        finally:
            for task in sends:
                task.cancel()
            await asyncio.gather(*sends, return_exceptions=True)
            await pool.stop(grace=0)
    posts = sim.posts()
    assert posts[-1].posted_at - posts[0].posted_at < SEND_WINDOW
    rate_limited = sum(stats.rate_limited for stats in sim.stats().values())
    return Counter((p.bot_id, p.chat_id) for p in posts), rate_limited


async def test_two_chats_double_the_paced_throughput() -> None:
    one, limited_one = await one_minute_of_posts(CHATS[:1])
    two, limited_two = await one_minute_of_posts(CHATS[:2])

    assert (limited_one, limited_two) == (0, 0)
    assert set(one.values()) == {BUDGET} and len(one) == BOTS
    assert set(two.values()) == {BUDGET} and len(two) == 2 * BOTS
    assert sum(two.values()) == 2 * sum(one.values())


@pytest.fixture
async def three_chats() -> AsyncIterator[tuple[TelegramSimulator, Dispatcher]]:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(BOTS), chat_ids=CHATS))
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(clients, chat_ids=CHATS)
        await pool.start()
        yield sim, pool
        await pool.stop(grace=5)


async def test_each_chat_numbers_its_own_messages_and_forwards_stay_in_their_chat(
    three_chats: tuple[TelegramSimulator, Dispatcher],
) -> None:
    sim, pool = three_chats
    documents = await asyncio.gather(*(pool.send_document(b"d", f"{i}.bin") for i in range(9)))

    by_chat = {chat: sorted(d.message_id for d in documents if d.chat_id == chat) for chat in CHATS}
    assert by_chat == {chat: [1, 2, 3] for chat in CHATS}
    for chat in CHATS:
        assert sim.live_messages(chat) == [1, 2, 3]

    # Another bot gets a file_id of its own by a forward into the same chat.
    source = next(d for d in documents if d.chat_id == CHATS[2])
    copy = await pool.forward_message(source.chat_id, source.message_id, exclude={source.bot_id})
    assert copy.chat_id == CHATS[2] and copy.message_id == 4
    assert copy.bot_id != source.bot_id
    assert sim.live_messages(CHATS[0]) == [1, 2, 3]


async def test_a_bot_is_admitted_only_for_the_chats_where_it_may_post() -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(BOTS), chat_ids=CHATS[:2]))
    kicked, other = sim.bot_ids
    sim.kick(kicked, CHATS[1])
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(clients, chat_ids=CHATS[:2], checked=False)
        await pool.start()
        prober = BotProber(pool, first_pause=0, max_pause=0)
        prober.start()
        try:

            async def checked() -> bool:
                return prober.probing == 0

            await eventually(checked)
            assert sorted(pool.usable_bots()) == sorted(sim.bot_ids)
            assert pool.usable_bots(CHATS[1]) == [other]

            await asyncio.gather(*(pool.send_document(b"d", f"{i}.bin") for i in range(12)))
            pairs = Counter((p.bot_id, p.chat_id) for p in sim.posts())
            assert (kicked, CHATS[1]) not in pairs
            assert pairs[(kicked, CHATS[0])] > 0

            # Kicked from its last good chat while it runs: a 403 there takes
            # it out of the pool, and its send goes to the other bot.
            sim.kick(kicked, CHATS[0])
            await asyncio.gather(*(pool.send_document(b"e", f"e{i}.bin") for i in range(6)))
            assert pool.usable_bots() == [other]
        finally:
            await prober.stop()
            await pool.stop(grace=5)


async def test_a_bot_kicked_from_one_chat_keeps_working_in_the_others() -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(1), chat_ids=CHATS))
    (bot,) = sim.bot_ids
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(clients, chat_ids=CHATS)
        await pool.start()
        try:
            sim.kick(bot, CHATS[0])
            documents = await asyncio.gather(
                *(pool.send_document(b"d", f"{i}.bin") for i in range(6))
            )
        finally:
            await pool.stop(grace=5)
    assert pool.usable_bots() == [bot]
    assert {d.chat_id for d in documents} == set(CHATS[1:])
    assert pool.usable_bots(CHATS[0]) == []


async def test_a_bot_refused_at_its_check_joins_a_chat_once_it_passes_a_recheck() -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(BOTS), chat_ids=CHATS[:2]))
    demoted, other = sim.bot_ids
    sim.demote(demoted, CHATS[1])
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(clients, chat_ids=CHATS[:2], checked=False)
        await pool.start()
        prober = BotProber(pool, first_pause=0, max_pause=0, recheck_interval=0.05)
        prober.start()
        sends: list[asyncio.Task[object]] = []
        try:

            async def checked() -> bool:
                return prober.probing == 0

            await eventually(checked)
            assert pool.usable_bots(CHATS[1]) == [other]
            # Still refused: the re-checks (getChatMember) leave it out.
            asked = sim.stats()[demoted].calls.get("getChatMember", 0)

            async def rechecked_twice_or_back() -> bool:
                calls = sim.stats()[demoted].calls.get("getChatMember", 0)
                return calls >= asked + 2 or pool.usable_bots(CHATS[1]) != [other]

            await eventually(rechecked_twice_or_back)
            assert pool.usable_bots(CHATS[1]) == [other]

            sim.unkick(demoted, CHATS[1])  # an admin restores its rights
            # Re-checks go through the bot's worker: uploads meanwhile.
            sends = [
                asyncio.create_task(pool.send_document(b"d" * 4096, f"{i}.bin")) for i in range(20)
            ]

            async def back() -> bool:
                return sorted(pool.usable_bots(CHATS[1])) == sorted(sim.bot_ids)

            await eventually(back)
            await asyncio.gather(*sends)
            more = await asyncio.gather(
                *(pool.send_document(b"e", f"e{i}.bin", chat_id=CHATS[1]) for i in range(6))
            )
        finally:
            for task in sends:
                task.cancel()
            await prober.stop()
            await pool.stop(grace=5)
    assert demoted in {d.bot_id for d in more}
    # One call per lane and token, checks included.
    assert_one_call_per_lane(sim.stats())


async def test_a_bot_every_chat_refused_comes_back_into_the_pool_after_a_recheck() -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(BOTS), chat_ids=CHATS[:2]))
    kicked, other = sim.bot_ids
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(clients, chat_ids=CHATS[:2])
        await pool.start()
        prober = BotProber(pool, recheck_interval=0.05)
        prober.start()
        try:
            for chat in CHATS[:2]:
                sim.kick(kicked, chat)
            # Every send it tries is refused, until it has no chat left.
            await asyncio.gather(*(pool.send_document(b"d", f"{i}.bin") for i in range(12)))
            assert pool.usable_bots() == [other]

            for chat in CHATS[:2]:
                sim.unkick(kicked, chat)

            # Both chats: a recheck already under way may have asked the first
            # chat before its unkick and the second after, and then finds the
            # first one at its next round.
            async def back() -> bool:
                return all(
                    sorted(pool.usable_bots(chat)) == sorted(sim.bot_ids) for chat in CHATS[:2]
                )

            await eventually(back)
            assert sorted(pool.usable_bots(CHATS[0])) == sorted(sim.bot_ids)
            sim.reset_stats()
            await asyncio.gather(*(pool.send_document(b"e", f"e{i}.bin") for i in range(12)))
        finally:
            await prober.stop()
            await pool.stop(grace=5)
    assert sim.stats()[kicked].calls.get("sendDocument", 0) > 0
