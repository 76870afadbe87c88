"""The dispatcher against the Telegram simulator over real HTTP: Telegram's
collision rule (a second concurrent upload on one token gets 429) is enforced
by the server, so these tests show the dispatcher never triggers it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import TelegramError
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument

# Serial: calls that outlast a client timeout of a few tenths of a second
# (tests/README.md, "Timing").
pytestmark = pytest.mark.serial

CHAT_ID = -1001234567890


def chunk(index: int, size: int = 64 * 1024) -> bytes:
    return random.Random(index).randbytes(size)


@pytest.fixture
def sim() -> TelegramSimulator:
    return TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(4),
            chat_ids=[CHAT_ID],
            max_concurrent_calls_per_bot=1,
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
            clients, chat_ids=[CHAT_ID], transient_backoff=0.01, all_failed_pause=0.2
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


async def slow_dispatcher(
    sim: TelegramSimulator, url: str, *, hold: float, bots: int, attempts: int
) -> Dispatcher:
    """A dispatcher whose calls give up long before the simulator answers."""
    clients = [
        BotClient(
            BotToken.parse(token),
            api_base=url,
            connect_timeout=0.2,
            processing_allowance=0.2,
            floor_bandwidth=10**9,
        )
        for token in sim.tokens[:bots]
    ]
    dispatcher = Dispatcher(
        clients,
        chat_ids=[CHAT_ID],
        max_attempts=attempts,
        transient_backoff=0.01,
        all_failed_pause=0.05,
        abandoned_hold=hold,
    )
    await dispatcher.start()
    return dispatcher


async def test_a_timed_out_call_keeps_its_token_busy_until_telegram_is_done() -> None:
    # Telegram takes 1 s per call; the client gives up after 0.4 s. The
    # abandoned upload still runs at Telegram, so a retry on the same token
    # would be a second call in flight: the collision the design forbids.
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID], latency=1.0))
    abandoned: list[int] = []
    async with run_simulator(sim) as url:
        dispatcher = await slow_dispatcher(sim, url, hold=1.5, bots=1, attempts=3)
        dispatcher.on_abandoned_send = abandoned.append
        try:
            with pytest.raises(TelegramError):
                await dispatcher.send_document(chunk(1), "c1.bin")
        finally:
            await dispatcher.stop(grace=5)
        await sim.wait_until_idle()

    stats = sim.stats()[sim.bot_ids[0]]
    assert stats.max_concurrent_calls == 1
    assert stats.rate_limited == 0
    # Every attempt was abandoned and each one is counted as a possible orphan:
    # Telegram stored a message for every try the client gave up on.
    assert abandoned == [sim.bot_ids[0]] * stats.calls["sendDocument"]
    assert len(sim.live_messages(CHAT_ID)) == stats.calls["sendDocument"]


async def test_a_timed_out_send_moves_to_another_bot_at_once() -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID], latency=1.0))
    async with run_simulator(sim) as url:
        dispatcher = await slow_dispatcher(sim, url, hold=60.0, bots=2, attempts=2)
        try:
            with pytest.raises(TelegramError):
                await dispatcher.send_document(chunk(1), "c1.bin")
            statuses = {status.bot_id: status for status in dispatcher.status()}
        finally:
            await dispatcher.stop(grace=5)
        await sim.wait_until_idle()

    stats = sim.stats()
    # The retry went to the other bot at once, not back to the busy token.
    assert [bot.calls.get("sendDocument", 0) for bot in stats.values()] == [1, 1]
    assert all(bot.max_concurrent_calls == 1 for bot in stats.values())
    assert all(status.abandoned == 1 for status in statuses.values())
    assert all(status.cooling_down_for > 30 for status in statuses.values())
