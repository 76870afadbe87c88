"""A Telegram Bot API simulator: a real HTTP server for tests, benchmarks and demos.

Everything that talks to Telegram is tested against this server instead, so
it is only useful if it is as strict as Telegram on the points the storage
layer depends on (see the reference notes on the Bot API):

- a file_id works only for the bot that received it; forwardMessage gives
  another bot a file_id of its own for the same file;
- uploads over 50 MB get 413, getFile over 20 MB gets "file is too big";
- two calls at once on one token (any method) get 429 with a long
  retry_after, and so does a bot sending more than its per-minute budget into
  one chat;
- a call whose body arrived whole is carried out even if its client gives up
  while waiting for the answer, and counts as in flight until it is done (an
  upload abandoned by a timeout still posts its message); a client that drops
  the connection before its body is complete stores nothing;
- revoked tokens get 401 and bots kicked from the chat get 403;
- file paths expire, and bots can delete messages for 48 hours only.

On top of that it can misbehave on purpose: added latency, limited bandwidth,
random 5xx, random 429 and connections that drop halfway through a response.
Random faults strike sendDocument, getFile, deleteMessage, forwardMessage and
downloads (never getMe/getChatMember); `fault_download_drop_rate` drops file
downloads only. A 429 or 5xx replaces the work; a drop comes after it, so a
dropped sendDocument leaves a message the client never heard of, as a lost
response from Telegram would. Tests can also hold every call of a method at
the moment Telegram would do the work (`hold`/`release`), to act while such a
call is in flight.

The module has three layers: `SimulatorConfig` (the knobs), `TelegramSimulator`
(state and Telegram's rules, synchronous so that every check-and-update is
atomic on the event loop) and the Starlette app built by `create_simulator_app`
(HTTP parsing, pacing, faults, in-flight accounting).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import math
import mimetypes
import os
import posixpath
import random
import re
import secrets
import socket
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import structlog
import uvicorn
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import parse_options_header
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.config import BotToken

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

log = structlog.get_logger()

MB = 1000 * 1000
MiB = 1024 * 1024
CAPTION_LIMIT = 1024
SEND_WINDOW = 60.0  # seconds: the per-chat flood limit counts sends over one minute
DOWNLOAD_PIECE = 64 * 1024
MIN_PACED_PIECE = 1024

# The knobs that may change while the simulator runs (everything but the
# tokens and chats, which the state is built from).
MUTABLE_KNOBS = frozenset(
    {
        "max_concurrent_calls_per_bot",
        "collision_retry_after",
        "sends_per_minute",
        "latency",
        "upload_bandwidth",
        "download_bandwidth",
        "fault_5xx_rate",
        "fault_drop_rate",
        "fault_download_drop_rate",
        "fault_429_rate",
        "random_429_retry_after",
        "seed",
        "max_upload_bytes",
        "max_getfile_bytes",
        "file_path_ttl",
        "delete_window",
    }
)

# Telegram's own gateway error page; the client must cope with a non-JSON 5xx.
_BAD_GATEWAY_HTML = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
_WELL_FORMED_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")


# --- configuration ------------------------------------------------------------------


@dataclass
class SimulatorConfig:
    """Everything the simulator can be told. Rates are probabilities per call."""

    tokens: list[str]
    chat_ids: list[int]
    # None means no limit. Telegram answers concurrent calls on one token with 429.
    max_concurrent_calls_per_bot: int | None = 1
    collision_retry_after: int = 30
    # Per bot per chat, over a sliding minute (Telegram: about 20 into one channel).
    sends_per_minute: int | None = None
    latency: float = 0.0
    upload_bandwidth: float | None = None  # bytes/s per connection
    download_bandwidth: float | None = None  # bytes/s per connection
    fault_5xx_rate: float = 0.0
    fault_drop_rate: float = 0.0
    # File downloads only: they drop halfway, Bot API methods are left alone.
    fault_download_drop_rate: float = 0.0
    fault_429_rate: float = 0.0
    random_429_retry_after: int = 1
    seed: int | None = None
    max_upload_bytes: int = 50 * MiB
    # It is unknown whether Telegram's "20 MB" is 10**6- or 2**20-based; the
    # smaller reading is the stricter test of the 19 MiB chunk size.
    max_getfile_bytes: int = 20 * MB
    # Telegram keeps a file_path valid for "at least one hour". None: forever.
    file_path_ttl: float | None = 3600.0
    # Bots may delete messages younger than 48 hours only.
    delete_window: float = 48 * 3600.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not self.tokens:
            raise ValueError("the simulator needs at least one bot token")
        if not self.chat_ids:
            raise ValueError("the simulator needs at least one chat id")
        for name in (
            "fault_5xx_rate",
            "fault_drop_rate",
            "fault_download_drop_rate",
            "fault_429_rate",
        ):
            rate = getattr(self, name)
            if not _is_number(rate) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be a number between 0 and 1")
        _check_number(self, "latency", minimum=0.0)
        _check_number(self, "delete_window", minimum=0.0)
        for name in ("upload_bandwidth", "download_bandwidth", "file_path_ttl"):
            _check_number(self, name, minimum=0.0, exclusive=True, optional=True)
        for name in ("max_concurrent_calls_per_bot", "sends_per_minute"):
            _check_int(self, name, minimum=1, optional=True)
        for name in ("collision_retry_after", "random_429_retry_after"):
            _check_int(self, name, minimum=1)
        for name in ("max_upload_bytes", "max_getfile_bytes"):
            _check_int(self, name, minimum=1)
        _check_int(self, "seed", minimum=None, optional=True)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_number(
    config: SimulatorConfig,
    name: str,
    *,
    minimum: float,
    exclusive: bool = False,
    optional: bool = False,
) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    too_small = _is_number(value) and (value <= minimum if exclusive else value < minimum)
    if not _is_number(value) or too_small:
        relation = ">" if exclusive else ">="
        raise ValueError(f"{name} must be a number {relation} {minimum}")


def _check_int(
    config: SimulatorConfig, name: str, *, minimum: int | None, optional: bool = False
) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")


def make_tokens(n: int, first_id: int = 100001) -> list[str]:
    """Deterministic, valid-looking tokens `<id>:<35 chars of [A-Za-z0-9_-]>`."""
    tokens = []
    for bot_id in range(first_id, first_id + n):
        digest = hashlib.sha256(f"teleuploader-simulator-{bot_id}".encode()).digest()
        secret = base64.urlsafe_b64encode(digest).decode("ascii")[:35]
        tokens.append(f"{bot_id}:{secret}")
    return tokens


# --- errors and statistics ---------------------------------------------------------


class ApiError(Exception):
    """A Bot API error response: `{"ok": false, "error_code": ..., "description": ...}`."""

    def __init__(self, status: int, description: str, *, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after

    @classmethod
    def too_many_requests(cls, retry_after: int) -> ApiError:
        return cls(429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after)

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return body


class SimulatedDrop(Exception):
    """Raised mid-response so that the server closes the connection (a fault)."""


@dataclass
class BotStats:
    """What one bot's token has been asked and answered since the last reset."""

    calls: dict[str, int] = field(default_factory=dict)  # by Bot API method
    bytes_received: int = 0  # request bodies of method calls, as read off the wire
    bytes_sent: int = 0  # file bytes served by downloads
    max_concurrent_calls: int = 0  # Bot API method calls in flight at once, any method
    max_concurrent_uploads: int = 0  # sendDocument calls in flight at once
    rate_limited: int = 0  # 429s given, for any reason
    faults_injected: int = 0  # random 5xx, 429 and drops
    errors: dict[int, int] = field(default_factory=dict)  # error responses by status
    downloads: int = 0
    max_concurrent_downloads: int = 0
    # Gauges, as of the snapshot: what is running right now.
    calls_in_flight: int = 0
    downloads_in_flight: int = 0


