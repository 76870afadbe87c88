"""The Bot API client's error typing and edge cases, against respx mocks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.errors import (
    BotUnusable,
    CallAbandoned,
    FilesUnreachable,
    PermanentError,
    RateLimited,
    TransientError,
)

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


@pytest.mark.parametrize(
    ("failure", "abandoned"),
    [
        # Telegram may have the request and still be working on it.
        (httpx.ReadTimeout("slow"), True),
        (httpx.WriteTimeout("slow"), True),
        # Nothing reached Telegram, or it has answered (badly): retry at will.
        (httpx.ConnectTimeout("no route"), False),
        (httpx.ConnectError("refused"), False),
        (httpx.RemoteProtocolError("peer closed"), False),
    ],
)
async def test_timeouts_and_connection_errors_are_transient(
    client: BotClient, failure: httpx.HTTPError, abandoned: bool
) -> None:
    with respx.mock:
        respx.post(method_url("getMe")).mock(side_effect=failure)
        with pytest.raises(TransientError) as caught:
            await client.get_me()
    assert isinstance(caught.value, CallAbandoned) is abandoned
    expected = "getMe timed out" if abandoned else type(failure).__name__
    assert expected in str(caught.value)


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


def test_the_time_budget_grows_with_the_body() -> None:
    client = BotClient(
        TOKEN, api_base=API, floor_bandwidth=1000, connect_timeout=2, processing_allowance=3
    )
    # connect + size / floor bandwidth + Telegram's processing allowance
    assert client.time_budget(0) == 5
    assert client.time_budget(10_000) == 15
    assert client.time_budget(19 * 1024 * 1024) == pytest.approx(5 + 19 * 1024 * 1024 / 1000)


@pytest.mark.parametrize(("size", "budget"), [(200, "0.3"), (1200, "1.3")])
async def test_a_call_is_cut_off_at_its_size_scaled_budget(size: int, budget: str) -> None:
    client = BotClient(
        TOKEN,
        api_base=API,
        floor_bandwidth=1000,
        connect_timeout=0.05,
        processing_allowance=0.05,
    )
    gave_up = asyncio.Event()

    async def stall(request: httpx.Request) -> httpx.Response:
        # Telegram never answers; only the client's budget ends the call.
        try:
            await asyncio.Event().wait()
        finally:
            gave_up.set()
        raise AssertionError("unreachable")

    try:
        with respx.mock:
            respx.post(method_url("sendDocument")).mock(side_effect=stall)
            with pytest.raises(CallAbandoned, match=rf"sendDocument timed out after {budget}s"):
                await client.send_document(-100, b"x" * size, "a.bin")
    finally:
        await client.aclose()
    # The request was cancelled, not left running behind the caller's back.
    assert gave_up.is_set()


async def test_a_caption_edit_names_the_message_and_the_pin_comes_with_its_caption(
    client: BotClient,
) -> None:
    with respx.mock:
        edit = respx.post(method_url("editMessageCaption")).mock(
            return_value=httpx.Response(200, json={"ok": True, "result": {"message_id": 7}})
        )
        respx.post(method_url("getChat")).mock(
            return_value=httpx.Response(
                200,
                json={
                    "ok": True,
                    "result": {
                        "id": -100,
                        "pinned_message": {
                            "message_id": 7,
                            "chat": {"id": -100},
                            "caption": '{"seq":3}',
                            "document": {"file_id": "F", "file_unique_id": "U", "file_size": 9},
                        },
                    },
                },
            )
        )
        await client.edit_message_caption(-100, 7, '{"seq":3}')
        pinned = await client.pinned_message(-100)
    sent = dict(httpx.QueryParams(edit.calls.last.request.content.decode()))
    assert sent == {"chat_id": "-100", "message_id": "7", "caption": '{"seq":3}'}
    assert pinned is not None and pinned.caption == '{"seq":3}'
    assert (pinned.document.message_id, pinned.document.file_id) == (7, "F")
    with pytest.raises(ValueError, match="1024"):
        await client.edit_message_caption(-100, 7, "x" * 1025)


async def test_a_getfile_is_given_the_time_its_server_side_download_takes() -> None:
    """getFile answers once the server has downloaded the whole file
    (telegram-bot-api Client.cpp, do_get_file): its budget grows with the
    file's size, as an upload's does with its body."""
    client = BotClient(
        TOKEN,
        api_base=API,
        floor_bandwidth=1000,
        connect_timeout=0.05,
        processing_allowance=0.05,
        expected_file_size=700,
    )

    async def stall(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    try:
        with respx.mock:
            respx.post(method_url("getFile")).mock(side_effect=stall)
            with pytest.raises(CallAbandoned, match=r"getFile timed out after 1.3s"):
                await client.get_file("F", 1200)
            # A file of unknown size: the size the service expects at most.
            with pytest.raises(CallAbandoned, match=r"getFile timed out after 0.8s"):
                await client.get_file("F")
    finally:
        await client.aclose()


async def test_an_absolute_path_from_a_server_taken_for_the_cloud_says_to_set_local_mode(
    client: BotClient,
) -> None:
    """A --local server answers getFile with a path on its disk (Client.cpp,
    json_store_file), which holds the token: never a copy's fault, never
    quoted."""
    path = f"/var/lib/telegram-bot-api/{TOKEN.value}/documents/file_1.bin"
    with respx.mock:
        respx.post(method_url("getFile")).mock(
            return_value=httpx.Response(
                200, json={"ok": True, "result": {"file_id": "F", "file_path": path}}
            )
        )
        with pytest.raises(FilesUnreachable) as caught:
            await client.get_file("F")
    assert "TELEGRAM_LOCAL_SERVER=true" in str(caught.value)
    assert TOKEN.secret not in str(caught.value)


async def test_a_caption_edit_answered_not_modified_has_done_what_was_asked(
    client: BotClient,
) -> None:
    """Telegram answers an edit to the caption a message already has with
    "message is not modified": a retried edit whose first answer was lost."""
    not_modified = {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: message is not modified: specified new message content "
        "and reply markup are exactly the same as a current content and reply markup of the "
        "message",
    }
    with respx.mock:
        respx.post(method_url("editMessageCaption")).mock(
            side_effect=[
                httpx.Response(400, json=not_modified),
                httpx.Response(
                    400,
                    json={
                        "ok": False,
                        "error_code": 400,
                        "description": "Bad Request: message to edit not found",
                    },
                ),
            ]
        )
        await client.edit_message_caption(-100, 7, '{"seq":3}')
        with pytest.raises(PermanentError, match="message to edit not found"):
            await client.edit_message_caption(-100, 7, '{"seq":3}')
