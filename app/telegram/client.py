"""A Bot API client for one bot, on its own keep-alive `httpx.AsyncClient`.

Every failure comes out as one of the typed errors in `errors.py`. The token is
part of every URL, so nothing from httpx is passed on as is: descriptions come
from Telegram's JSON or from the exception's type, with the token scrubbed.

This client does not serialise calls; the dispatcher does (one worker per bot).
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import httpx

from app.config.settings import BotToken
from app.kit.seekable_body import SEND_PIECE, SeekableBody
from app.telegram.chunk_pieces import ChunkPieces
from app.telegram.errors import (
    CallAbandoned,
    FilesUnreachable,
    PermanentError,
    TelegramError,
    TransientError,
    error_from_reply,
)
from app.telegram.local_files import LocalFiles
from app.telegram.network import LoopTransport
from app.telegram.types import (
    CAPTION_LIMIT,
    BotInfo,
    ChatMemberInfo,
    DocumentBody,
    FileLocation,
    PinnedDocument,
    StoredDocument,
)

CONNECT_TIMEOUT = 10.0
# Time Telegram may take to answer once it has the whole body (it stores the file).
SERVER_PROCESSING_ALLOWANCE = 30.0
# Time allowed for one read of a streamed download before it counts as stalled.
STREAM_READ_TIMEOUT = 30.0

# Whether the running call's request reached Telegram whole: None until its
# body starts out (or where no socket is traced: a mocked transport), False
# while it is being written, True once it all was. Only a request Telegram
# has whole can still be carried out after the call is cut short
# (app.telegram.attempts reads it then, in the same task).
REQUEST_SENT: ContextVar[bool | None] = ContextVar("request_sent", default=None)


async def _trace_sending(event: str, info: dict[str, Any]) -> None:
    """httpcore's trace of a call: follows its body's writing."""
    if event.endswith("send_request_body.started"):
        REQUEST_SENT.set(False)
    elif event.endswith("send_request_body.complete"):
        REQUEST_SENT.set(True)


class _ChunkReader(SeekableBody):
    """A chunk as a file, read in place: a BytesIO of a bytearray would copy
    the whole chunk (and one chunk more per upload is what the memory budget
    cannot afford)."""

    def __init__(self, data: bytes | bytearray) -> None:
        super().__init__(len(data))
        self._view = memoryview(data)

    def read(self, size: int = -1) -> bytes:
        """At least SEND_PIECE bytes whatever `size` asks (httpx asks for
        64 KiB): each piece costs a trip through httpcore, h11 and a socket
        write (SEND_PIECE); in 64 KiB pieces on anyio's sockets those trips
        were a third of the CPU an upload spent with the GIL held
        (bench/ingest_bench.py)."""
        start = self._position
        end = len(self._view) if size < 0 else min(len(self._view), start + max(size, SEND_PIECE))
        self._position = max(start, end)
        return bytes(self._view[start:end])

    def readinto(self, buffer: Any) -> int:
        count = max(0, min(len(buffer), len(self._view) - self._position))
        buffer[:count] = self._view[self._position : self._position + count]
        self._position += count
        return count

    def close(self) -> None:
        self._view.release()
        super().close()


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS client context of the process, as httpx would make it
    (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR). Loading the roots
    takes 40-60 ms: once, not per bot client."""
    return httpx.create_ssl_context()


def _served_from(response: httpx.Response, offset: int) -> int | None:
    """Where a file download starts: 0 for a 200 (the whole file), `offset`
    for a 206 whose Content-Range says so; None for an error (or a range
    other than the one asked for, which is taken for one)."""
    if response.status_code == 200:
        return 0
    if response.status_code == 206:
        served = response.headers.get("content-range", "")
        if served.startswith(f"bytes {offset}-"):
            return offset
    return None