# --- state --------------------------------------------------------------------------


@dataclass
class _Bot:
    bot_id: int
    token: str
    revoked: bool = False
    calls_in_flight: int = 0
    uploads_in_flight: int = 0
    downloads_in_flight: int = 0
    stats: BotStats = field(default_factory=BotStats)

    def info(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": f"Simulated bot {self.bot_id}",
            "username": f"sim{self.bot_id}_bot",
        }


@dataclass(frozen=True)
class _StoredFile:
    unique_id: str
    data: bytes
    file_name: str
    mime_type: str


@dataclass
class _Message:
    chat_id: int
    message_id: int
    date: int
    posted_at: float  # on the simulator's monotonic clock, for the delete window
    file: _StoredFile
    file_id: str  # the file_id of the bot that posted (or forwarded) it
    caption: str | None
    forwarded_from: _Message | None = None
    deleted: bool = False


@dataclass
class _Chat:
    chat_id: int
    title: str
    last_message_id: int = 0
    messages: dict[int, _Message] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"id": self.chat_id, "title": self.title, "type": "channel"}


@dataclass(frozen=True)
class _FileRef:
    """What a file_id or a file_path resolves to: a file, for one bot only."""

    bot_id: int
    file: _StoredFile
    issued_at: float = 0.0


@dataclass(frozen=True)
class _Upload:
    """One file part of a multipart request."""

    filename: str
    content_type: str
    data: bytes


@dataclass
class _Params:
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, _Upload] = field(default_factory=dict)


@dataclass
class _Call:
    """One Bot API method call while it is in flight."""

    bot_id: int
    method: str
    collided: bool = False  # arrived while the token had its limit of calls in flight


# --- the simulator ------------------------------------------------------------------


