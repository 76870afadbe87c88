"""The garbage collector with several storage chats, against the Telegram
simulator: a chat that refuses its deleting bot costs that bot that chat
only, and the message is deleted through another bot that serves the chat.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config.settings import BotToken
from app.db.gc import GcRepository
from app.db.models import GcEntry
from app.db.session import session_scope
from app.db.types import utcnow
from app.store.gc import GarbageCollector
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument
from tests.running_service import eventually

Sessions = async_sessionmaker[AsyncSession]
CHATS = [-1001000000001, -1001000000002]


@dataclass
class Pool:
    sim: TelegramSimulator
    dispatcher: Dispatcher
    gc: GarbageCollector


@pytest.fixture
async def pool(sessionmaker: Sessions) -> AsyncIterator[Pool]:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=CHATS))
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        dispatcher = Dispatcher(clients, chat_ids=CHATS)
        await dispatcher.start()
        yield Pool(sim, dispatcher, GarbageCollector(dispatcher, sessionmaker))
        await dispatcher.stop(grace=5)


async def ledger(sessionmaker: Sessions, document: StoredDocument) -> None:
    async with session_scope(sessionmaker) as session:
        await GcRepository(session).add(
            bot_id=document.bot_id,
            chat_id=document.chat_id,
            message_id=document.message_id,
            file_unique_id=document.file_unique_id,
            reason="deleted",
        )


async def entries(sessionmaker: Sessions) -> int:
    async with session_scope(sessionmaker) as session:
        return int(await session.scalar(select(func.count()).select_from(GcEntry)) or 0)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_403_on_a_delete_moves_it_to_another_bot_of_the_chat(
    pool: Pool, sessionmaker: Sessions
) -> None:
    document = await pool.dispatcher.send_document(b"d", "d.bin", chat_id=CHATS[0])
    uploader = document.bot_id
    (other,) = set(pool.sim.bot_ids) - {uploader}
    pool.sim.kick(uploader, CHATS[0])
    await ledger(sessionmaker, document)

    assert await pool.gc.run_once() == 1

    assert pool.sim.live_messages(CHATS[0]) == []
    assert await entries(sessionmaker) == 0
    # Out of the chat that refused it, still in the pool and in the other chat.
    assert pool.dispatcher.usable_bots(CHATS[0]) == [other]
    assert sorted(pool.dispatcher.usable_bots(CHATS[1])) == sorted(pool.sim.bot_ids)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_bot_without_the_right_to_delete_hands_the_delete_to_another(
    pool: Pool, sessionmaker: Sessions
) -> None:
    document = await pool.dispatcher.send_document(b"d", "d.bin", chat_id=CHATS[0])
    pool.sim.demote(document.bot_id, CHATS[0])  # "message can't be deleted"
    await ledger(sessionmaker, document)

    assert await pool.gc.run_once() == 1

    assert pool.sim.live_messages(CHATS[0]) == []
    assert pool.gc.undeletable == 0
    assert pool.gc.deleted == 1


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_a_round_cancelled_mid_deletion_gives_its_entries_back_at_once(
    pool: Pool, sessionmaker: Sessions
) -> None:
    """A stop during a round: the entries it claimed are due again at once
    (for this instance after a restart, or another one), not after the
    claim's lease of minutes."""
    documents = [
        await pool.dispatcher.send_document(b"d", f"{n}.bin", chat_id=CHATS[0]) for n in range(2)
    ]
    for document in documents:
        await ledger(sessionmaker, document)
    with pool.sim.holding("deleteMessage"):  # the round's deletions stay in flight
        round_ = asyncio.create_task(pool.gc.run_once())
        await eventually(lambda: pool.sim.held_calls("deleteMessage") > 0)
        round_.cancel()
        with pytest.raises(asyncio.CancelledError):
            await round_

    async with session_scope(sessionmaker) as session:
        due = await GcRepository(session).due(10, utcnow())
    assert len(due) == 2