class BotClient:
    def __init__(
        self,
        token: BotToken,
        *,
        api_base: str = "https://api.telegram.org",
        floor_bandwidth: int = 256 * 1024,
        connect_timeout: float = CONNECT_TIMEOUT,
        processing_allowance: float = SERVER_PROCESSING_ALLOWANCE,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int | None = None,
        local_files: LocalFiles | None = None,
        expected_file_size: int = 0,
    ) -> None:
        """`local_files`: the server runs with --local, and its files are read
        from the disk (app.telegram.local_files). `expected_file_size`: the
        size a getFile of unknown size is given time for (the service's
        largest chunk)."""
        self.token = token
        self.bot_id = token.bot_id
        self._local = local_files
        self.expected_file_size = expected_file_size
        self._api_base = api_base.rstrip("/")
        self._floor_bandwidth = floor_bandwidth
        self._connect_timeout = connect_timeout
        self._processing_allowance = processing_allowance
        # None: no limit. The service passes DOWNLOAD_CONNECTIONS + 1: the file
        # downloads the budget allows, plus the one Bot API call a bot runs.
        # 16 kept alive: a download fetches up to 16 parts of chunks at once
        # (app/store/reader.py), and each new connection costs a handshake.
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=16, keepalive_expiry=60.0
        )
        self._http = httpx.AsyncClient(
            transport=transport or LoopTransport(verify=tls_context(), limits=limits),
            timeout=httpx.Timeout(connect_timeout, read=60.0, write=60.0),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"BotClient(bot_id={self.bot_id})"

    # --- Bot API methods --------------------------------------------------------

    async def get_me(self) -> BotInfo:
        result = await self._call("getMe")
        return BotInfo(
            id=int(result["id"]),
            username=result.get("username"),
            first_name=str(result.get("first_name", "")),
        )

    async def send_document(
        self,
        chat_id: int,
        data: bytes | bytearray | ChunkPieces | DocumentBody,
        filename: str,
        *,
        caption: str | None = None,
    ) -> StoredDocument:
        fields: dict[str, Any] = {
            "chat_id": str(chat_id),
            "disable_content_type_detection": "true",
            "disable_notification": "true",
        }
        if caption:
            fields["caption"] = caption[:CAPTION_LIMIT]
        # Not `data` itself: httpx keeps the request, and so its body, alive in a
        # reference cycle (Response.stream -> BoundAsyncStream -> Response) that
        # only the cyclic GC frees, seconds later. Each sent chunk would stay in
        # memory until then. A file object, closed here, drops the chunk at once.
        # A DocumentBody is its caller's to close (it is read again on a retry).
        body: Any = data
        if isinstance(data, bytes | bytearray):
            body = _ChunkReader(data)
        elif isinstance(data, ChunkPieces):
            body = data.body()
        try:
            body.seek(0)
            message = await self._call(
                "sendDocument",
                data=fields,
                files={"document": (filename, body, "application/octet-stream")},
                body_size=len(data),
            )
        finally:
            if body is not data:
                body.close()
        return self._stored_document(message, expected_size=len(data))

    async def get_file(self, file_id: str, size: int | None = None) -> FileLocation:
        """Where the file can be read now. getFile is a download: the server
        fetches the whole file before it answers (telegram-bot-api Client.cpp,
        do_get_file), so the call's time budget grows with its `size`
        (`expected_file_size` when not given). The path is always relative
        to the bot's directory: a local server's absolute one (which holds
        the token) is cut to that (app.telegram.local_files)."""
        work = self.expected_file_size if size is None else size
        result = await self._call("getFile", data={"file_id": file_id}, body_size=work)
        path = result.get("file_path")
        if not path:
            raise PermanentError("getFile returned no file_path", status=400, bot_id=self.bot_id)
        path = str(path)
        if self._local is not None:
            path = self._local.relative(self.token, path)
        elif path.startswith("/"):
            raise FilesUnreachable(
                "getFile answered an absolute path: the Bot API server at TELEGRAM_API_BASE "
                "runs with --local and serves no files; set TELEGRAM_LOCAL_SERVER=true "
                "(deploy/README.md, A local Bot API server)",
                bot_id=self.bot_id,
            )
        return FileLocation(
            file_id=str(result["file_id"]),
            file_unique_id=str(result.get("file_unique_id", "")),
            file_path=path,
            file_size=result.get("file_size"),
        )

    async def delete_message(self, chat_id: int, message_id: int) -> None:
        await self._call(
            "deleteMessage", data={"chat_id": str(chat_id), "message_id": str(message_id)}
        )

    async def forward_message(
        self, chat_id: int, from_chat_id: int, message_id: int
    ) -> StoredDocument:
        """Forward a stored document so that this bot gets a file_id of its own."""
        message = await self._call(
            "forwardMessage",
            data={
                "chat_id": str(chat_id),
                "from_chat_id": str(from_chat_id),
                "message_id": str(message_id),
                "disable_notification": "true",
            },
        )
        return self._stored_document(message, expected_size=None)

    async def get_chat_member(self, chat_id: int, user_id: int) -> ChatMemberInfo:
        result = await self._call(
            "getChatMember", data={"chat_id": str(chat_id), "user_id": str(user_id)}
        )
        creator = result.get("status") == "creator"  # holds every right, names none
        return ChatMemberInfo(
            status=str(result.get("status", "")),
            can_post_messages=bool(result.get("can_post_messages", creator)),
            can_delete_messages=bool(result.get("can_delete_messages", creator)),
            can_edit_messages=bool(result.get("can_edit_messages", creator)),
        )

    async def chat_member_rights(self, chat_id: int, user_id: int) -> dict[str, bool | str]:
        """A member's status and every `can_...` right getChatMember reports,
        as Telegram gives them (what `teleuploader check --deep` shows)."""
        result = await self._call(
            "getChatMember", data={"chat_id": str(chat_id), "user_id": str(user_id)}
        )
        rights: dict[str, bool | str] = {"status": str(result.get("status", ""))}
        for name, value in sorted(result.items()):
            if name.startswith("can_") and isinstance(value, bool):
                rights[name] = value
        return rights

    async def pin_chat_message(self, chat_id: int, message_id: int) -> None:
        await self._call(
            "pinChatMessage",
            data={
                "chat_id": str(chat_id),
                "message_id": str(message_id),
                "disable_notification": "true",
            },
        )

    async def unpin_chat_message(self, chat_id: int, message_id: int) -> None:
        await self._call(
            "unpinChatMessage", data={"chat_id": str(chat_id), "message_id": str(message_id)}
        )

    async def pinned_document(self, chat_id: int) -> StoredDocument | None:
        """The chat's most recent pinned message (getChat's `pinned_message`),
        if it is a document; its file_id is this bot's."""
        pinned = await self.pinned_message(chat_id)
        return pinned.document if pinned is not None else None

    async def pinned_message(self, chat_id: int) -> PinnedDocument | None:
        """`pinned_document` with the message's caption as it stands now."""
        result = await self._call("getChat", data={"chat_id": str(chat_id)})
        pinned = result.get("pinned_message") if isinstance(result, dict) else None
        if not isinstance(pinned, dict) or not isinstance(pinned.get("document"), dict):
            return None
        caption = pinned.get("caption")
        return PinnedDocument(
            self._stored_document(pinned, expected_size=None),
            caption if isinstance(caption, str) else None,
        )

    async def edit_message_caption(self, chat_id: int, message_id: int, caption: str) -> None:
        """Replace a message's caption. Unlike a pin, an edit posts no service
        message into the chat."""
        if len(caption) > CAPTION_LIMIT:
            raise ValueError(f"a caption holds at most {CAPTION_LIMIT} characters")
        try:
            await self._call(
                "editMessageCaption",
                data={"chat_id": str(chat_id), "message_id": str(message_id), "caption": caption},
            )
        except PermanentError as exc:
            # The caption is already this one: an edit whose answer was lost
            # and is retried, or one made twice. What was asked for holds
            # (td answers an edit to the same text so: MessagesManager.cpp).
            if "message is not modified" not in exc.description.lower():
                raise

    @asynccontextmanager
    async def open_file(self, file_path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a file's bytes. Each read has its own timeout, so a stalled
        transfer fails as a TransientError instead of hanging. A 404 means the
        file_path expired: call getFile again."""
        async with self.open_file_at(file_path, 0) as (_start, body):
            yield body

    @asynccontextmanager
    async def open_file_at(
        self, file_path: str, offset: int, end: int | None = None
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """Stream a file's bytes from `offset` on (up to `end`, exclusive, when
        given), asked for with a Range header; (where the stream starts, the
        stream). The file server serves static files and honours it (206); a
        server that ignores it sends the whole file (200, start 0), and the
        caller skips what it does not need. A local server's file is read
        from the disk, the Range a seek."""
        if self._local is not None:
            async with self._local.open_at(self.token, file_path, offset, end) as opened:
                yield opened
            return
        url = f"{self._api_base}/file/bot{self.token.value}/{file_path}"
        headers = None
        if end is not None:
            # A last byte past the file's end is cut to it by the server (RFC 9110).
            headers = {"Range": f"bytes={offset}-{max(offset, end - 1)}"}
        elif offset > 0:
            headers = {"Range": f"bytes={offset}-"}
        request = self._http.build_request(
            "GET",
            url,
            headers=headers,
            timeout=httpx.Timeout(self._connect_timeout, read=STREAM_READ_TIMEOUT),
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        try:
            start = _served_from(response, offset)
            if start is None:
                try:
                    body = await response.aread()
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                raise self._error_from_response(response.status_code, body)
            # Only reading the body is guarded: errors of the caller's own code
            # inside the `async with` are not this bot's.
            yield start, self._iter_bytes(response)
        finally:
            await response.aclose()

    async def _iter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for piece in response.aiter_bytes():
                yield piece
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None

    # --- plumbing ---------------------------------------------------------------

    def time_budget(self, body_size: int) -> float:
        """Seconds a call moving `body_size` bytes (an upload's body, or the
        file a getFile makes the server download) may take in all: a
        connection, the bytes at the floor bandwidth, then Telegram's work."""
        return (
            self._connect_timeout + body_size / self._floor_bandwidth + self._processing_allowance
        )

    async def _call(
        self,
        method: str,
        *,
        data: dict[str, Any] | None = None,
        files: dict[str, Any] | None = None,
        body_size: int = 0,
    ) -> Any:
        url = f"{self._api_base}/bot{self.token.value}/{method}"
        budget = self.time_budget(body_size)
        connect = self._connect_timeout
        timeout = httpx.Timeout(connect, read=budget, write=budget, pool=connect)
        try:
            # A real deadline on the whole call: on expiry the request task is
            # cancelled and httpx closes the connection. Closing our end does not
            # stop Telegram from finishing a request it already has, so the
            # error says so (CallAbandoned) and the dispatcher keeps the token
            # out of use for a while.
            REQUEST_SENT.set(None)
            async with asyncio.timeout(budget):
                response = await self._http.post(
                    url,
                    data=data,
                    files=files,
                    timeout=timeout,
                    extensions={"trace": _trace_sending},
                )
        except (TimeoutError, httpx.TimeoutException) as exc:
            if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
                # Nothing reached Telegram: an ordinary transient failure.
                raise self._transport_error(exc, method) from None
            raise CallAbandoned(
                f"{method} timed out after {budget:.1f}s", bot_id=self.bot_id
            ) from None
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, method) from None
        if response.status_code == 200:
            payload = self._json(response.content)
            if isinstance(payload, dict) and payload.get("ok") is True:
                return payload.get("result")
        raise self._error_from_response(
            response.status_code, response.content, method, _chat_of(data)
        )

    def _stored_document(self, message: Any, *, expected_size: int | None) -> StoredDocument:
        document = message.get("document") if isinstance(message, dict) else None
        if not isinstance(document, dict) or "file_id" not in document:
            raise PermanentError(
                "Telegram's reply holds no document", status=200, bot_id=self.bot_id
            )
        reported = document.get("file_size")
        size = int(reported) if reported is not None else (expected_size or 0)
        # file_size is optional in the Bot API; when present it must match.
        if expected_size is not None and reported is not None and size != expected_size:
            # A retry that re-read a consumed stream once stored a truncated chunk.
            raise TransientError(
                f"Telegram stored {size} bytes of a {expected_size}-byte document",
                bot_id=self.bot_id,
            )
        chat = message.get("chat") or {}
        return StoredDocument(
            bot_id=self.bot_id,
            file_id=str(document["file_id"]),
            file_unique_id=str(document.get("file_unique_id", "")),
            chat_id=int(chat.get("id", 0)),
            message_id=int(message["message_id"]),
            size=size,
        )

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None

    def _error_from_response(
        self, status: int, body: bytes, method: str = "", chat_id: int | None = None
    ) -> TelegramError:
        payload = self._json(body)
        if not isinstance(payload, dict):
            payload = {}
        raw_code = payload.get("error_code")
        description = self._scrub(str(payload.get("description") or f"HTTP {status}"))
        if method:
            description = f"{method}: {description}"
        parameters = payload.get("parameters")
        retry_after = parameters.get("retry_after") if isinstance(parameters, dict) else None
        return error_from_reply(
            status,
            code=raw_code if isinstance(raw_code, int) else status,
            description=description,
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
            chat_id=chat_id,
            bot_id=self.bot_id,
        )

    def _transport_error(self, exc: httpx.HTTPError, method: str = "") -> TransientError:
        text = self._scrub(str(exc)) or type(exc).__name__
        prefix = f"{method}: " if method else ""
        return TransientError(f"{prefix}{type(exc).__name__}: {text}", bot_id=self.bot_id)

    def _scrub(self, text: str) -> str:
        return text.replace(self.token.value, self.token.masked).replace(self.token.secret, "***")


def _chat_of(data: dict[str, Any] | None) -> int | None:
    """The chat a call goes into, if it names one (its refusals are that chat's)."""
    chat = (data or {}).get("chat_id")
    try:
        return int(chat) if chat is not None else None
    except ValueError:
        return None