class TelegramSimulator:
    """State and rules of the simulated Telegram, plus hooks for tests."""

    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._bots: dict[int, _Bot] = {}
        self._bot_by_token: dict[str, int] = {}
        for text in config.tokens:
            token = BotToken.parse(text)
            if token.bot_id in self._bots:
                raise ValueError(f"two tokens are given for bot {token.bot_id}")
            self._bots[token.bot_id] = _Bot(token.bot_id, token.value)
            self._bot_by_token[token.value] = token.bot_id
        self._chats = {
            chat_id: _Chat(chat_id, f"TeleUploader storage {chat_id}")
            for chat_id in config.chat_ids
        }
        self._kicked: set[tuple[int, int]] = set()  # (bot_id, chat_id)
        self._file_ids: dict[str, _FileRef] = {}
        self._file_paths: dict[str, _FileRef] = {}
        self._current_path: dict[tuple[int, str], str] = {}  # (bot_id, unique_id) -> path
        self._path_counter = 0
        self._sends: dict[tuple[int, int], deque[float]] = {}  # (bot_id, chat_id) -> times
        self._clock_offset = 0.0
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._call_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._holds: dict[str, asyncio.Event] = {}  # method -> released when set
        self._held: dict[str, int] = {}  # method -> calls waiting at its hold now
        self._held_waiters: list[tuple[str, int, asyncio.Future[None]]] = []

    # --- hooks for tests and benchmarks ----------------------------------------------

    @property
    def tokens(self) -> list[str]:
        return [bot.token for bot in self._bots.values()]

    @property
    def bot_ids(self) -> list[int]:
        return list(self._bots)

    @property
    def chat_ids(self) -> list[int]:
        return list(self._chats)

    def configure(self, **changes: Any) -> None:
        """Change knobs while running; the new config is validated as a whole."""
        unknown = set(changes) - MUTABLE_KNOBS
        if unknown:
            raise ValueError(f"not a changeable setting: {', '.join(sorted(unknown))}")
        updated = dataclasses.replace(self.config, **changes)  # runs validate()
        for name in changes:
            setattr(self.config, name, getattr(updated, name))
        if "seed" in changes:
            self._rng.seed(self.config.seed)

    def set_faults(
        self,
        *,
        fault_5xx_rate: float | None = None,
        fault_drop_rate: float | None = None,
        fault_429_rate: float | None = None,
        fault_download_drop_rate: float | None = None,
        seed: int | None = None,
    ) -> None:
        """Set the random fault rates; arguments left out keep their value."""
        changes = {
            "fault_5xx_rate": fault_5xx_rate,
            "fault_drop_rate": fault_drop_rate,
            "fault_download_drop_rate": fault_download_drop_rate,
            "fault_429_rate": fault_429_rate,
            "seed": seed,
        }
        self.configure(**{name: value for name, value in changes.items() if value is not None})

    def revoke(self, bot_id: int) -> None:
        """The token is revoked: every call with it gets 401 from now on."""
        self._bot(bot_id).revoked = True

    def kick(self, bot_id: int, chat_id: int) -> None:
        """The bot is banned from the chat: its calls there get 403."""
        self._bot(bot_id)
        self._chat(chat_id)
        self._kicked.add((bot_id, chat_id))

    def unkick(self, bot_id: int, chat_id: int) -> None:
        """The bot is made an administrator of the chat again."""
        self._kicked.discard((bot_id, chat_id))

    def hold(self, method: str) -> None:
        """Calls of `method` from now on wait, their body read and every check
        passed, just before Telegram would do the work, until `release(method)`."""
        self._holds.setdefault(_canonical_method(method), asyncio.Event())

    def release(self, method: str) -> None:
        """Let the held calls of `method` go on, and stop holding new ones."""
        gate = self._holds.pop(_canonical_method(method), None)
        if gate is not None:
            gate.set()

    def held_calls(self, method: str) -> int:
        """How many calls of `method` are waiting at its hold right now."""
        return self._held.get(_canonical_method(method), 0)

    async def wait_held(self, method: str, calls: int = 1) -> None:
        """Wait until at least `calls` calls of `method` wait at its hold.
        Bound it with `asyncio.timeout`."""
        method = _canonical_method(method)
        if self.held_calls(method) >= calls:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._held_waiters.append((method, calls, waiter))
        await waiter

    def advance_clock(self, seconds: float) -> None:
        """Move the simulated time forward (message ages, path expiry, send windows)."""
        self._clock_offset += seconds

    def stats(self) -> dict[int, BotStats]:
        """A snapshot per bot; later calls do not change it."""
        return {bot_id: self._snapshot_of(bot) for bot_id, bot in self._bots.items()}

    @staticmethod
    def _snapshot_of(bot: _Bot) -> BotStats:
        stats = copy.deepcopy(bot.stats)
        stats.calls_in_flight = bot.calls_in_flight
        stats.downloads_in_flight = bot.downloads_in_flight
        return stats

    async def wait_until_idle(self) -> None:
        """Wait until no call or download is in flight, e.g. after a client gave
        up mid-call (the server notices only at its next read). Bound it with
        `asyncio.timeout`."""
        if not self._busy():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        await waiter

    async def wait_for_call(self, bot_id: int) -> None:
        """Wait until a method call on `bot_id` is in flight (now or later), so
        a test can act while Telegram is busy with it. Bound it with
        `asyncio.timeout`."""
        if self._bots[bot_id].calls_in_flight:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._call_waiters.append((bot_id, waiter))
        await waiter

    def reset_stats(self) -> None:
        for bot in self._bots.values():
            bot.stats = BotStats(
                max_concurrent_calls=bot.calls_in_flight,
                max_concurrent_uploads=bot.uploads_in_flight,
                max_concurrent_downloads=bot.downloads_in_flight,
            )

    def message_count(self, chat_id: int) -> int:
        """Messages ever posted in the chat, deleted ones included."""
        return len(self._chat(chat_id).messages)

    def live_messages(self, chat_id: int) -> list[int]:
        """Ids of the chat's messages that have not been deleted."""
        return [m.message_id for m in self._chat(chat_id).messages.values() if not m.deleted]

    def document_bytes(self, chat_id: int, message_id: int) -> bytes:
        return self._message(chat_id, message_id).file.data

    def message_sender(self, chat_id: int, message_id: int) -> int:
        """The id of the bot that posted (or forwarded) the message."""
        return self._file_ids[self._message(chat_id, message_id).file_id].bot_id

    def _message(self, chat_id: int, message_id: int) -> _Message:
        message = self._chat(chat_id).messages.get(message_id)
        if message is None:
            raise KeyError(f"no message {message_id} in chat {chat_id}")
        return message

    def snapshot(self) -> dict[str, Any]:
        """Stats and chat contents as JSON, for the /_sim/stats endpoint."""
        return {
            "bots": {str(bot_id): dataclasses.asdict(s) for bot_id, s in self.stats().items()},
            "chats": {
                str(chat_id): {
                    "messages": self.message_count(chat_id),
                    "live_messages": len(self.live_messages(chat_id)),
                }
                for chat_id in self._chats
            },
        }

    # --- bookkeeping used by the HTTP layer -------------------------------------------

    def _bot_for_token(self, token: str) -> int | None:
        """The bot a token belongs to, revoked or not; None for an unknown token."""
        return self._bot_by_token.get(token)

    def _check_token(self, bot_id: int) -> None:
        if self._bots[bot_id].revoked:
            raise ApiError(401, "Unauthorized")

    @contextlib.contextmanager
    def _calling(self, bot_id: int, method: str) -> Iterator[_Call]:
        """Account for one method call from its first byte to its last."""
        bot = self._bots[bot_id]
        stats = bot.stats
        stats.calls[method] = stats.calls.get(method, 0) + 1
        call = _Call(bot_id, method)
        # Decided when the call arrives, before its body is read: that is when
        # Telegram sees two calls on one token. Any method counts, and so does
        # a call whose client has given up but whose work is still running.
        limit = self.config.max_concurrent_calls_per_bot
        call.collided = limit is not None and bot.calls_in_flight >= limit
        bot.calls_in_flight += 1
        stats.max_concurrent_calls = max(stats.max_concurrent_calls, bot.calls_in_flight)
        self._wake_call_waiters(bot_id)
        uploading = method == "sendDocument"
        if uploading:
            bot.uploads_in_flight += 1
            stats.max_concurrent_uploads = max(stats.max_concurrent_uploads, bot.uploads_in_flight)
        try:
            yield call
        finally:
            bot.calls_in_flight -= 1
            if uploading:
                bot.uploads_in_flight -= 1
            self._wake_if_idle()

    @contextlib.contextmanager
    def _downloading(self, bot_id: int) -> Iterator[None]:
        bot = self._bots[bot_id]
        bot.stats.downloads += 1
        bot.downloads_in_flight += 1
        bot.stats.max_concurrent_downloads = max(
            bot.stats.max_concurrent_downloads, bot.downloads_in_flight
        )
        try:
            yield
        finally:
            bot.downloads_in_flight -= 1
            self._wake_if_idle()

    def _wake_call_waiters(self, bot_id: int) -> None:
        waiting = []
        for waited_bot, waiter in self._call_waiters:
            if waited_bot != bot_id:
                waiting.append((waited_bot, waiter))
            elif not waiter.done():
                waiter.set_result(None)
        self._call_waiters = waiting

    def _busy(self) -> bool:
        return any(bot.calls_in_flight or bot.downloads_in_flight for bot in self._bots.values())

    def _wake_if_idle(self) -> None:
        if self._busy():
            return
        for waiter in self._idle_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._idle_waiters.clear()

    async def _wait_if_held(self, method: str) -> None:
        gate = self._holds.get(method)
        if gate is None:
            return
        self._held[method] = self._held.get(method, 0) + 1
        for waiting in list(self._held_waiters):
            name, calls, waiter = waiting
            if name == method and self._held[method] >= calls:
                self._held_waiters.remove(waiting)
                if not waiter.done():
                    waiter.set_result(None)
        try:
            await gate.wait()
        finally:
            self._held[method] -= 1

    def _count_received(self, bot_id: int, size: int) -> None:
        self._bots[bot_id].stats.bytes_received += size

    def _count_sent(self, bot_id: int, size: int) -> None:
        self._bots[bot_id].stats.bytes_sent += size

    def _count_error(self, bot_id: int, status: int) -> None:
        stats = self._bots[bot_id].stats
        stats.errors[status] = stats.errors.get(status, 0) + 1
        if status == 429:
            stats.rate_limited += 1

    def _inject(self, bot_id: int, rate: float) -> bool:
        """Whether a fault with this probability strikes now (and count it if so)."""
        # Rate 0 draws nothing, so one knob does not shift another's seeded sequence.
        if rate <= 0.0 or self._rng.random() >= rate:
            return False
        self._bots[bot_id].stats.faults_injected += 1
        return True

    def _coin(self) -> bool:
        return self._rng.random() < 0.5

    # --- Telegram's rules -----------------------------------------------------------

    def _get_me(self, bot_id: int, params: _Params) -> dict[str, Any]:
        return self._bots[bot_id].info()

    def _send_document(self, bot_id: int, params: _Params) -> dict[str, Any]:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        caption = params.fields.get("caption") or None
        if caption is not None and len(caption) > CAPTION_LIMIT:
            raise ApiError(400, "Bad Request: message caption is too long")
        upload = params.files.get("document")
        resent_id = params.fields.get("document", "")
        if upload is not None:
            file = _received_file(upload, params)
        else:
            file = self._file_to_resend(bot_id, resent_id)
        self._check_send_budget(bot_id, chat.chat_id)
        file_id = self._issue_file_id(bot_id, file) if upload is not None else resent_id
        return self._message_json(self._post(chat, file, file_id, caption))

    def _file_to_resend(self, bot_id: int, document: str) -> _StoredFile:
        """sendDocument with a file_id instead of a file: no upload, no size limit."""
        if not document:
            raise ApiError(400, "Bad Request: there is no document in the request")
        ref = self._file_ids.get(document)
        if ref is None or ref.bot_id != bot_id:
            # URLs are not fetched by the simulator, so they end up here too.
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        return ref.file

    def _get_file(self, bot_id: int, params: _Params) -> dict[str, Any]:
        file_id = params.fields.get("file_id")
        if not file_id:
            raise ApiError(400, "Bad Request: file_id is empty")
        ref = self._file_ids.get(file_id)
        if ref is None or ref.bot_id != bot_id:
            raise ApiError(400, "Bad Request: wrong file_id or the file is temporarily unavailable")
        if len(ref.file.data) > self.config.max_getfile_bytes:
            raise ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": file_id,
            "file_unique_id": ref.file.unique_id,
            "file_size": len(ref.file.data),
            "file_path": self._file_path_for(bot_id, ref.file),
        }

    def _delete_message(self, bot_id: int, params: _Params) -> bool:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        message_id = _message_id_param(params, "message_id")
        message = chat.messages.get(message_id)
        if message is None or message.deleted:
            raise ApiError(400, "Bad Request: message to delete not found")
        if self._now() - message.posted_at > self.config.delete_window:
            raise ApiError(400, "Bad Request: message can't be deleted")
        # The file stays: file_ids issued for it keep working, as in Telegram.
        message.deleted = True
        return True

    def _forward_message(self, bot_id: int, params: _Params) -> dict[str, Any]:
        target = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        source_chat = self._member_chat(bot_id, _chat_id_param(params, "from_chat_id"))
        source = source_chat.messages.get(_message_id_param(params, "message_id"))
        if source is None or source.deleted:
            raise ApiError(400, "Bad Request: message to forward not found")
        self._check_send_budget(bot_id, target.chat_id)
        file_id = self._issue_file_id(bot_id, source.file)
        message = self._post(target, source.file, file_id, source.caption)
        message.forwarded_from = source.forwarded_from or source
        return self._message_json(message)

    def _get_chat_member(self, bot_id: int, params: _Params) -> dict[str, Any]:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        user_id = _int_param(params, "user_id", "Bad Request: invalid user_id specified")
        bot = self._bots.get(user_id)
        if bot is None:
            user = {"id": user_id, "is_bot": False, "first_name": f"User {user_id}"}
            return {"status": "left", "user": user}
        if (user_id, chat.chat_id) in self._kicked:
            return {"status": "kicked", "user": bot.info(), "until_date": 0}
        return {"status": "administrator", "user": bot.info(), **_ADMIN_RIGHTS}

    def _file_for_download(self, bot_id: int, file_path: str) -> bytes:
        ref = self._file_paths.get(file_path)
        if ref is None or ref.bot_id != bot_id or self._expired(ref):
            raise ApiError(404, "Not Found")
        return ref.file.data

    # --- helpers of the rules -----------------------------------------------------

    def _now(self) -> float:
        return time.monotonic() + self._clock_offset

    def _bot(self, bot_id: int) -> _Bot:
        bot = self._bots.get(bot_id)
        if bot is None:
            raise KeyError(f"unknown bot {bot_id}")
        return bot

    def _chat(self, chat_id: int) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            raise KeyError(f"unknown chat {chat_id}")
        return chat

    def _member_chat(self, bot_id: int, chat_id: int) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            raise ApiError(400, "Bad Request: chat not found")
        if (bot_id, chat_id) in self._kicked:
            raise ApiError(403, "Forbidden: bot was kicked from the channel chat")
        return chat

    def _check_send_budget(self, bot_id: int, chat_id: int) -> None:
        budget = self.config.sends_per_minute
        if budget is None:
            return
        now = self._now()
        sends = self._sends.setdefault((bot_id, chat_id), deque())
        while sends and sends[0] <= now - SEND_WINDOW:
            sends.popleft()
        if len(sends) >= budget:
            raise ApiError.too_many_requests(max(1, math.ceil(sends[0] + SEND_WINDOW - now)))
        sends.append(now)

    def _issue_file_id(self, bot_id: int, file: _StoredFile) -> str:
        # Opaque, like Telegram's: nothing in it says which bot or file it is.
        file_id = "BQACAgIAAx" + secrets.token_urlsafe(48)
        self._file_ids[file_id] = _FileRef(bot_id, file)
        return file_id

    def _file_path_for(self, bot_id: int, file: _StoredFile) -> str:
        """The bot's download path for a file: reused until it expires."""
        key = (bot_id, file.unique_id)
        path = self._current_path.get(key)
        if path is not None and not self._expired(self._file_paths[path]):
            return path
        self._path_counter += 1
        suffix = posixpath.splitext(file.file_name)[1].lower()
        path = f"documents/file_{self._path_counter}{suffix or '.bin'}"
        self._file_paths[path] = _FileRef(bot_id, file, issued_at=self._now())
        self._current_path[key] = path
        return path

    def _expired(self, ref: _FileRef) -> bool:
        ttl = self.config.file_path_ttl
        return ttl is not None and self._now() - ref.issued_at > ttl

    def _post(
        self,
        chat: _Chat,
        file: _StoredFile,
        file_id: str,
        caption: str | None,
    ) -> _Message:
        chat.last_message_id += 1
        message = _Message(
            chat_id=chat.chat_id,
            message_id=chat.last_message_id,
            date=int(time.time() + self._clock_offset),
            posted_at=self._now(),
            file=file,
            file_id=file_id,
            caption=caption,
        )
        chat.messages[message.message_id] = message
        return message

    def _message_json(self, message: _Message) -> dict[str, Any]:
        chat = self._chats[message.chat_id].as_json()
        result: dict[str, Any] = {
            "message_id": message.message_id,
            "sender_chat": chat,
            "chat": chat,
            "date": message.date,
            "document": {
                "file_name": message.file.file_name,
                "mime_type": message.file.mime_type,
                "file_id": message.file_id,
                "file_unique_id": message.file.unique_id,
                "file_size": len(message.file.data),
            },
        }
        origin = message.forwarded_from
        if origin is not None:
            origin_chat = self._chats[origin.chat_id].as_json()
            result["forward_origin"] = {
                "type": "channel",
                "chat": origin_chat,
                "message_id": origin.message_id,
                "date": origin.date,
            }
            result["forward_from_chat"] = origin_chat
            result["forward_from_message_id"] = origin.message_id
            result["forward_date"] = origin.date
        if message.caption is not None:
            result["caption"] = message.caption
        return result


