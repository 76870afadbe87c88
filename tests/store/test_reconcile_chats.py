"""Reconciliation with several storage chats, through the real services in
front of the Telegram simulator (two chats, each numbering its own messages),
on SQLite and on Postgres through pgbouncer.

Each chat has its own watermark and gets its own probe: an instance's death
marks every chat, and the orphans of each are found between that chat's
watermark and that chat's probe, never by comparing ids across chats. A live
upload's send, whose chat the dispatcher picks only at the attempt, holds
back the reconciliation of whichever chat it lands in.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import BotToken
from app.db.chunks import ChunkRepository
from app.db.intents import ANY_CHAT, IntentRepository
from app.db.models import ChatWatermark, ChunkCopy, Instance
from app.db.session import session_scope
from app.db.types import utcnow
from app.runtime.startup import start_services
from app.store.object_write import ObjectWrite
from app.store.services import Services
from app.telegram.client import BotClient
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument
from tests.db.helpers import Database
from tests.running_service import CHUNK, eventually, make_settings, payload

# Postgres too: crash recovery: intents and watermarks per chat (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends

CHATS = [-1001000000201, -1001000000202]
NATIVE = "_native"


@dataclass
class Stack:
    services: Services
    sim: TelegramSimulator
    bot: BotClient  # posts as a crashed instance's sends did

    async def orphan(self, chat_id: int, data: bytes = b"orphan") -> StoredDocument:
        return await self.bot.send_document(chat_id, data, "orphan.bin")


# Kicked from the second chat before the service starts (see the last test).
KICKED = 100003


@pytest.fixture
def kicked() -> bool:
    return False


@pytest.fixture
async def stack(database: Database, engine: AsyncEngine, kicked: bool) -> AsyncIterator[Stack]:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(3), chat_ids=CHATS))
    if kicked:
        sim.kick(KICKED, CHATS[1])
    spool = tempfile.mkdtemp(prefix="teleuploader-spool-")
    async with run_simulator(sim) as url:
        settings = make_settings(
            database,
            url,
            sim.tokens,
            spool_dir=spool,
            max_attempts=3,
            storage_chat_id=None,
            storage_chat_ids=CHATS,
        )
        services = await start_services(settings)
        # Every bot checked in both chats, so each chat gets chunks at once.
        async with asyncio.timeout(10):
            while services.dispatcher.probing_bots():
                await services.prober.one_admitted.wait()
                await asyncio.sleep(0.01)
        assert services.instance.reconciler is not None
        services.instance.reconciler.late_posts_allowance = timedelta(0)
        bot = BotClient(BotToken.parse(sim.tokens[0]), api_base=url)
        try:
            yield Stack(services, sim, bot)
        finally:
            await bot.aclose()
            await services.close()
            shutil.rmtree(spool, ignore_errors=True)


async def store_object(services: Services, key: str, size: int = 4 * CHUNK + 100) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield payload(size, seed=len(key))

    content = await services.store.write_content(body())
    await services.store.commit(content, ObjectWrite(bucket=NATIVE, key=key, name=key))


async def held(services: Services) -> dict[int, list[int]]:
    """Message ids the chunk rows hold, per chat."""
    async with session_scope(services.sessionmaker) as session:
        rows = list(await session.execute(select(ChunkCopy.chat_id, ChunkCopy.message_id)))
    return {chat: sorted(m for c, m in rows if c == chat) for chat in CHATS}


async def marks(services: Services) -> dict[int, ChatWatermark | None]:
    async with session_scope(services.sessionmaker) as session:
        return {chat: await session.get(ChatWatermark, chat) for chat in CHATS}


async def add_dead_instance(services: Services) -> None:
    an_hour_ago = utcnow() - timedelta(hours=1)
    async with session_scope(services.sessionmaker) as session:
        session.add(
            Instance(
                id="dead0001",
                host="elsewhere",
                pid=1,
                started_at=an_hour_ago,
                heartbeat_at=an_hour_ago,
            )
        )
        await IntentRepository(session).open("dead0001", ANY_CHAT)


async def every_chat_reconciled(services: Services) -> bool:
    return all(m is not None and m.unclean_since is None for m in (await marks(services)).values())


async def test_each_chat_is_reconciled_against_its_own_watermark_and_probe(stack: Stack) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    first = await marks(services)
    # Both chats got chunks, so both have a watermark, each below its first chunk.
    assert all(m is not None and m.message_id == 0 for m in first.values())
    orphans = {chat: [(await stack.orphan(chat)).message_id for _ in range(2)] for chat in CHATS}
    posted = {chat: stack.sim.message_count(chat) for chat in CHATS}
    await add_dead_instance(services)
    await store_object(services, "after.bin")  # held messages above the orphans

    await services.instance.adopt()

    await eventually(lambda: every_chat_reconciled(services), within=20)
    expected = await held(services)

    async def only_held_left() -> bool:
        return {chat: stack.sim.live_messages(chat) for chat in CHATS} == expected

    await eventually(only_held_left, within=20)
    for chat in CHATS:
        assert not set(orphans[chat]) & set(stack.sim.live_messages(chat))
        assert expected[chat], "every chat holds chunks"
    after = await marks(services)
    for chat in CHATS:
        mark = after[chat]
        assert mark is not None
        # Its own probe, posted after everything this chat held.
        assert mark.message_id > max(expected[chat])
        assert mark.message_id <= stack.sim.message_count(chat)
        assert stack.sim.message_count(chat) > posted[chat]


async def test_a_live_send_that_may_land_in_any_chat_holds_back_each_chats_reconciliation(
    stack: Stack,
) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    live_owner = services.instance.instance_id
    async with session_scope(services.sessionmaker) as session:
        intent = await IntentRepository(session).open(live_owner, ANY_CHAT)
    # The dispatcher picked the second chat for it; the row is not committed yet.
    in_flight = await stack.orphan(CHATS[1], b"a live upload's chunk")
    orphan = (await stack.orphan(CHATS[0])).message_id
    await add_dead_instance(services)
    before = len(stack.sim.posts())

    await services.instance.adopt()

    # The first chat's probe is out; its round waits for the live send, which
    # may have posted in any chat.
    async def probed_first_chat() -> bool:
        return any(p.chat_id == CHATS[0] for p in stack.sim.posts()[before:])

    await eventually(probed_first_chat, within=20)
    assert not await every_chat_reconciled(services)
    async with session_scope(services.sessionmaker) as session:
        await ChunkRepository(session).add_pending(
            in_flight, hashlib.sha256(b"a live upload's chunk").hexdigest(), owner=live_owner
        )
        await IntentRepository(session).resolve(intent)

    await eventually(lambda: every_chat_reconciled(services), within=20)
    expected = await held(services)

    async def only_held_left() -> bool:
        return {chat: stack.sim.live_messages(chat) for chat in CHATS} == expected

    await eventually(only_held_left, within=20)
    assert in_flight.message_id in stack.sim.live_messages(CHATS[1])
    assert orphan not in stack.sim.live_messages(CHATS[0])


@pytest.mark.parametrize("kicked", [True])
async def test_orphans_are_deleted_by_bots_of_their_own_chat(stack: Stack) -> None:
    services = stack.services
    assert KICKED not in services.dispatcher.usable_bots(CHATS[1])
    await store_object(services, "kept.bin")
    # Enough orphans that some ids would fall to the kicked bot if any bot
    # of the pool were asked to delete them.
    orphans = [(await stack.orphan(CHATS[1])).message_id for _ in range(6)]
    await add_dead_instance(services)
    refused = stack.sim.stats()[KICKED].errors.get(403, 0)  # its check, in the second chat

    await services.instance.adopt()

    await eventually(lambda: every_chat_reconciled(services), within=20)
    expected = await held(services)

    async def only_held_left() -> bool:
        return {chat: stack.sim.live_messages(chat) for chat in CHATS} == expected

    await eventually(only_held_left, within=20)
    assert not set(orphans) & set(stack.sim.live_messages(CHATS[1]))
    # The kicked bot was never asked to delete there, so it is still in the pool.
    assert KICKED in services.dispatcher.usable_bots()
    assert stack.sim.stats()[KICKED].errors.get(403, 0) == refused


async def test_a_chat_no_bot_may_post_in_any_more_does_not_hold_back_the_others(
    stack: Stack,
) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    orphan = (await stack.orphan(CHATS[1])).message_id
    # Every bot is kicked from the first chat: its probe cannot be posted.
    for bot_id in stack.sim.bot_ids:
        stack.sim.kick(bot_id, CHATS[0])
    await add_dead_instance(services)

    await services.instance.adopt()

    async def second_chat_reconciled() -> bool:
        mark = (await marks(services))[CHATS[1]]
        return mark is not None and mark.unclean_since is None

    await eventually(second_chat_reconciled, within=20)
    expected = await held(services)

    async def second_chat_cleaned() -> bool:
        return stack.sim.live_messages(CHATS[1]) == expected[CHATS[1]]

    await eventually(second_chat_cleaned, within=20)
    assert orphan not in stack.sim.live_messages(CHATS[1])
    first = (await marks(services))[CHATS[0]]
    assert first is not None and first.unclean_since is not None  # tried again at the next sweep
    # The bots left the first chat only: they still serve the second.
    assert sorted(services.dispatcher.usable_bots()) == sorted(stack.sim.bot_ids)
    assert services.dispatcher.usable_bots(CHATS[0]) == []
