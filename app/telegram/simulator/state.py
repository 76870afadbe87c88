"""The simulated Telegram: its state and rules, plus hooks for tests.

Synchronous, so that every check-and-update is atomic on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import itertools
import math
import posixpath
import random
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog

from app.config import BotToken
from app.telegram.simulator.bodies import (
    _chat_id_param,
    _int_param,
    _message_id_param,
    _received_file,
)
from app.telegram.simulator.config import (
    CAPTION_LIMIT,
    FAULTABLE_METHODS,
    MUTABLE_KNOBS,
    SimulatorConfig,
)
from app.telegram.simulator.model import (
    ApiError,
    BotStats,
    Post,
    _Bot,
    _Call,
    _Chat,
    _FileRef,
    _Message,
    _Params,
    _StoredFile,
)

log = structlog.get_logger()


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
        # Members without an admin's rights: no posting, no deleting.
        self._demoted: set[tuple[int, int]] = set()  # (bot_id, chat_id)
        self._file_ids: dict[str, _FileRef] = {}
        self._file_paths: dict[str, _FileRef] = {}
        self._current_path: dict[tuple[int, str], str] = {}  # (bot_id, unique_id) -> path
        self._path_counter = 0
        self._sends: dict[tuple[int, int], deque[float]] = {}  # (bot_id, chat_id) -> times
        self._posts: list[Post] = []
        self._clock_offset = 0.0
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._call_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._holds: dict[str, asyncio.Event] = {}  # method -> released when set
        self._held: dict[str, int] = {}  # method -> calls waiting at its hold now
        self._held_waiters: list[tuple[str, int, asyncio.Future[None]]] = []
        self._connections: dict[int, Callable[[], None]] = {}  # in flight, for `kill`
        self._connection_ids = itertools.count()

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

    def set_method_faults(
        self,
        method: str,
        *,
        fault_5xx_rate: float | None = None,
        fault_429_rate: float | None = None,
        fault_drop_rate: float | None = None,
    ) -> None:
        """Give one Bot API method fault rates of its own (the others keep the
        global ones); arguments left out keep the method's current value."""
        method = _canonical_method(method)
        rates = {method: dict(kinds) for method, kinds in self.config.method_fault_rates.items()}
        changes = {
            "fault_5xx_rate": fault_5xx_rate,
            "fault_429_rate": fault_429_rate,
            "fault_drop_rate": fault_drop_rate,
        }
        rates.setdefault(method, {}).update(
            {kind: rate for kind, rate in changes.items() if rate is not None}
        )
        self.configure(method_fault_rates=rates)

    def fault_rate(self, method: str | None, kind: str) -> float:
        """The rate of one kind of fault (a SimulatorConfig field name) for a
        method; `None` (file downloads) has the global rates only."""
        rates = self.config.method_fault_rates.get(method or "", {})
        rate: float = rates.get(kind, getattr(self.config, kind))
        return rate

    def kill(self) -> int:
        """Drop the connection of every call and download in flight, as a
        network failure would; returns how many were dropped. A call whose
        body Telegram had whole is still carried out (its client never hears
        of it); one still sending its body stores nothing."""
        aborts = list(self._connections.values())
        self._connections.clear()
        for abort in aborts:
            abort()
        log.warning("sim_killed_in_flight_calls", connections=len(aborts))
        return len(aborts)

    @contextlib.contextmanager
    def _connection(self, abort: Callable[[], None] | None) -> Iterator[None]:
        """Make a request's connection droppable by `kill` while it runs."""
        if abort is None:
            yield
            return
        key = next(self._connection_ids)
        self._connections[key] = abort
        try:
            yield
        finally:
            self._connections.pop(key, None)

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
        self._demoted.discard((bot_id, chat_id))

    def demote(self, bot_id: int, chat_id: int) -> None:
        """The bot stays in the chat but loses its admin rights: its posts
        there get 400 "not enough rights", its deletions 400 "message can't
        be deleted", as Telegram answers them. `unkick` restores it."""
        self._bot(bot_id)
        self._chat(chat_id)
        self._demoted.add((bot_id, chat_id))

    def post_foreign(self, chat_id: int, text: str = "hello") -> int:
        """Someone other than the service posts in the chat (a person, or a
        bot outside the pool): a message id is taken. Returns it."""
        file = _StoredFile(
            unique_id="AgAD" + secrets.token_urlsafe(12),
            data=text.encode(),
            file_name="post.txt",
            mime_type="text/plain",
        )
        # Bot id 0 in `posts()`: no bot of the pool made it.
        return self._post(0, self._chat(chat_id), file, file_id="", caption=None).message_id

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
        self._posts.clear()

    def posts(self) -> list[Post]:
        """Every message posted since the start (or `reset_stats`), in order,
        with the bot that posted it and when."""
        return list(self._posts)

    def message_count(self, chat_id: int) -> int:
        """Messages ever posted in the chat, deleted ones included."""
        return len(self._chat(chat_id).messages)

    def live_messages(self, chat_id: int) -> list[int]:
        """Ids of the chat's messages that have not been deleted."""
        return [m.message_id for m in self._chat(chat_id).messages.values() if not m.deleted]

    def stored_messages(self) -> dict[int, list[int]]:
        """Every chat's messages that have not been deleted, by chat id: what a
        leak count compares with the messages the service still references."""
        return {chat_id: self.live_messages(chat_id) for chat_id in self._chats}

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
        self._check_may_post(bot_id, chat.chat_id)
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
        return self._message_json(self._post(bot_id, chat, file, file_id, caption))

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
        if (bot_id, chat.chat_id) in self._demoted:
            raise ApiError(400, "Bad Request: message can't be deleted")
        if self._now() - message.posted_at > self.config.delete_window:
            raise ApiError(400, "Bad Request: message can't be deleted")
        # The file stays: file_ids issued for it keep working, as in Telegram.
        message.deleted = True
        return True

    def _forward_message(self, bot_id: int, params: _Params) -> dict[str, Any]:
        target = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        self._check_may_post(bot_id, target.chat_id)
        source_chat = self._member_chat(bot_id, _chat_id_param(params, "from_chat_id"))
        source = source_chat.messages.get(_message_id_param(params, "message_id"))
        if source is None or source.deleted:
            raise ApiError(400, "Bad Request: message to forward not found")
        self._check_send_budget(bot_id, target.chat_id)
        file_id = self._issue_file_id(bot_id, source.file)
        message = self._post(bot_id, target, source.file, file_id, source.caption)
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
        if (user_id, chat.chat_id) in self._demoted:
            return {"status": "member", "user": bot.info()}
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

    def _check_may_post(self, bot_id: int, chat_id: int) -> None:
        if (bot_id, chat_id) in self._demoted:
            raise ApiError(400, "Bad Request: not enough rights to send documents to the chat")

    def _check_send_budget(self, bot_id: int, chat_id: int) -> None:
        budget = self.config.sends_per_minute
        if budget is None:
            return
        now = self._now()
        sends = self._sends.setdefault((bot_id, chat_id), deque())
        window = self.config.send_window
        while sends and sends[0] <= now - window:
            sends.popleft()
        if len(sends) >= budget:
            raise ApiError.too_many_requests(max(1, math.ceil(sends[0] + window - now)))
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
        bot_id: int,
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
        self._posts.append(Post(bot_id, chat.chat_id, message.message_id, message.posted_at))
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


# --- the Bot API method table ------------------------------------------------------


@dataclass(frozen=True)
class _Method:
    name: str
    handler: Callable[[TelegramSimulator, int, _Params], Any]
    upload: bool = False

    @property
    def faultable(self) -> bool:
        """Whether random faults strike this method."""
        return self.name in FAULTABLE_METHODS


_METHODS = {
    method.name.lower(): method
    for method in (
        _Method("getMe", TelegramSimulator._get_me),
        _Method("sendDocument", TelegramSimulator._send_document, upload=True),
        _Method("getFile", TelegramSimulator._get_file),
        _Method("deleteMessage", TelegramSimulator._delete_message),
        _Method("forwardMessage", TelegramSimulator._forward_message),
        _Method("getChatMember", TelegramSimulator._get_chat_member),
    )
}


def _canonical_method(name: str) -> str:
    # Bot API method names are case-insensitive.
    method = _METHODS.get(name.lower())
    return method.name if method else name