_ADMIN_RIGHTS: dict[str, Any] = {
    "can_be_edited": False,
    "is_anonymous": False,
    "can_manage_chat": True,
    "can_change_info": False,
    "can_post_messages": True,
    "can_edit_messages": True,
    "can_delete_messages": True,
    "can_invite_users": True,
    "can_restrict_members": True,
    "can_promote_members": False,
    "can_manage_video_chats": False,
    "can_post_stories": False,
    "can_edit_stories": False,
    "can_delete_stories": False,
}


def _received_file(upload: _Upload, params: _Params) -> _StoredFile:
    if not upload.data:
        raise ApiError(400, "Bad Request: file must be non-empty")
    name = posixpath.basename(upload.filename.replace("\\", "/")) or "document"
    mime = upload.content_type
    if not _flag(params, "disable_content_type_detection"):
        mime = mimetypes.guess_type(name)[0] or mime
    return _StoredFile(
        unique_id="AgAD" + secrets.token_urlsafe(12),
        data=upload.data,
        file_name=name,
        mime_type=mime or "application/octet-stream",
    )


def _flag(params: _Params, name: str) -> bool:
    return params.fields.get(name, "").strip().lower() in ("true", "1")


def _int_param(params: _Params, name: str, invalid: str) -> int:
    try:
        return int(params.fields.get(name, "").strip())
    except ValueError:
        raise ApiError(400, invalid) from None


