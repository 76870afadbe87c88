"""The dispatcher against the Telegram simulator over real HTTP: Telegram's
collision rule (a second concurrent upload on one token gets 429) is enforced
by the server, so these tests show the dispatcher never triggers it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from app.config import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument

CHAT_ID = -1001234567890


def chunk(index: int, size: int = 64 * 1024) -> bytes:
    return random.Random(index).randbytes(size)


@pytest.fixture
def sim() -> TelegramSimulator:
    return TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(4),
            chat_ids=[CHAT_ID],
            max_concurrent_uploads_per_bot=1,
            collision_retry_after=30,
            upload_bandwidth=4 * 1024 * 1024,
            seed=7,
        )
    )


@pytest.fixture
async def dispatcher(sim: TelegramSimulator) -> AsyncIterator[Dispatcher]:
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        dispatcher = Dispatcher(
            clients, chat_id=CHAT_ID, transient_backoff=0.01, all_failed_pause=0.2
        )
        await dispatcher.start()
        yield dispatcher
        await dispatcher.stop(grace=5)


async def read_back(dispatcher: Dispatcher, document: StoredDocument) -> bytes:
    location = await dispatcher.call(
        document.bot_id, "getFile", lambda c: c.get_file(document.file_id)
    )
    client = dispatcher.client_for(document.bot_id)
    assert client is not None
    async with client.open_file(location.file_path) as body:
        return b"".join([piece async for piece in body])


async def test_concurrent_load_never_puts_two_calls_on_one_token(
    sim: TelegramSimulator, dispatcher: Dispatcher
) -> None:
    documents = await asyncio.gather(
        *(dispatcher.send_document(chunk(i), f"c{i}.bin") for i in range(40))
    )

    stats = sim.stats()
    assert all(bot.max_concurrent_calls == 1 for bot in stats.values())
    assert sum(bot.rate_limited for bot in stats.values()) == 0
    assert {doc.bot_id for doc in documents} == set(sim.bot_ids)
    for index, document in enumerate(documents):
        assert await read_back(dispatcher, document) == chunk(index)


async def test_every_job_succeeds_through_random_faults(
    sim: TelegramSimulator, dispatcher: Dispatcher
) -> None:
    sim.set_faults(fault_5xx_rate=0.1, fault_drop_rate=0.05, fault_429_rate=0.05)

    documents = await asyncio.gather(
        *(dispatcher.send_document(chunk(i), f"c{i}.bin") for i in range(30))
    )
    sim.set_faults(fault_5xx_rate=0.0, fault_drop_rate=0.0, fault_429_rate=0.0)

    stats = sim.stats()
    assert sum(bot.faults_injected for bot in stats.values()) > 0
    assert all(bot.max_concurrent_calls == 1 for bot in stats.values())
    for index, document in enumerate(documents):
        assert await read_back(dispatcher, document) == chunk(index)


async def test_a_revoked_bot_leaves_the_pool_and_the_rest_carry_on(
    sim: TelegramSimulator, dispatcher: Dispatcher
) -> None:
    revoked = sim.bot_ids[0]
    sim.revoke(revoked)

    documents = await asyncio.gather(
        *(dispatcher.send_document(chunk(i), f"c{i}.bin") for i in range(12))
    )

    assert revoked not in dispatcher.usable_bots()
    assert all(doc.bot_id != revoked for doc in documents)
    assert len(dispatcher.usable_bots()) == 3
