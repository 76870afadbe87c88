"""The simulator's controls for crash and leak tests: per-method fault rates,
`kill` (every in-flight connection dropped at once) and the listing of the
messages each chat still stores."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.telegram.client import BotClient
from app.telegram.errors import TelegramError, TransientError
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens
from tests.telegram.conftest import CHAT_ID


async def test_a_method_with_its_own_fault_rate_fails_while_others_work(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    stored = await bots[0].send_document(CHAT_ID, b"kept", "a.bin")
    sim.set_method_faults("sendDocument", fault_drop_rate=1.0)

    with pytest.raises(TransientError):
        await bots[0].send_document(CHAT_ID, b"orphan", "b.bin")
    # Other methods keep the global rates (none): they work.
    assert (await bots[0].get_file(stored.file_id)).file_size == 4
    await bots[0].delete_message(CHAT_ID, stored.message_id)

    # The dropped send was carried out: its message exists, unknown to the client.
    assert sim.stored_messages() == {CHAT_ID: [2]}
    assert sim.stats()[bots[0].bot_id].faults_injected == 1


async def test_a_method_rate_replaces_the_global_one(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.set_faults(fault_5xx_rate=1.0)
    sim.set_method_faults("senddocument", fault_5xx_rate=0.0)  # any case, as the Bot API

    stored = await bots[0].send_document(CHAT_ID, b"abc", "a.bin")
    with pytest.raises(TransientError):
        await bots[0].get_file(stored.file_id)
    assert sim.config.method_fault_rates == {"sendDocument": {"fault_5xx_rate": 0.0}}


async def test_method_fault_rates_are_set_and_checked_over_http(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    rates = {"deleteMessage": {"fault_429_rate": 0.5}}
    answer = await http.post("/_sim/config", json={"method_fault_rates": rates})
    assert answer.json()["config"]["method_fault_rates"] == rates
    assert sim.fault_rate("deleteMessage", "fault_429_rate") == 0.5
    assert sim.fault_rate("getFile", "fault_429_rate") == 0.0

    for wrong, named in (
        ({"getMe": {"fault_5xx_rate": 0.5}}, "'getMe' is not one of"),
        ({"getFile": {"latency": 0.5}}, "'latency' is not one of"),
        ({"getFile": {"fault_5xx_rate": 2}}, "must be 0 to 1"),
        (["getFile"], "must map method names"),
    ):
        refused = await http.post("/_sim/config", json={"method_fault_rates": wrong})
        assert refused.status_code == 400
        assert named in refused.json()["description"]
    assert sim.config.method_fault_rates == rates


def test_config_refuses_a_method_rate_for_an_unfaultable_method() -> None:
    with pytest.raises(ValueError, match="'getChatMember' is not one of"):
        SimulatorConfig(
            tokens=make_tokens(1),
            chat_ids=[CHAT_ID],
            method_fault_rates={"getChatMember": {"fault_drop_rate": 1.0}},
        )


async def test_kill_drops_every_call_in_flight_and_whole_bodies_are_still_posted(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.hold("sendDocument")
    sends = [
        asyncio.create_task(bot.send_document(CHAT_ID, f"body {i}".encode(), "a.bin"))
        for i, bot in enumerate(bots)
    ]
    async with asyncio.timeout(10):
        await sim.wait_held("sendDocument", calls=len(bots))

    assert sim.kill() == len(bots)

    results = await asyncio.gather(*sends, return_exceptions=True)
    assert all(isinstance(result, TelegramError) for result in results), results
    sim.release("sendDocument")
    async with asyncio.timeout(10):
        await sim.wait_until_idle()
    # Telegram had their bodies: the work is done though no client hears of it.
    assert sim.stored_messages() == {CHAT_ID: [1, 2, 3]}
    # Nothing in flight now: a second kill drops nothing.
    assert sim.kill() == 0


async def test_kill_drops_a_download_in_flight(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_ID, b"x" * 400_000, "a.bin")
    location = await bots[0].get_file(stored.file_id)
    sim.configure(download_bandwidth=100_000)  # four seconds: still running when killed

    first_bytes = asyncio.Event()

    async def download() -> bytes:
        received = bytearray()
        async with bots[0].open_file(location.file_path) as pieces:
            async for piece in pieces:
                received += piece
                first_bytes.set()
        return bytes(received)

    reading = asyncio.create_task(download())
    async with asyncio.timeout(10):
        await first_bytes.wait()
    answer = await http.post("/_sim/kill")

    assert answer.json() == {"ok": True, "dropped": 1}
    with pytest.raises(TelegramError):
        await reading


async def test_stored_messages_lists_what_is_not_deleted_per_chat(
    bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    for index in range(3):
        await bots[index].send_document(CHAT_ID, b"abc", "a.bin")
    await bots[0].delete_message(CHAT_ID, 2)

    answer = await http.get("/_sim/messages")

    assert answer.json() == {"ok": True, "chats": {str(CHAT_ID): [1, 3]}}


async def test_holding_releases_its_calls_even_when_its_block_fails(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    with pytest.raises(AssertionError, match="a failed check"), sim.holding("getMe"):
        held = asyncio.create_task(bots[0].get_me())
        async with asyncio.timeout(10):
            await sim.wait_held("getMe")
        raise AssertionError("a failed check")

    async with asyncio.timeout(10):
        assert (await held).id == bots[0].bot_id
    # No longer held: a new call goes through at once.
    assert (await bots[0].get_me()).id == bots[0].bot_id
    assert sim.held_calls("getMe") == 0


async def test_calls_are_held_and_released_over_http(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    """The gate for tests that run the simulator as a process."""
    held = await http.post("/_sim/hold/sendDocument")
    assert held.json() == {"ok": True, "held": 0}
    send = asyncio.create_task(bots[0].send_document(CHAT_ID, b"held", "a.bin"))
    async with asyncio.timeout(10):
        await sim.wait_held("sendDocument")
    assert (await http.get("/_sim/hold/sendDocument")).json() == {"ok": True, "held": 1}
    assert sim.message_count(CHAT_ID) == 0

    assert (await http.post("/_sim/release/sendDocument")).json() == {"ok": True}
    async with asyncio.timeout(10):
        assert (await send).message_id == 1
    assert (await http.get("/_sim/hold/sendDocument")).json() == {"ok": True, "held": 0}