def _chat_id_param(params: _Params, name: str) -> int:
    text = params.fields.get(name, "").strip()
    if not text:
        raise ApiError(400, f"Bad Request: {name} is empty")
    # "@channelname" and other non-numeric ids name no chat the simulator has.
    return _int_param(params, name, "Bad Request: chat not found")


def _message_id_param(params: _Params, name: str) -> int:
    return _int_param(params, name, "Bad Request: message identifier is not specified")


# --- the Bot API method table ------------------------------------------------------


@dataclass(frozen=True)
class _Method:
    name: str
    handler: Callable[[TelegramSimulator, int, _Params], Any]
    # Random faults strike here; getMe and getChatMember stay clean so that
    # startup checks are deterministic.
    faultable: bool
    upload: bool = False


_METHODS = {
    method.name.lower(): method
    for method in (
        _Method("getMe", TelegramSimulator._get_me, faultable=False),
        _Method("sendDocument", TelegramSimulator._send_document, faultable=True, upload=True),
        _Method("getFile", TelegramSimulator._get_file, faultable=True),
        _Method("deleteMessage", TelegramSimulator._delete_message, faultable=True),
        _Method("forwardMessage", TelegramSimulator._forward_message, faultable=True),
        _Method("getChatMember", TelegramSimulator._get_chat_member, faultable=False),
    )
}


