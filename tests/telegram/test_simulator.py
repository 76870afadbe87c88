"""The Telegram simulator, over real HTTP, through the project's own BotClient.

Where the client hides what Telegram sent (status codes, exact bodies), raw
httpx is used instead. Sizes and rates are kept small so the file runs fast.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.errors import (
    BotUnusable,
    CallAbandoned,
    ChatForbidden,
    PermanentError,
    RateLimited,
    TransientError,
)
from app.telegram.simulator import (
    SimulatorConfig,
    TelegramSimulator,
    main_simulator,
    make_tokens,
    run_simulator,
)
from app.telegram.types import StoredDocument
from tests.telegram.conftest import CHAT_ID


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


# --- round trips and file_id ownership -----------------------------------------------


async def test_upload_get_file_download_round_trip_is_byte_identical(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    data = payload(300_000)
    stored = await bots[0].send_document(CHAT_ID, data, "chunk-0.bin", caption="obj 1 part 0")

    assert (stored.bot_id, stored.chat_id, stored.message_id, stored.size) == (
        bots[0].bot_id,
        CHAT_ID,
        1,
        len(data),
    )
    location = await bots[0].get_file(stored.file_id)
    assert location.file_size == len(data)
    assert location.file_unique_id == stored.file_unique_id
    assert location.file_path.startswith("documents/file_")
    assert await download(bots[0], location.file_path) == data
    assert sim.document_bytes(CHAT_ID, stored.message_id) == data


async def test_send_document_answers_a_full_channel_message(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    response = await http.post(
        api(sim.tokens[0], "sendDocument"),
        data={"chat_id": str(CHAT_ID), "caption": "hello", "disable_content_type_detection": "1"},
        files={"document": ("a.txt", b"abc", "application/octet-stream")},
    )

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    message = body["result"]
    assert message["chat"] == {"id": CHAT_ID, "title": message["chat"]["title"], "type": "channel"}
    assert isinstance(message["date"], int)
    assert message["caption"] == "hello"
    document = message["document"]
    assert document["file_name"] == "a.txt"
    assert document["mime_type"] == "application/octet-stream"
    assert document["file_size"] == 3
    assert set(document) == {"file_id", "file_unique_id", "file_name", "mime_type", "file_size"}


async def test_file_id_of_one_bot_is_refused_to_another(bots: list[BotClient]) -> None:
    stored = await bots[0].send_document(CHAT_ID, payload(1000), "a.bin")

    with pytest.raises(PermanentError, match="wrong file_id") as caught:
        await bots[1].get_file(stored.file_id)
    assert caught.value.status == 400


async def test_forward_gives_the_other_bot_a_working_file_id_of_its_own(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    data = payload(50_000, seed=1)
    original = await bots[0].send_document(CHAT_ID, data, "a.bin")

    forwarded = await bots[1].forward_message(CHAT_ID, CHAT_ID, original.message_id)

    assert forwarded.bot_id == bots[1].bot_id
    assert forwarded.file_id != original.file_id
    assert forwarded.file_unique_id == original.file_unique_id
    assert forwarded.size == len(data)
    assert forwarded.message_id == original.message_id + 1
    assert await fetch(bots[1], forwarded.file_id) == data
    assert sim.message_count(CHAT_ID) == 2
    assert sim.message_sender(CHAT_ID, original.message_id) == bots[0].bot_id
    assert sim.message_sender(CHAT_ID, forwarded.message_id) == bots[1].bot_id
    with pytest.raises(PermanentError, match="wrong file_id"):
        await bots[1].get_file(original.file_id)


async def test_forward_of_a_missing_message_is_refused(bots: list[BotClient]) -> None:
    with pytest.raises(PermanentError, match="message to forward not found"):
        await bots[1].forward_message(CHAT_ID, CHAT_ID, 42)


async def test_download_path_of_another_bot_is_not_found(bots: list[BotClient]) -> None:
    stored = await bots[0].send_document(CHAT_ID, payload(1000), "a.bin")
    location = await bots[0].get_file(stored.file_id)

    with pytest.raises(PermanentError) as caught:
        await download(bots[1], location.file_path)
    assert caught.value.status == 404


async def test_resending_a_file_id_posts_the_same_file_without_upload(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_ID, payload(2000), "a.bin")

    response = await http.post(
        api(sim.tokens[0], "sendDocument"),
        json={"chat_id": CHAT_ID, "document": stored.file_id},
    )

    document = response.json()["result"]["document"]
    assert document["file_unique_id"] == stored.file_unique_id
    assert document["file_size"] == 2000
    refused = await http.post(
        api(sim.tokens[1], "sendDocument"), json={"chat_id": CHAT_ID, "document": stored.file_id}
    )
    assert refused.status_code == 400


# --- size limits --------------------------------------------------------------------


async def test_upload_over_the_cap_gets_413_and_stores_nothing(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(max_upload_bytes=10_000)

    with pytest.raises(PermanentError, match="Request Entity Too Large") as caught:
        await bots[0].send_document(CHAT_ID, payload(20_000), "big.bin")

    assert caught.value.status == 413
    assert sim.message_count(CHAT_ID) == 0
    assert sim.stats()[bots[0].bot_id].bytes_received > 20_000  # read to the end anyway


async def test_get_file_over_the_limit_is_too_big(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(max_getfile_bytes=1000)
    at_limit = await bots[0].send_document(CHAT_ID, payload(1000), "ok.bin")
    over = await bots[0].send_document(CHAT_ID, payload(1001), "big.bin")

    assert (await bots[0].get_file(at_limit.file_id)).file_size == 1000
    with pytest.raises(PermanentError, match="file is too big") as caught:
        await bots[0].get_file(over.file_id)
    assert caught.value.status == 400


async def test_default_limits_match_telegram() -> None:
    config = SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID])

    assert config.max_upload_bytes == 50 * 1024 * 1024
    assert config.max_getfile_bytes == 20_000_000


# --- deleting ---------------------------------------------------------------------------


async def test_delete_twice_fails_the_second_time_and_file_ids_survive(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    data = payload(5000)
    stored = await bots[0].send_document(CHAT_ID, data, "a.bin")
    kept = await bots[0].send_document(CHAT_ID, data, "b.bin")

    await bots[0].delete_message(CHAT_ID, stored.message_id)
    with pytest.raises(PermanentError, match="message to delete not found"):
        await bots[0].delete_message(CHAT_ID, stored.message_id)

    assert sim.live_messages(CHAT_ID) == [kept.message_id]
    assert sim.message_count(CHAT_ID) == 2
    assert await fetch(bots[0], stored.file_id) == data


async def test_messages_older_than_48_hours_cannot_be_deleted(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    stored = await bots[0].send_document(CHAT_ID, b"x", "a.bin")
    sim.advance_clock(48 * 3600 + 1)

    with pytest.raises(PermanentError, match="message can't be deleted"):
        await bots[0].delete_message(CHAT_ID, stored.message_id)


async def test_file_paths_expire_and_get_file_issues_a_new_one(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    stored = await bots[0].send_document(CHAT_ID, b"abc", "a.bin")
    old = await bots[0].get_file(stored.file_id)
    sim.advance_clock(3601)

    with pytest.raises(PermanentError) as caught:
        await download(bots[0], old.file_path)
    assert caught.value.status == 404
    new = await bots[0].get_file(stored.file_id)
    assert new.file_path != old.file_path
    assert await download(bots[0], new.file_path) == b"abc"


# --- unusable bots ------------------------------------------------------------------


async def test_unknown_token_is_unauthorized(sim_url: str) -> None:
    stranger = BotClient(BotToken.parse(make_tokens(1, first_id=999_999)[0]), api_base=sim_url)
    try:
        with pytest.raises(BotUnusable, match="Unauthorized") as caught:
            await stranger.get_me()
    finally:
        await stranger.aclose()
    assert caught.value.status == 401


async def test_revoked_token_is_unauthorized_for_calls_and_downloads(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    stored = await bots[0].send_document(CHAT_ID, b"abc", "a.bin")
    location = await bots[0].get_file(stored.file_id)
    sim.revoke(bots[0].bot_id)

    with pytest.raises(BotUnusable) as caught:
        await bots[0].get_me()
    assert caught.value.status == 401
    with pytest.raises(BotUnusable):
        await download(bots[0], location.file_path)
    assert (await bots[1].get_me()).id == bots[1].bot_id


async def test_kicked_bot_is_forbidden_in_that_chat(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.kick(bots[0].bot_id, CHAT_ID)

    with pytest.raises(BotUnusable, match="bot was kicked") as caught:
        await bots[0].send_document(CHAT_ID, b"abc", "a.bin")
    assert caught.value.status == 403
    with pytest.raises(BotUnusable):
        await bots[0].get_chat_member(CHAT_ID, bots[0].bot_id)
    seen_by_other = await bots[1].get_chat_member(CHAT_ID, bots[0].bot_id)
    assert seen_by_other.status == "kicked"
    assert not seen_by_other.is_admin


async def test_member_bots_are_admins_who_may_post_and_delete(bots: list[BotClient]) -> None:
    member = await bots[0].get_chat_member(CHAT_ID, bots[1].bot_id)

    assert member.is_admin
    assert member.can_post_messages and member.can_delete_messages


async def test_wrong_chat_and_missing_document_are_bad_requests(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    # A chat the bot does not see: a refusal of the bot in that chat.
    with pytest.raises(ChatForbidden, match="chat not found") as refused:
        await bots[0].send_document(-100999, b"abc", "a.bin")
    assert refused.value.chat_id == -100999

    response = await http.post(api(sim.tokens[0], "sendDocument"), data={"chat_id": CHAT_ID})
    assert response.status_code == 400
    assert response.json() == {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: there is no document in the request",
    }


# --- rate limits --------------------------------------------------------------------


async def test_two_concurrent_uploads_on_one_token_collide(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    with sim.holding("sendDocument"):  # the first upload stays in flight
        first = asyncio.create_task(bots[0].send_document(CHAT_ID, payload(50_000, 1), "a.bin"))
        async with asyncio.timeout(10):
            await sim.wait_held("sendDocument")
            with pytest.raises(RateLimited) as limited:
                await bots[0].send_document(CHAT_ID, payload(50_000, 2), "b.bin")
    assert isinstance(await first, StoredDocument)

    assert limited.value.retry_after == 30
    stats = sim.stats()[bots[0].bot_id]
    assert stats.rate_limited == 1
    assert stats.max_concurrent_calls == 2
    assert stats.max_concurrent_uploads == 2  # the refused one was in flight too
    assert sim.message_count(CHAT_ID) == 1


async def test_a_small_call_runs_beside_an_upload_and_collides_only_with_a_small_one(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    """The limit counts small calls (SMALL_METHODS) and the others apart: the
    dispatcher's promise of one upload-lane call and one small call at once
    per token (the official server spaces only same-size uploads)."""
    document = await bots[0].send_document(CHAT_ID, payload(1000, 1), "a.bin")
    with sim.holding("sendDocument"), sim.holding("getFile"):
        upload = asyncio.create_task(bots[0].send_document(CHAT_ID, payload(50_000, 2), "b.bin"))
        async with asyncio.timeout(10):
            await sim.wait_held("sendDocument")
            # Beside the upload, a getFile runs...
            read = asyncio.create_task(bots[0].get_file(document.file_id))
            await sim.wait_held("getFile")
            # ...and a second small call, or a second upload-lane call, collides.
            with pytest.raises(RateLimited):
                await bots[0].delete_message(CHAT_ID, document.message_id)
            with pytest.raises(RateLimited):
                await bots[0].forward_message(CHAT_ID, CHAT_ID, document.message_id)
    await upload
    assert (await read).file_id == document.file_id

    stats = sim.stats()[bots[0].bot_id]
    assert (stats.max_concurrent_calls, stats.max_concurrent_uploads) == (3, 1)
    assert (stats.max_concurrent_small_calls, stats.max_concurrent_posting_calls) == (2, 2)
    # What overlapped what, as a test that finds two calls at once reports it.
    assert [overlap.partition(" (")[0] for overlap in stats.overlaps] == [
        "getFile during sendDocument",
        "deleteMessage during sendDocument, getFile",
        "forwardMessage during sendDocument, getFile",
    ]


async def test_an_upload_abandoned_after_its_body_still_posts_and_stays_in_flight(
    sim: TelegramSimulator, sim_url: str
) -> None:
    token = BotToken.parse(sim.tokens[0])
    impatient = BotClient(token, api_base=sim_url, connect_timeout=0.1, processing_allowance=0.1)
    try:
        with sim.holding("sendDocument"):  # Telegram's work after the body has arrived
            with pytest.raises(CallAbandoned):
                await impatient.send_document(CHAT_ID, payload(1000, 3), "c.bin")
            # The client has given up; Telegram has not.
            assert sim.stats()[token.bot_id].calls_in_flight == 1
            assert sim.message_count(CHAT_ID) == 0
        async with asyncio.timeout(10):
            await sim.wait_until_idle()
    finally:
        await impatient.aclose()
    assert sim.message_count(CHAT_ID) == 1


async def test_uploads_on_different_tokens_run_side_by_side(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    with sim.holding("sendDocument"):
        uploads = asyncio.gather(
            *(bot.send_document(CHAT_ID, payload(50_000), "a.bin") for bot in bots)
        )
        # Every upload in flight at once, each past its checks: side by side,
        # and none refused. (How fast uploads on several tokens go is
        # measured by bench/dispatcher_bench.py.)
        async with asyncio.timeout(10):
            await sim.wait_held("sendDocument", calls=len(bots))
        assert [s.calls_in_flight for s in sim.stats().values()] == [1, 1, 1]
    results = await uploads

    assert [r.bot_id for r in results] == [bot.bot_id for bot in bots]
    assert all(s.max_concurrent_calls == 1 for s in sim.stats().values())
    assert all(s.rate_limited == 0 for s in sim.stats().values())


async def test_sends_per_minute_budget_is_per_bot_and_chat(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(sends_per_minute=2)
    first = await bots[0].send_document(CHAT_ID, b"1", "a.bin")
    await bots[0].forward_message(CHAT_ID, CHAT_ID, first.message_id)

    with pytest.raises(RateLimited) as caught:
        await bots[0].send_document(CHAT_ID, b"3", "a.bin")

    assert 59 <= caught.value.retry_after <= 60
    await bots[1].send_document(CHAT_ID, b"other bot", "a.bin")
    sim.advance_clock(60)
    await bots[0].send_document(CHAT_ID, b"after a minute", "a.bin")
    assert sim.stats()[bots[0].bot_id].rate_limited == 1


async def test_rate_limit_body_is_telegrams(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    sim.configure(fault_429_rate=1.0, random_429_retry_after=7)

    response = await http.post(api(sim.tokens[0], "getFile"), data={"file_id": "x"})

    assert response.status_code == 429
    assert response.json() == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 7",
        "parameters": {"retry_after": 7},
    }


# --- faults -------------------------------------------------------------------------


async def test_server_errors_are_transient_and_store_nothing(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(fault_5xx_rate=1.0, seed=3)

    for _ in range(4):  # both the JSON 500 and the HTML 502 come up
        with pytest.raises(TransientError):
            await bots[0].send_document(CHAT_ID, b"abc", "a.bin")

    assert sim.message_count(CHAT_ID) == 0
    stats = sim.stats()[bots[0].bot_id]
    assert stats.faults_injected == 4
    assert set(stats.errors) <= {500, 502} and sum(stats.errors.values()) == 4


async def test_dropped_connection_is_transient_but_the_message_exists(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(fault_drop_rate=1.0)

    with pytest.raises(TransientError, match="RemoteProtocolError"):
        await bots[0].send_document(CHAT_ID, b"abc", "a.bin")

    assert sim.message_count(CHAT_ID) == 1  # an orphan, as in real life
    assert sim.stats()[bots[0].bot_id].faults_injected == 1


async def test_dropped_download_fails_midway(sim: TelegramSimulator, bots: list[BotClient]) -> None:
    stored = await bots[0].send_document(CHAT_ID, payload(200_000), "a.bin")
    location = await bots[0].get_file(stored.file_id)
    sim.configure(fault_drop_rate=1.0)

    with pytest.raises(TransientError):
        await download(bots[0], location.file_path)
    assert sim.stats()[bots[0].bot_id].bytes_sent == 100_000


async def test_download_drops_strike_downloads_only(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.set_faults(fault_download_drop_rate=1.0)
    data = payload(200_000)

    stored = await bots[0].send_document(CHAT_ID, data, "a.bin")
    location = await bots[0].get_file(stored.file_id)
    with pytest.raises(TransientError):
        await download(bots[0], location.file_path)

    stats = sim.stats()[bots[0].bot_id]
    assert stats.faults_injected == 1
    assert stats.bytes_sent == 100_000
    sim.set_faults(fault_download_drop_rate=0.0)
    assert await download(bots[0], location.file_path) == data


async def test_held_calls_wait_until_released(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.hold("senddocument")  # any case, as method names
    sending = asyncio.create_task(bots[0].send_document(CHAT_ID, b"abc", "a.bin"))
    async with asyncio.timeout(5):
        await sim.wait_held("sendDocument")

    assert sim.message_count(CHAT_ID) == 0
    assert (await bots[1].get_me()).id == bots[1].bot_id  # other methods are not held
    assert not sending.done()

    sim.release("sendDocument")
    stored = await sending
    assert sim.message_count(CHAT_ID) == 1
    assert sim.held_calls("sendDocument") == 0
    # Released for good: later calls go straight through.
    await bots[0].send_document(CHAT_ID, b"def", "b.bin")
    assert stored.message_id == 1
    assert sim.message_count(CHAT_ID) == 2


async def test_random_429_is_rate_limited(sim: TelegramSimulator, bots: list[BotClient]) -> None:
    sim.set_faults(fault_429_rate=1.0)

    with pytest.raises(RateLimited) as caught:
        await bots[0].send_document(CHAT_ID, b"abc", "a.bin")
    assert caught.value.retry_after == 1


async def test_get_me_and_get_chat_member_are_never_faulted(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.set_faults(fault_5xx_rate=1.0, fault_drop_rate=1.0, fault_429_rate=1.0)

    assert (await bots[0].get_me()).id == bots[0].bot_id
    assert (await bots[0].get_chat_member(CHAT_ID, bots[0].bot_id)).is_admin
    assert sim.stats()[bots[0].bot_id].faults_injected == 0


# --- pacing -------------------------------------------------------------------------


async def test_bandwidth_and_latency_slow_calls_down(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(upload_bandwidth=200_000, download_bandwidth=200_000)
    data = payload(40_000)

    started = time.monotonic()
    stored = await bots[0].send_document(CHAT_ID, data, "a.bin")
    upload_time = time.monotonic() - started
    location = await bots[0].get_file(stored.file_id)
    started = time.monotonic()
    assert await download(bots[0], location.file_path) == data
    download_time = time.monotonic() - started
    sim.configure(latency=0.1)
    started = time.monotonic()
    await bots[0].get_me()
    call_time = time.monotonic() - started

    assert upload_time >= 0.2
    assert download_time >= 0.19
    assert call_time >= 0.1


async def test_client_that_gives_up_mid_upload_stores_nothing(
    sim: TelegramSimulator, sim_url: str
) -> None:
    sim.configure(upload_bandwidth=100_000)  # 50 KB take 0.5 s
    client = BotClient(BotToken.parse(sim.tokens[0]), api_base=sim_url)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await client.send_document(CHAT_ID, payload(50_000), "a.bin")
    finally:
        await client.aclose()
    async with asyncio.timeout(2):
        await sim.wait_until_idle()

    assert sim.message_count(CHAT_ID) == 0


# --- statistics ---------------------------------------------------------------------


async def test_stats_count_calls_bytes_and_concurrency(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    data = payload(10_000)
    stored = await bots[0].send_document(CHAT_ID, data, "a.bin")
    assert await fetch(bots[0], stored.file_id) == data
    await bots[0].delete_message(CHAT_ID, stored.message_id)
    await bots[0].get_me()

    stats = sim.stats()[bots[0].bot_id]
    assert stats.calls == {"sendDocument": 1, "getFile": 1, "deleteMessage": 1, "getMe": 1}
    assert data_size_with_overhead(stats.bytes_received, len(data))
    assert stats.bytes_sent == len(data)
    assert stats.downloads == 1
    assert stats.max_concurrent_calls == 1
    assert stats.rate_limited == stats.faults_injected == 0
    assert sim.stats()[bots[1].bot_id].calls == {}

    sim.reset_stats()
    assert sim.stats()[bots[0].bot_id].calls == {}
    assert sim.stats()[bots[0].bot_id].max_concurrent_calls == 0


def data_size_with_overhead(received: int, size: int) -> bool:
    # The multipart envelope and the small form bodies of the other calls.
    return size < received < size + 2000


async def test_in_flight_calls_of_any_method_are_counted(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    with sim.holding("getMe"):
        first = asyncio.create_task(bots[0].get_me())
        async with asyncio.timeout(10):
            await sim.wait_held("getMe")
            with pytest.raises(RateLimited):
                await bots[0].get_chat_member(CHAT_ID, bots[0].bot_id)
    assert (await first).id == bots[0].bot_id
    assert sim.stats()[bots[0].bot_id].max_concurrent_calls == 2


# --- the raw protocol -----------------------------------------------------------------


async def test_methods_accept_get_query_json_and_any_case(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    token = sim.tokens[0]
    bot_id = int(token.split(":")[0])

    by_get = await http.get(api(token, "getChatMember"), params={"chat_id": CHAT_ID, "user_id": 1})
    by_json = await http.post(
        api(token, "getchatmember"), json={"chat_id": CHAT_ID, "user_id": bot_id}
    )
    me = await http.get(api(token, "getMe"))

    assert by_get.json()["result"]["status"] == "left"
    assert by_json.json()["result"]["status"] == "administrator"
    assert me.json() == {
        "ok": True,
        "result": {
            "id": bot_id,
            "is_bot": True,
            "first_name": f"Simulated bot {bot_id}",
            "username": f"sim{bot_id}_bot",
        },
    }


async def test_unknown_method_and_malformed_token_are_not_found(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    unknown_method = await http.post(api(sim.tokens[0], "sendRocket"))
    malformed = await http.post(api("not-a-token", "getMe"))
    unknown_token = await http.post(api(make_tokens(1, first_id=5)[0], "getMe"))

    assert unknown_method.status_code == 404
    assert unknown_method.json() == {"ok": False, "error_code": 404, "description": "Not Found"}
    assert malformed.status_code == 404
    assert unknown_token.status_code == 401
    assert unknown_token.json()["description"] == "Unauthorized"


async def test_control_endpoints(sim: TelegramSimulator, http: httpx.AsyncClient) -> None:
    bot_id = sim.bot_ids[0]

    changed = await http.post("/_sim/config", json={"latency": 0.01, "sends_per_minute": 20})
    refused = await http.post("/_sim/config", json={"tokens": []})
    invalid = await http.post("/_sim/config", json={"fault_5xx_rate": 2})
    await http.post(f"/_sim/kick/{bot_id}/{CHAT_ID}")
    kicked = await http.post(
        api(sim.tokens[0], "deleteMessage"), data={"chat_id": CHAT_ID, "message_id": 1}
    )
    await http.post(f"/_sim/revoke/{bot_id}")
    revoked = await http.post(api(sim.tokens[0], "getMe"))
    stats = (await http.get("/_sim/stats")).json()
    await http.post("/_sim/reset-stats")
    after_reset = (await http.get("/_sim/stats")).json()
    unknown_bot = await http.post("/_sim/revoke/1")

    assert changed.json()["config"]["latency"] == 0.01
    assert sim.config.sends_per_minute == 20
    assert refused.status_code == invalid.status_code == 400
    assert kicked.status_code == 403
    assert revoked.status_code == 401
    assert stats["bots"][str(bot_id)]["calls"] == {"deleteMessage": 1, "getMe": 1}
    assert stats["bots"][str(bot_id)]["errors"] == {"401": 1, "403": 1}
    assert stats["chats"][str(CHAT_ID)] == {"messages": 0, "live_messages": 0, "lost": False}
    assert after_reset["bots"][str(bot_id)]["calls"] == {}
    assert unknown_bot.status_code == 404


# --- setup helpers ------------------------------------------------------------------


def test_make_tokens_are_valid_and_deterministic() -> None:
    tokens = make_tokens(3, first_id=200)

    assert tokens == make_tokens(3, first_id=200)
    assert [BotToken.parse(t).bot_id for t in tokens] == [200, 201, 202]
    assert all(len(t.split(":")[1]) == 35 for t in tokens)
    assert len({t.split(":")[1] for t in tokens}) == 3


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="fault_drop_rate"):
        SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID], fault_drop_rate=1.5)
    with pytest.raises(ValueError, match="upload_bandwidth"):
        SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID], upload_bandwidth=0)
    with pytest.raises(ValueError, match="not a changeable setting"):
        TelegramSimulator(SimulatorConfig(tokens=make_tokens(1), chat_ids=[1])).configure(
            chat_ids=[2]
        )


def test_main_simulator_prints_and_writes_its_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: dict[str, Any] = {}
    monkeypatch.setattr(
        "app.telegram.simulator.server.create_simulator_app", lambda sim: served.update(sim=sim)
    )
    monkeypatch.setattr(
        "app.telegram.simulator.server.uvicorn.run", lambda app, **kwargs: served.update(kwargs)
    )
    tokens_file = tmp_path / "tokens.txt"

    main_simulator(
        "127.0.0.1",
        8099,
        bots=2,
        chat_id=-1001,
        tokens_file=tokens_file,
        concurrency_limit=2,
        fault_5xx_rate=None,
        sends_per_minute=20,
    )

    printed = capsys.readouterr().out.split()
    assert printed == make_tokens(2)
    assert tokens_file.read_text().split() == printed
    assert served["port"] == 8099
    config = served["sim"].config
    assert (config.max_concurrent_calls_per_bot, config.sends_per_minute) == (2, 20)
    assert config.fault_5xx_rate == 0.0
    assert config.chat_ids == [-1001]


async def test_run_simulator_serves_on_a_free_port_and_stops() -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID]))

    async with run_simulator(sim) as url, httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/bot{sim.tokens[0]}/getMe")).json()["ok"] is True

    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"{url}/bot{sim.tokens[0]}/getMe")


# --- pinned messages (getChat's pinned_message) ---------------------------------------


async def test_get_chat_names_the_latest_standing_pin_with_a_file_id_of_the_callers(
    bots: list[BotClient],
) -> None:
    assert await bots[0].pinned_document(CHAT_ID) is None
    first = await bots[0].send_document(CHAT_ID, b"first", "a.json")
    second = await bots[0].send_document(CHAT_ID, b"second", "b.json")
    await bots[0].pin_chat_message(CHAT_ID, first.message_id)
    await bots[0].pin_chat_message(CHAT_ID, second.message_id)

    pinned = await bots[1].pinned_document(CHAT_ID)
    assert pinned is not None and pinned.message_id == second.message_id
    assert await fetch(bots[1], pinned.file_id) == b"second"

    # Unpinning or deleting the latest pin brings the earlier one back.
    await bots[0].unpin_chat_message(CHAT_ID, second.message_id)
    again = await bots[0].pinned_document(CHAT_ID)
    assert again is not None and again.message_id == first.message_id
    await bots[0].pin_chat_message(CHAT_ID, second.message_id)
    await bots[0].delete_message(CHAT_ID, second.message_id)
    after_delete = await bots[0].pinned_document(CHAT_ID)
    assert after_delete is not None and after_delete.message_id == first.message_id
    with pytest.raises(PermanentError, match="message to pin not found"):
        await bots[0].pin_chat_message(CHAT_ID, second.message_id)


async def test_a_caption_edit_shows_in_get_chat_and_posts_nothing(
    sim: TelegramSimulator, bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    manifest = await bots[0].send_document(CHAT_ID, b"manifest", "m.json")
    await bots[0].pin_chat_message(CHAT_ID, manifest.message_id)
    before = await bots[0].send_document(CHAT_ID, b"next", "n.bin")

    await bots[0].edit_message_caption(CHAT_ID, manifest.message_id, '{"seq":1}')

    pinned = await bots[1].pinned_message(CHAT_ID)
    assert pinned is not None and pinned.document.message_id == manifest.message_id
    assert pinned.caption == '{"seq":1}'
    after = await bots[0].send_document(CHAT_ID, b"after", "a.bin")
    assert after.message_id == before.message_id + 1  # the edit took no message id
    # The same caption again: Telegram's "message is not modified" (the
    # client takes it for the success it is).
    again = await http.post(
        f"/bot{sim.tokens[0]}/editMessageCaption",
        data={"chat_id": CHAT_ID, "message_id": manifest.message_id, "caption": '{"seq":1}'},
    )
    assert again.status_code == 400
    assert again.json()["description"].startswith("Bad Request: message is not modified")
    await bots[0].edit_message_caption(CHAT_ID, manifest.message_id, '{"seq":1}')
    with pytest.raises(PermanentError, match="message to edit not found"):
        await bots[0].edit_message_caption(CHAT_ID, after.message_id + 5, "x")
