"""What Telegram can lose, as the simulator shows it: a whole chat (deleted,
or the bots banned for good), one file taken down, one byte flipped in a
stored file. Each through the project's own BotClient, so the error types the
store sees are the ones asserted, and over raw HTTP where the exact body
matters."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.errors import ChatForbidden, PermanentError
from app.telegram.simulator import (
    SimulatorConfig,
    TelegramSimulator,
    make_tokens,
    run_simulator,
)
from app.telegram.simulator.persistent import PersistentSimulator

CHAT_A = -1001000000001
CHAT_B = -1001000000002

GONE_FILE = "Bad Request: wrong file_id or the file is temporarily unavailable"


@pytest.fixture
def sim() -> TelegramSimulator:
    """Three bots and two storage chats (replaces the one-chat fixture of conftest)."""
    return TelegramSimulator(SimulatorConfig(tokens=make_tokens(3), chat_ids=[CHAT_A, CHAT_B]))


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


async def download(client: BotClient, file_path: str) -> bytes:
    async with client.open_file(file_path) as pieces:
        return b"".join([piece async for piece in pieces])


async def fetch(client: BotClient, file_id: str) -> bytes:
    location = await client.get_file(file_id)
    return await download(client, location.file_path)


def api(token: str, method: str) -> str:
    return f"/bot{token}/{method}"


# --- a lost chat ------------------------------------------------------------------------


async def test_every_call_naming_a_lost_chat_is_told_chat_not_found(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    kept = await bots[0].send_document(CHAT_A, b"in A", "a.bin")
    sim.lose_chat(CHAT_A)

    # ChatForbidden: the client's refusal of the bot in that chat (a 400
    # "chat not found" names the chat it was about), not a PermanentError.
    calls = {
        "sendDocument": bots[0].send_document(CHAT_A, b"more", "b.bin"),
        "deleteMessage": bots[0].delete_message(CHAT_A, kept.message_id),
        "forwardMessage": bots[1].forward_message(CHAT_A, CHAT_A, kept.message_id),
        "getChatMember": bots[2].get_chat_member(CHAT_A, bots[0].bot_id),
    }
    for method, call in calls.items():
        with pytest.raises(ChatForbidden) as caught:
            await call
        assert caught.value.description == f"{method}: Bad Request: chat not found"
        assert (caught.value.status, caught.value.chat_id) == (400, CHAT_A)
    # The other chat is untouched.
    assert (await bots[0].send_document(CHAT_B, b"in B", "c.bin")).chat_id == CHAT_B


async def test_a_lost_chat_answers_telegrams_body_also_as_a_forward_source(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    kept = await bots[0].send_document(CHAT_A, b"in A", "a.bin")
    sim.lose_chat(CHAT_A)

    # From a lost chat into a live one: the source is the chat not found.
    forward = await http.post(
        api(sim.tokens[1], "forwardMessage"),
        data={"chat_id": CHAT_B, "from_chat_id": CHAT_A, "message_id": kept.message_id},
    )

    assert forward.status_code == 400
    assert forward.json() == {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: chat not found",
    }
    assert sim.message_count(CHAT_B) == 0


async def test_a_file_held_only_in_a_lost_chat_is_gone_by_default(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_A, payload(3000), "a.bin")
    issued = await bots[0].get_file(stored.file_id)
    sim.lose_chat(CHAT_A)

    with pytest.raises(PermanentError) as refused:
        await bots[0].get_file(stored.file_id)
    assert refused.value.description == f"getFile: {GONE_FILE}"
    assert refused.value.status == 400
    with pytest.raises(PermanentError) as not_found:
        await download(bots[0], issued.file_path)
    assert not_found.value.status == 404
    # Nor can it be posted again by its file_id: Telegram no longer has it.
    resent = await http.post(
        api(sim.tokens[0], "sendDocument"), json={"chat_id": CHAT_B, "document": stored.file_id}
    )
    assert resent.json()["description"] == "Bad Request: wrong file identifier/HTTP URL specified"


async def test_a_file_also_held_in_a_live_chat_survives_the_loss(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    data = payload(3000, seed=1)
    stored = await bots[0].send_document(CHAT_A, data, "a.bin")
    # A re-send by file_id is the same file on Telegram's side, now in B too.
    resent = await http.post(
        api(sim.tokens[0], "sendDocument"), json={"chat_id": CHAT_B, "document": stored.file_id}
    )
    assert resent.status_code == 200
    sim.lose_chat(CHAT_A)

    assert await fetch(bots[0], stored.file_id) == data


async def test_files_may_be_told_to_outlive_a_lost_chat(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    data = payload(3000, seed=2)
    stored = await bots[0].send_document(CHAT_A, data, "a.bin")
    issued = await bots[0].get_file(stored.file_id)
    sim.configure(files_outlive_lost_chats=True)
    sim.lose_chat(CHAT_A)

    assert await download(bots[0], issued.file_path) == data
    assert await fetch(bots[0], stored.file_id) == data
    with pytest.raises(ChatForbidden, match="chat not found"):
        await bots[0].delete_message(CHAT_A, stored.message_id)


async def test_a_lost_chat_stores_no_reachable_message(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    await bots[0].send_document(CHAT_A, b"a", "a.bin")
    await bots[0].send_document(CHAT_B, b"b", "b.bin")

    sim.lose_chat(CHAT_A)

    assert sim.chat_lost(CHAT_A) and not sim.chat_lost(CHAT_B)
    assert sim.stored_messages() == {CHAT_A: [], CHAT_B: [1]}
    assert sim.message_count(CHAT_A) == 1  # posted once, whatever became of it
    assert sim.snapshot()["chats"][str(CHAT_A)] == {
        "messages": 1,
        "live_messages": 0,
        "lost": True,
    }
    with pytest.raises(KeyError):
        sim.lose_chat(-100999)


def test_nobody_posts_in_a_lost_chat(sim: TelegramSimulator) -> None:
    sim.post_foreign(CHAT_A)
    sim.lose_chat(CHAT_A)

    with pytest.raises(ValueError, match="is lost"):
        sim.post_foreign(CHAT_A)
    assert sim.message_count(CHAT_A) == 1


# --- a file taken down ------------------------------------------------------------------


async def test_a_takedown_takes_the_file_from_every_message_and_bot_holding_it(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    original = await bots[0].send_document(CHAT_A, payload(4000), "a.bin")
    issued = await bots[0].get_file(original.file_id)
    # A forward and a re-send by file_id are the same file, not copies.
    forwarded = await bots[1].forward_message(CHAT_A, CHAT_A, original.message_id)
    resent = await http.post(
        api(sim.tokens[0], "sendDocument"), json={"chat_id": CHAT_B, "document": original.file_id}
    )
    assert resent.status_code == 200
    other_data = payload(4000, seed=3)
    other = await bots[0].send_document(CHAT_A, other_data, "b.bin")

    taken = sim.take_down(CHAT_A, forwarded.message_id)

    assert taken == [(CHAT_A, original.message_id), (CHAT_A, forwarded.message_id), (CHAT_B, 1)]
    for client, file_id in ((bots[0], original.file_id), (bots[1], forwarded.file_id)):
        with pytest.raises(PermanentError) as gone:
            await client.get_file(file_id)
        assert gone.value.description == f"getFile: {GONE_FILE}"
        assert gone.value.status == 400
    with pytest.raises(PermanentError) as not_found:
        await download(bots[0], issued.file_path)
    assert not_found.value.status == 404
    with pytest.raises(PermanentError) as unforwardable:
        await bots[2].forward_message(CHAT_A, CHAT_A, original.message_id)
    assert unforwardable.value.description == (
        "forwardMessage: Bad Request: message to forward not found"
    )
    for chat_id, message_id in taken:
        with pytest.raises(PermanentError) as undeletable:
            await bots[0].delete_message(chat_id, message_id)
        assert undeletable.value.description == (
            "deleteMessage: Bad Request: message to delete not found"
        )
    # Everything else is untouched.
    assert await fetch(bots[0], other.file_id) == other_data
    assert sim.stored_messages() == {CHAT_A: [other.message_id], CHAT_B: []}


async def test_a_taken_down_file_answers_telegrams_bodies(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_A, payload(1000), "a.bin")
    issued = await bots[0].get_file(stored.file_id)
    sim.take_down(CHAT_A, stored.message_id)

    get_file = await http.post(api(sim.tokens[0], "getFile"), data={"file_id": stored.file_id})
    download = await http.get(f"/file/bot{sim.tokens[0]}/{issued.file_path}")

    assert get_file.status_code == 400
    assert get_file.json() == {"ok": False, "error_code": 400, "description": GONE_FILE}
    # The file server's 404 is the Bot API's JSON error, as for an expired path.
    assert download.status_code == 404
    assert download.json() == {"ok": False, "error_code": 404, "description": "Not Found"}


async def test_a_takedown_of_an_unknown_message_is_refused(sim: TelegramSimulator) -> None:
    with pytest.raises(KeyError):
        sim.take_down(CHAT_A, 1)
    with pytest.raises(KeyError):
        sim.take_down(-100999, 1)


# --- a corrupted file ------------------------------------------------------------------


async def test_a_corrupted_file_downloads_with_200_and_one_wrong_byte(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    data = payload(5000, seed=4)
    stored = await bots[0].send_document(CHAT_A, data, "a.bin")
    forwarded = await bots[1].forward_message(CHAT_A, CHAT_A, stored.message_id)

    offset = sim.corrupt(CHAT_A, stored.message_id)

    # No error anywhere: only a check of the bytes can tell.
    for client, file_id in ((bots[0], stored.file_id), (bots[1], forwarded.file_id)):
        location = await client.get_file(file_id)
        assert location.file_size == len(data)
        served = await download(client, location.file_path)
        assert len(served) == len(data)
        assert [i for i in range(len(data)) if served[i] != data[i]] == [offset]
    assert sim.document_bytes(CHAT_A, forwarded.message_id)[offset] != data[offset]


async def test_corrupt_flips_the_byte_it_is_told_and_refuses_one_past_the_end(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    stored = await bots[0].send_document(CHAT_A, b"abcdef", "a.bin")

    assert sim.corrupt(CHAT_A, stored.message_id, offset=5) == 5
    assert await fetch(bots[0], stored.file_id) == b"abcde" + bytes([ord("f") ^ 0xFF])
    with pytest.raises(ValueError, match="offset 6 is outside the file's 6 bytes"):
        sim.corrupt(CHAT_A, stored.message_id, offset=6)
    with pytest.raises(ValueError, match="offset -1 is outside"):
        sim.corrupt(CHAT_A, stored.message_id, offset=-1)
    with pytest.raises(KeyError):
        sim.corrupt(CHAT_A, 99)


def test_random_offsets_follow_the_seed() -> None:
    def offsets(seed: int) -> list[int]:
        sim = TelegramSimulator(
            SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_A], seed=seed)
        )
        message_id = sim.post_foreign(CHAT_A, "x" * 10_000)
        return [sim.corrupt(CHAT_A, message_id) for _ in range(5)]

    assert offsets(1) == offsets(1)
    assert offsets(1) != offsets(2)


# --- what Telegram stores ---------------------------------------------------------------


async def test_stored_files_lists_every_message_ever_posted_with_its_bytes(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    await bots[0].send_document(CHAT_A, b"kept", "a.bin")
    deleted = await bots[0].send_document(CHAT_A, b"deleted", "b.bin")
    taken = await bots[0].send_document(CHAT_A, b"taken down", "c.bin")
    await bots[0].send_document(CHAT_B, b"in a lost chat", "d.bin")
    await bots[0].delete_message(CHAT_A, deleted.message_id)
    sim.take_down(CHAT_A, taken.message_id)
    sim.lose_chat(CHAT_B)

    # Everything Telegram was ever given: what a privacy check must search.
    assert list(sim.stored_files()) == [
        (CHAT_A, 1, b"kept"),
        (CHAT_A, 2, b"deleted"),
        (CHAT_A, 3, b"taken down"),
        (CHAT_B, 1, b"in a lost chat"),
    ]
    assert list(sim.stored_files(include_gone=False)) == [(CHAT_A, 1, b"kept")]


# --- the same over HTTP, for a simulator in another process -----------------------------


async def test_a_chat_is_lost_over_http(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    answer = await http.post(f"/_sim/chats/{CHAT_A}/lose")

    assert answer.json() == {"ok": True}
    with pytest.raises(ChatForbidden, match="chat not found"):
        await bots[0].send_document(CHAT_A, b"abc", "a.bin")
    stats = (await http.get("/_sim/stats")).json()
    assert stats["chats"][str(CHAT_A)]["lost"] is True
    assert stats["chats"][str(CHAT_B)]["lost"] is False
    unknown = await http.post("/_sim/chats/-100999/lose")
    assert unknown.status_code == 404
    assert unknown.json() == {"ok": False, "description": "unknown chat -100999"}
    assert (await http.post("/_sim/chats/abc/lose")).status_code == 400


async def test_a_message_is_taken_down_over_http(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_A, b"abc", "a.bin")
    forwarded = await bots[1].forward_message(CHAT_A, CHAT_A, stored.message_id)

    answer = await http.post(f"/_sim/messages/{CHAT_A}/{stored.message_id}/take-down")

    assert answer.json() == {
        "ok": True,
        "taken_down": [[CHAT_A, stored.message_id], [CHAT_A, forwarded.message_id]],
    }
    with pytest.raises(PermanentError, match="wrong file_id"):
        await bots[1].get_file(forwarded.file_id)
    missing = await http.post(f"/_sim/messages/{CHAT_A}/99/take-down")
    assert missing.status_code == 404
    assert missing.json()["description"] == f"no message 99 in chat {CHAT_A}"


async def test_a_message_is_corrupted_over_http(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    data = payload(2000, seed=5)
    stored = await bots[0].send_document(CHAT_A, data, "a.bin")
    corrupt = f"/_sim/messages/{CHAT_A}/{stored.message_id}/corrupt"

    at_random = await http.post(corrupt)
    offset = at_random.json()["offset"]
    assert at_random.json() == {"ok": True, "offset": offset}
    assert 0 <= offset < len(data)
    served = await fetch(bots[0], stored.file_id)
    assert [i for i in range(len(data)) if served[i] != data[i]] == [offset]

    told = await http.post(corrupt, params={"offset": 7})
    assert told.json() == {"ok": True, "offset": 7}
    assert sim.document_bytes(CHAT_A, stored.message_id)[7] == data[7] ^ 0xFF
    past_the_end = await http.post(corrupt, params={"offset": 2000})
    assert past_the_end.status_code == 400
    assert past_the_end.json() == {
        "ok": False,
        "description": "offset 2000 is outside the file's 2000 bytes",
    }
    not_a_number = await http.post(corrupt, params={"offset": "x"})
    assert not_a_number.status_code == 400
    assert not_a_number.json()["description"] == "offset must be an integer"


async def test_stored_files_are_listed_and_read_over_http(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    await bots[0].send_document(CHAT_A, b"first", "a.bin")
    deleted = await bots[0].send_document(CHAT_A, b"second", "b.bin")
    await bots[0].delete_message(CHAT_A, deleted.message_id)

    listing = await http.get("/_sim/files")
    second = await http.get(f"/_sim/files/{CHAT_A}/{deleted.message_id}")

    assert listing.json() == {
        "ok": True,
        "files": [
            {"chat_id": CHAT_A, "message_id": 1, "size": 5, "live": True},
            {"chat_id": CHAT_A, "message_id": 2, "size": 6, "live": False},
        ],
    }
    assert second.status_code == 200
    assert second.headers["content-type"] == "application/octet-stream"
    assert second.content == b"second"
    assert (await http.get(f"/_sim/files/{CHAT_B}/1")).status_code == 404


# --- kept across restarts (the demo's --data-dir) ---------------------------------------


async def test_losses_outlive_a_restart_of_the_persistent_simulator(tmp_path: Path) -> None:
    config = SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_A, CHAT_B])
    data = payload(3000, seed=6)
    first = PersistentSimulator(config, tmp_path)
    try:
        async with run_simulator(first) as url:
            bot = BotClient(BotToken.parse(first.tokens[0]), api_base=url)
            try:
                corrupted = await bot.send_document(CHAT_A, data, "a.bin")
                taken = await bot.send_document(CHAT_A, b"taken down", "b.bin")
                await bot.send_document(CHAT_B, b"in a lost chat", "c.bin")
            finally:
                await bot.aclose()
        offset = first.corrupt(CHAT_A, corrupted.message_id)
        first.take_down(CHAT_A, taken.message_id)
        first.lose_chat(CHAT_B)
    finally:
        first.close()

    again = PersistentSimulator(config, tmp_path)
    try:
        async with run_simulator(again) as url:
            bot = BotClient(BotToken.parse(again.tokens[0]), api_base=url)
            try:
                served = await fetch(bot, corrupted.file_id)
                with pytest.raises(PermanentError, match="wrong file_id"):
                    await bot.get_file(taken.file_id)
                with pytest.raises(ChatForbidden, match="chat not found"):
                    await bot.send_document(CHAT_B, b"more", "d.bin")
            finally:
                await bot.aclose()
    finally:
        again.close()
    assert [i for i in range(len(data)) if served[i] != data[i]] == [offset]
    assert again.stored_messages() == {CHAT_A: [corrupted.message_id], CHAT_B: []}