def _canonical_method(name: str) -> str:
    # Bot API method names are case-insensitive.
    method = _METHODS.get(name.lower())
    return method.name if method else name


# --- request bodies -----------------------------------------------------------------


class _MultipartCollector:
    """Feeds body pieces to python-multipart's streaming parser, keeps parts in memory."""

    def __init__(self, boundary: bytes) -> None:
        self._parts: list[tuple[dict[str, str], bytearray]] = []
        self._header_name = bytearray()
        self._header_value = bytearray()
        callbacks: MultipartCallbacks = {
            "on_part_begin": self._on_part_begin,
            "on_part_data": self._on_part_data,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
        }
        # A bad body is only reported once it has been read to its end.
        self._parser: MultipartParser | None = None
        with contextlib.suppress(FormParserError, ValueError):
            self._parser = MultipartParser(boundary, callbacks) if boundary else None

    def feed(self, piece: bytes) -> None:
        if self._parser is None:
            return
        try:
            self._parser.write(piece)
        except (MultipartParseError, FormParserError):
            self._parser = None

    def finish(self) -> _Params:
        if self._parser is not None:
            try:
                self._parser.finalize()
            except (MultipartParseError, FormParserError):
                self._parser = None
        if self._parser is None:
            raise ApiError(400, "Bad Request: can't parse multipart/form-data request")
        params = _Params()
        for headers, data in self._parts:
            _, options = parse_options_header(headers.get("content-disposition"))
            name = options.get(b"name", b"").decode("utf-8", "replace")
            if b"filename" in options:
                params.files[name] = _Upload(
                    filename=options[b"filename"].decode("utf-8", "replace"),
                    content_type=headers.get("content-type", "").strip(),
                    data=bytes(data),
                )
            else:
                params.fields[name] = data.decode("utf-8", "replace")
        return params

    def _on_part_begin(self) -> None:
        self._parts.append(({}, bytearray()))

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._parts[-1][1].extend(memoryview(data)[start:end])

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name.extend(memoryview(data)[start:end])

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value.extend(memoryview(data)[start:end])

    def _on_header_end(self) -> None:
        name = self._header_name.decode("latin-1").strip().lower()
        self._parts[-1][0][name] = self._header_value.decode("latin-1")
        self._header_name.clear()
        self._header_value.clear()


class _BufferCollector:
    """Keeps a small non-multipart body (form-urlencoded or JSON) whole."""

    def __init__(self, content_type: str) -> None:
        self._content_type = content_type
        self._body = bytearray()

    def feed(self, piece: bytes) -> None:
        self._body.extend(piece)

    def finish(self) -> _Params:
        if not self._body.strip():
            return _Params()
        text = self._body.decode("utf-8", "replace")
        if self._content_type == "application/json":
            return _Params(fields=_json_fields(text))
        return _Params(fields=dict(parse_qsl(text, keep_blank_values=True)))


def _json_fields(text: str) -> dict[str, str]:
    try:
        payload = json.loads(text)
    except ValueError:
        raise ApiError(400, "Bad Request: can't parse JSON object") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "Bad Request: can't parse JSON object")
    return {str(key): _param_text(value) for key, value in payload.items() if value is not None}


def _param_text(value: Any) -> str:
    # Parameters arrive as text in the other encodings; JSON ones are made alike.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


@dataclass
class _Body:
    """A request body read to its end; parsed only when the call gets that far."""

    collector: _MultipartCollector | _BufferCollector
    query: dict[str, str]
    too_large: bool

    def params(self) -> _Params:
        params = self.collector.finish()
        for name, value in self.query.items():
            params.fields.setdefault(name, value)
        return params


async def _read_body(
    request: Request,
    *,
    max_bytes: int,
    bandwidth: float | None,
    on_bytes: Callable[[int], None],
) -> _Body:
    """Read the body at no more than `bandwidth` bytes/s, parsing as it comes.

    A body over `max_bytes` is still read to its end (and thrown away) so that
    the client gets the 413 instead of a broken pipe.
    """
    content_type, options = parse_options_header(request.headers.get("content-type"))
    collector: _MultipartCollector | _BufferCollector
    if content_type == b"multipart/form-data":
        collector = _MultipartCollector(options.get(b"boundary", b""))
    else:
        collector = _BufferCollector(content_type.decode("latin-1"))
    started = time.monotonic()
    size = 0
    async for piece in request.stream():
        size += len(piece)
        on_bytes(len(piece))
        if size <= max_bytes:
            collector.feed(piece)
        if bandwidth is not None:
            await _pace(started, size, bandwidth)
    if bandwidth is not None and await request.is_disconnected():
        # The bytes came in faster than the simulated link carries them; a
        # client that left before the link "delivered" them sent no whole body.
        raise ClientDisconnect()
    return _Body(collector, dict(request.query_params), too_large=size > max_bytes)


async def _pace(started: float, done: int, bandwidth: float) -> None:
    """Sleep until `done` bytes would have taken their time at `bandwidth`."""
    ahead = done / bandwidth - (time.monotonic() - started)
    if ahead > 0:
        await asyncio.sleep(ahead)


# --- responses ------------------------------------------------------------------------


def _ok(result: Any) -> JSONResponse:
    return JSONResponse({"ok": True, "result": result})


def _error(err: ApiError) -> JSONResponse:
    return JSONResponse(err.payload(), status_code=err.status)


def _server_error(*, json_body: bool) -> Response:
    # Telegram's API answers 500 in JSON; its front end's 502 is an HTML page.
    if json_body:
        return _error(ApiError(500, "Internal Server Error"))
    return Response(_BAD_GATEWAY_HTML, status_code=502, media_type="text/html")


