"""The Bot API client's error typing and edge cases, against respx mocks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from app.config import BotToken
from app.telegram.client import BotClient
from app.telegram.errors import BotUnusable, PermanentError, RateLimited, TransientError

API = "https://api.telegram.org"
TOKEN = BotToken(bot_id=4242, secret="s" * 35)


@pytest.fixture
async def client() -> AsyncIterator[BotClient]:
    bot = BotClient(TOKEN, api_base=API)
    yield bot
    await bot.aclose()


def method_url(method: str) -> str:
    return f"{API}/bot{TOKEN.value}/{method}"


@pytest.mark.parametrize(
    ("status", "body", "error", "text"),
    [
        (
            429,
            {
                "ok": False,
                "error_code": 429,
                "description": "Too Many Requests: retry after 7",
                "parameters": {"retry_after": 7},
            },
            RateLimited,
            "retry after 7",
        ),
        (
            401,
            {"ok": False, "error_code": 401, "description": "Unauthorized"},
            BotUnusable,
            "Unauthorized",
        ),
        (
            403,
            {"ok": False, "error_code": 403, "description": "Forbidden: bot was kicked"},
            BotUnusable,
            "kicked",
        ),
        (
            400,
            {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
            PermanentError,
            "chat not found",
        ),
        (502, None, TransientError, "HTTP 502"),
        (
            400,
            {"ok": False, "error_code": "weird", "description": "Bad Request: odd"},
            PermanentError,
            "odd",
        ),
    ],
)
async def test_errors_are_typed_from_status_and_body(
    client: BotClient, status: int, body: object, error: type[Exception], text: str
) -> None:
    with respx.mock:
        respx.post(method_url("getMe")).mock(
            return_value=httpx.Response(status, json=body)
            if body is not None
            else httpx.Response(status, text="<html>Bad Gateway</html>")
        )
        with pytest.raises(error, match=text) as caught:
            await client.get_me()
    assert TOKEN.secret not in str(caught.value)
    if isinstance(caught.value, RateLimited):
        assert caught.value.retry_after == 7


async def test_timeouts_and_connection_errors_are_transient(client: BotClient) -> None:
    with respx.mock:
        respx.post(method_url("getMe")).mock(side_effect=httpx.ReadTimeout("slow"))
        with pytest.raises(TransientError, match="ReadTimeout"):
            await client.get_me()


async def test_a_document_without_file_size_is_accepted(client: BotClient) -> None:
    with respx.mock:
        respx.post(method_url("sendDocument")).mock(
            return_value=httpx.Response(
                200,
                json={
                    "ok": True,
                    "result": {
                        "message_id": 5,
                        "chat": {"id": -100},
                        "document": {"file_id": "F", "file_unique_id": "U"},
                    },
                },
            )
        )
        document = await client.send_document(-100, b"abc", "a.bin")
    assert (document.bot_id, document.file_id, document.message_id, document.size) == (
        4242,
        "F",
        5,
        3,
    )


async def test_a_short_stored_document_is_a_transient_error(client: BotClient) -> None:
    with respx.mock:
        respx.post(method_url("sendDocument")).mock(
            return_value=httpx.Response(
                200,
                json={
                    "ok": True,
                    "result": {
                        "message_id": 5,
                        "chat": {"id": -100},
                        "document": {"file_id": "F", "file_unique_id": "U", "file_size": 2},
                    },
                },
            )
        )
        with pytest.raises(TransientError, match="stored 2 bytes of a 3-byte"):
            await client.send_document(-100, b"abc", "a.bin")


async def test_expired_file_path_is_a_404_permanent_error(client: BotClient) -> None:
    with respx.mock:
        respx.get(f"{API}/file/bot{TOKEN.value}/documents/1").mock(
            return_value=httpx.Response(
                404, json={"ok": False, "error_code": 404, "description": "Not Found"}
            )
        )
        with pytest.raises(PermanentError) as caught:
            async with client.open_file("documents/1"):
                pass
    assert caught.value.status == 404


async def test_caller_errors_inside_open_file_are_not_relabelled(client: BotClient) -> None:
    with respx.mock:
        respx.get(f"{API}/file/bot{TOKEN.value}/documents/1").mock(
            return_value=httpx.Response(200, content=b"data")
        )
        with pytest.raises(httpx.InvalidURL):
            async with client.open_file("documents/1"):
                raise httpx.InvalidURL("the caller's own mistake")


async def test_file_download_streams_the_bytes(client: BotClient) -> None:
    with respx.mock:
        respx.get(f"{API}/file/bot{TOKEN.value}/documents/1").mock(
            return_value=httpx.Response(200, content=b"x" * 100_000)
        )
        async with client.open_file("documents/1") as body:
            data = b"".join([piece async for piece in body])
    assert data == b"x" * 100_000


def test_repr_and_str_never_show_the_secret() -> None:
    assert TOKEN.secret not in repr(TOKEN) + str(TOKEN)
    assert str(TOKEN) == "4242:***"


async def test_a_call_is_cut_off_at_its_size_scaled_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Budget = connect + size / TELEGRAM_FLOOR_BANDWIDTH + processing allowance.
    monkeypatch.setattr("app.telegram.client.CONNECT_TIMEOUT", 0.05)
    monkeypatch.setattr("app.telegram.client.SERVER_PROCESSING_ALLOWANCE", 0.05)
    client = BotClient(TOKEN, api_base=API, floor_bandwidth=1000)
    answered = False

    async def stall(request: httpx.Request) -> httpx.Response:
        nonlocal answered
        await asyncio.sleep(5)
        answered = True
        return httpx.Response(200)

    try:
        with respx.mock:
            respx.post(method_url("sendDocument")).mock(side_effect=stall)
            with pytest.raises(TransientError, match=r"sendDocument timed out after 0s"):
                await client.send_document(-100, b"x" * 200, "a.bin")  # 0.1 + 0.2 s budget
    finally:
        await client.aclose()
    # Cut off before Telegram answered (the budget, under a second, ran out
    # first), not failed after a late answer.
    assert not answered
