"""The simulated Telegram as tests and the HTTP layer drive it.

`TelegramSimulator` is Telegram's rules (`TelegramRules`, in `rules`) plus
hooks for tests and benchmarks (faults, holds, kicks, clock, stats) and the
bookkeeping the HTTP layer does around each call (`CallBookkeeping`, in
`bookkeeping`: in-flight accounting, waiters, fault draws). Synchronous, so
that every check-and-update is atomic on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import random
import secrets
from collections.abc import Iterator
from typing import Any

import structlog

from app.telegram.simulator.bookkeeping import CallBookkeeping
from app.telegram.simulator.config import MUTABLE_KNOBS, SimulatorConfig
from app.telegram.simulator.model import BotStats, Post, _Bot, _Message, _StoredFile
from app.telegram.simulator.rules import _canonical_method

log = structlog.get_logger("app.telegram.simulator.state")


# --- the simulator ------------------------------------------------------------------


class TelegramSimulator(CallBookkeeping):
    """The simulated Telegram: its rules, plus hooks for tests."""

    def __init__(self, config: SimulatorConfig) -> None:
        super().__init__(config)
        # Its own generator, so that damage done by tests does not shift the
        # seeded sequence of random faults.
        self._damage_rng = random.Random(config.seed)

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
            self._damage_rng.seed(self.config.seed)

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

    def lose_chat(self, chat_id: int) -> None:
        """The chat is gone for good: deleted, or every bot banned from it.
        Every call naming it gets 400 "chat not found", and a file no other
        chat holds goes with it (`files_outlive_lost_chats`: whether it does)."""
        self._chat(chat_id)
        self._losses.lost_chats.add(chat_id)
        log.warning("sim_chat_lost", chat_id=chat_id)

    def chat_lost(self, chat_id: int) -> bool:
        return chat_id in self._losses.lost_chats

    def take_down(self, chat_id: int, message_id: int) -> list[tuple[int, int]]:
        """The message's file is removed on Telegram's side, and with it every
        message holding the same file (forwards and re-sends by file_id are
        the same file): getFile with any bot's file_id for it says "wrong
        file_id or the file is temporarily unavailable", paths already issued
        get 404, forwarding or deleting any of those messages says "not
        found". Returns those messages' (chat_id, message_id), in posting order."""
        file = self._message(chat_id, message_id).file
        self._losses.taken_down.add(file.unique_id)
        taken = [(m.chat_id, m.message_id) for m in self._losses.holders_of(file)]
        log.warning("sim_file_taken_down", chat_id=chat_id, message_id=message_id, messages=taken)
        return taken

    def corrupt(self, chat_id: int, message_id: int, offset: int | None = None) -> int:
        """Flip one byte (XOR 0xFF) of the message's file on Telegram's side,
        at `offset` or at a random one (the seed's); returns the offset. Every
        message and file_id of the file serves the damaged bytes from now on,
        with 200 and the right size: only a check of the content can tell.
        A download already under way keeps the bytes it started with."""
        file = self._message(chat_id, message_id).file
        size = file.size
        if offset is None:
            if not size:
                raise ValueError("the file is empty: there is no byte to flip")
            offset = self._damage_rng.randrange(size)
        if not 0 <= offset < size:
            raise ValueError(f"offset {offset} is outside the file's {size} bytes")
        damaged = bytearray(file.data)
        damaged[offset] ^= 0xFF
        file.content = bytes(damaged)
        log.warning("sim_file_corrupted", chat_id=chat_id, message_id=message_id, offset=offset)
        return offset

    def swap_files(self, first: tuple[int, int], second: tuple[int, int]) -> None:
        """Exchange the files of two messages, each (chat id, message id), on
        Telegram's side: each serves the other's bytes from now on."""
        a, b = self._message(*first).file, self._message(*second).file
        a.content, b.content = b.content, a.content
        log.warning("sim_files_swapped", first=first, second=second)

    def post_foreign(self, chat_id: int, text: str = "hello") -> int:
        """Someone other than the service posts in the chat (a person, or a
        bot outside the pool): a message id is taken. Returns it."""
        chat = self._chat(chat_id)
        if self.chat_lost(chat_id):
            raise ValueError(f"chat {chat_id} is lost: nobody posts in it")
        file = _StoredFile(
            unique_id="AgAD" + secrets.token_urlsafe(12),
            content=text.encode(),
            file_name="post.txt",
            mime_type="text/plain",
        )
        # Bot id 0 in `posts()`: no bot of the pool made it.
        return self._post(0, chat, file, file_id="", caption=None).message_id

    def hold(self, method: str) -> None:
        """Calls of `method` from now on wait, their body read and every check
        passed, just before Telegram would do the work, until `release(method)`."""
        self._holds.setdefault(_canonical_method(method), asyncio.Event())

    def release(self, method: str) -> None:
        """Let the held calls of `method` go on, and stop holding new ones."""
        gate = self._holds.pop(_canonical_method(method), None)
        if gate is not None:
            gate.set()

    @contextlib.contextmanager
    def holding(self, method: str) -> Iterator[None]:
        """`hold(method)` for the `with` block, then `release(method)`, also
        when the block fails: a test whose check failed leaves no call
        waiting for a release that never comes."""
        self.hold(method)
        try:
            yield
        finally:
            self.release(method)

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
        """Ids of the chat's messages that Telegram still has: not deleted,
        not taken down, not in a lost chat."""
        return [m.message_id for m in self._chat(chat_id).messages.values() if self._still_has(m)]

    def _still_has(self, message: _Message) -> bool:
        return not message.deleted and not self._losses.message_gone(message)

    def stored_messages(self) -> dict[int, list[int]]:
        """Every chat's messages that Telegram still has (`live_messages`), by
        chat id: what a leak count compares with the messages the service
        still references. A lost chat lists none."""
        return {chat_id: self.live_messages(chat_id) for chat_id in self._chats}

    def document_bytes(self, chat_id: int, message_id: int) -> bytes:
        """The bytes of one message's file as Telegram stores them (corrupted
        ones included), whatever became of the message."""
        return self._message(chat_id, message_id).file.data

    def stored_files(self, *, include_gone: bool = True) -> list[tuple[int, int, bytes]]:
        """(chat_id, message_id, bytes) of every message ever posted, chat by
        chat in posting order: everything Telegram was given, which is what a
        check for plaintext must search. Deleted, taken-down and lost-chat
        messages are included; `include_gone=False` keeps only the ones
        Telegram still has (`stored_messages`)."""
        return [
            (chat.chat_id, message.message_id, message.file.data)
            for chat in self._chats.values()
            for message in chat.messages.values()
            if include_gone or self._still_has(message)
        ]

    def message_caption(self, chat_id: int, message_id: int) -> str | None:
        return self._message(chat_id, message_id).caption

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
                    "lost": self.chat_lost(chat_id),
                }
                for chat_id in self._chats
            },
        }