class _TruncatedResponse(Response):
    """Announces the whole body, sends half of it, then drops the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        half = self.body[: len(self.body) // 2]
        await send({"type": "http.response.body", "body": half, "more_body": True})
        raise SimulatedDrop("simulated connection drop")


def _truncated(response: Response) -> Response:
    return _TruncatedResponse(
        response.body, status_code=response.status_code, media_type="application/json"
    )


async def _send_file(
    request: Request,
    send: Send,
    data: bytes,
    *,
    bandwidth: float | None,
    drop_at: int | None,
    on_sent: Callable[[int], None],
) -> None:
    """Stream a file in pieces, paced at `bandwidth`; stop and fail at `drop_at`."""
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(len(data)).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    piece_size = DOWNLOAD_PIECE
    if bandwidth is not None:
        # Small enough pieces that pacing is smooth (about 20 per second).
        piece_size = max(MIN_PACED_PIECE, min(DOWNLOAD_PIECE, int(bandwidth / 20)))
    end = len(data) if drop_at is None else drop_at
    view = memoryview(data)
    started = time.monotonic()
    sent = 0
    while sent < end:
        piece = bytes(view[sent : min(sent + piece_size, end)])
        if bandwidth is not None:
            # A piece leaves when its last byte would have crossed the link.
            await _pace(started, sent + len(piece), bandwidth)
        if await request.is_disconnected():
            return  # nobody is reading: stop pacing bytes into the void
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        sent += len(piece)
        on_sent(len(piece))
    if drop_at is not None:
        raise SimulatedDrop("simulated connection drop")
    await send({"type": "http.response.body", "body": b"", "more_body": False})


# --- HTTP endpoints -------------------------------------------------------------------


class _BotApiEndpoint:
    """`/bot{token}/{method}`. A raw ASGI app, so that a call counts as in flight
    until the last byte of its response is sent, not just until a handler returns."""

    def __init__(self, sim: TelegramSimulator) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        token = str(request.path_params["token"])
        method = _canonical_method(str(request.path_params["method"]))
        bot_id = self.sim._bot_for_token(token)
        try:
            if bot_id is None:
                response = await self._refuse(request, token)
                await response(scope, receive, send)
                return
            with self.sim._calling(bot_id, method) as call:
                response = await self._respond(call, request)
                await response(scope, receive, send)
        except ClientDisconnect:
            pass  # the client gave up while sending; nothing was stored

    async def _refuse(self, request: Request, token: str) -> Response:
        await _read_body(request, max_bytes=0, bandwidth=None, on_bytes=lambda _: None)
        if _WELL_FORMED_TOKEN.match(token):
            return _error(ApiError(401, "Unauthorized"))
        return _error(ApiError(404, "Not Found"))

    async def _respond(self, call: _Call, request: Request) -> Response:
        try:
            return await self._handle(call, request)
        except ApiError as err:
            self.sim._count_error(call.bot_id, err.status)
            return _error(err)

    async def _handle(self, call: _Call, request: Request) -> Response:
        config = self.sim.config
        method = _METHODS.get(call.method.lower())
        # The whole body is read before any answer, as Telegram's front end does.
        body = await _read_body(
            request,
            max_bytes=config.max_upload_bytes,
            bandwidth=config.upload_bandwidth if method and method.upload else None,
            on_bytes=lambda size: self.sim._count_received(call.bot_id, size),
        )
        if config.latency:
            # Telegram's work on a whole request: it goes on if the client
            # leaves meanwhile, and the call stays in flight until it is done.
            await asyncio.sleep(config.latency)
        self.sim._check_token(call.bot_id)
        if method is None:
            raise ApiError(404, "Not Found")
        if body.too_large:
            raise ApiError(413, "Request Entity Too Large")
        if call.collided:
            log.warning("sim_concurrent_upload_refused", bot_id=call.bot_id)
            raise ApiError.too_many_requests(config.collision_retry_after)
        if method.faultable:
            early = _fault_before_work(self.sim, call.bot_id)
            if early is not None:
                return early
        await self.sim._wait_if_held(call.method)
        response = _ok(method.handler(self.sim, call.bot_id, body.params()))
        # A drop after the work is done: the message exists, the client never
        # learns it (the orphan case the storage layer must survive).
        if method.faultable and self.sim._inject(call.bot_id, config.fault_drop_rate):
            return _truncated(response)
        return response


def _fault_before_work(sim: TelegramSimulator, bot_id: int) -> Response | None:
    """A random 429 (raised) or 5xx (returned) instead of doing the work, or None."""
    config = sim.config
    if sim._inject(bot_id, config.fault_429_rate):
        raise ApiError.too_many_requests(config.random_429_retry_after)
    if sim._inject(bot_id, config.fault_5xx_rate):
        response = _server_error(json_body=sim._coin())
        sim._count_error(bot_id, response.status_code)
        return response
    return None


class _FileEndpoint:
    """`/file/bot{token}/{file_path}`: the bytes behind a getFile path."""

    def __init__(self, sim: TelegramSimulator) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        bot_id = self.sim._bot_for_token(str(request.path_params["token"]))
        if bot_id is None:
            await _error(ApiError(401, "Unauthorized"))(scope, receive, send)
            return
        with self.sim._downloading(bot_id):
            await self._serve(bot_id, request, send)

    async def _serve(self, bot_id: int, request: Request, send: Send) -> None:
        config = self.sim.config
        if config.latency:
            await asyncio.sleep(config.latency)
        found = self._lookup(bot_id, str(request.path_params["file_path"]))
        if isinstance(found, Response):
            await found(request.scope, request.receive, send)
            return
        drop = self.sim._inject(bot_id, config.fault_drop_rate) or self.sim._inject(
            bot_id, config.fault_download_drop_rate
        )
        await _send_file(
            request,
            send,
            found,
            bandwidth=config.download_bandwidth,
            drop_at=len(found) // 2 if drop else None,
            on_sent=lambda size: self.sim._count_sent(bot_id, size),
        )

    def _lookup(self, bot_id: int, file_path: str) -> bytes | Response:
        """The file's bytes, or the response that refuses them."""
        try:
            self.sim._check_token(bot_id)
            fault = _fault_before_work(self.sim, bot_id)
            if fault is not None:
                return fault
            return self.sim._file_for_download(bot_id, file_path)
        except ApiError as err:
            self.sim._count_error(bot_id, err.status)
            return _error(err)


# --- control endpoints (/_sim/...) ---------------------------------------------------


def _control_routes(sim: TelegramSimulator) -> list[Route]:
    async def stats(request: Request) -> Response:
        return JSONResponse(sim.snapshot())

    async def reset_stats(request: Request) -> Response:
        sim.reset_stats()
        return JSONResponse({"ok": True})

    async def config(request: Request) -> Response:
        if request.method == "POST":
            try:
                changes = await request.json()
                if not isinstance(changes, dict):
                    raise ValueError("expected a JSON object of settings")
                sim.configure(**changes)
            except ValueError as exc:
                return JSONResponse({"ok": False, "description": str(exc)}, status_code=400)
        knobs = {name: getattr(sim.config, name) for name in sorted(MUTABLE_KNOBS)}
        return JSONResponse({"ok": True, "config": knobs})

    async def revoke(request: Request) -> Response:
        return _control(lambda: sim.revoke(int(request.path_params["bot_id"])))

    # Channel ids are negative, which Starlette's int convertor does not match.
    async def kick(request: Request) -> Response:
        params = request.path_params
        return _control(lambda: sim.kick(int(params["bot_id"]), int(params["chat_id"])))

    async def unkick(request: Request) -> Response:
        params = request.path_params
        return _control(lambda: sim.unkick(int(params["bot_id"]), int(params["chat_id"])))

    return [
        Route("/_sim/stats", stats, methods=["GET"]),
        Route("/_sim/reset-stats", reset_stats, methods=["POST"]),
        Route("/_sim/config", config, methods=["GET", "POST"]),
        Route("/_sim/revoke/{bot_id}", revoke, methods=["POST"]),
        Route("/_sim/kick/{bot_id}/{chat_id}", kick, methods=["POST"]),
        Route("/_sim/unkick/{bot_id}/{chat_id}", unkick, methods=["POST"]),
    ]


def _control(action: Callable[[], None]) -> Response:
    try:
        action()
    except ValueError:
        return JSONResponse({"ok": False, "description": "ids must be integers"}, status_code=400)
    except KeyError as exc:
        return JSONResponse({"ok": False, "description": str(exc.args[0])}, status_code=404)
    return JSONResponse({"ok": True})


def create_simulator_app(sim: TelegramSimulator) -> Starlette:
    _hide_simulated_drops()
    routes = [
        Route("/bot{token}/{method}", _BotApiEndpoint(sim), methods=["GET", "POST"]),
        Route("/file/bot{token}/{file_path:path}", _FileEndpoint(sim), methods=["GET"]),
        *_control_routes(sim),
    ]
    return Starlette(routes=routes)


class _HideSimulatedDrops(logging.Filter):
    """uvicorn logs every exception escaping the app; the drops are on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimulatedDrop)


def _hide_simulated_drops() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _HideSimulatedDrops) for f in logger.filters):
        logger.addFilter(_HideSimulatedDrops())


# --- running it -----------------------------------------------------------------------


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server living inside another program's event loop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self.should_exit = True
        self._stopping.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The host program owns SIGINT/SIGTERM.
        yield

    # uvicorn's main loop and shutdown poll and sleep in 0.1 s steps; every test
    # starts and stops a server, so these two wait on events and short polls.

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # on_tick(0) refreshes the Date header
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._stopping.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now, busy ones after their response
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                # uvicorn offers no event for "every connection is closed".
                while state.connections or state.tasks:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
        except TimeoutError:
            log.warning("sim_shutdown_cancelled_requests", requests=len(state.tasks))
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()


@contextlib.asynccontextmanager
async def run_simulator(
    sim: TelegramSimulator, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve the simulator in the current event loop; yields its base URL."""
    config = uvicorn.Config(
        create_simulator_app(sim),
        host=host,
        port=port,
        lifespan="off",
        log_level="warning",
        log_config=None,  # leave the host's logging configuration as it is
        access_log=False,
        ws="none",
        timeout_graceful_shutdown=5,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    try:
        await _wait_until_started(server, task)
        yield _base_url(server, host)
    finally:
        server.stop()
        await task


async def _wait_until_started(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the simulator's server stopped during startup")
        await asyncio.sleep(0.002)


def _base_url(server: uvicorn.Server, host: str) -> str:
    port = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


# Option names of the `telegram-sim` command that differ from SimulatorConfig's.
_CLI_ALIASES = {"concurrency_limit": "max_concurrent_calls_per_bot"}


def main_simulator(
    host: str = "127.0.0.1",
    port: int = 8081,
    bots: int = 6,
    chat_id: int | Sequence[int] = -1001,
    *,
    tokens: Sequence[str] | None = None,
    tokens_file: str | os.PathLike[str] | None = None,
    first_bot_id: int = 100001,
    **knobs: Any,
) -> None:
    """Run the simulator standalone (`teleuploader telegram-sim`) until interrupted.

    Knobs are SimulatorConfig fields; ones given as None keep their default.
    The tokens it accepts are printed to stdout, one per line.
    """
    settings = {_CLI_ALIASES.get(name, name): value for name, value in knobs.items()}
    config = SimulatorConfig(
        tokens=list(tokens) if tokens else make_tokens(bots, first_bot_id),
        chat_ids=[chat_id] if isinstance(chat_id, int) else list(chat_id),
        **{name: value for name, value in settings.items() if value is not None},
    )
    sim = TelegramSimulator(config)
    if tokens_file is not None:
        with open(tokens_file, "w", encoding="utf-8") as out:
            out.write("".join(f"{token}\n" for token in sim.tokens))
    for token in sim.tokens:
        print(token)
    sys.stdout.flush()
    print(
        f"Telegram simulator on http://{host}:{port}, chats {sim.chat_ids}",
        file=sys.stderr,
    )
    uvicorn.run(
        create_simulator_app(sim),
        host=host,
        port=port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        ws="none",
    )
