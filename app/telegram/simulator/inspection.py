"""What tests and the /_sim endpoints read of the simulated Telegram: the
posts, each chat's messages and files, the per-bot stats."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from app.telegram.simulator.bookkeeping import CallBookkeeping
from app.telegram.simulator.model import BotStats, Post, _Bot, _Message


class SimulatorInspection(CallBookkeeping):
    """Reads of the simulator's state; they change nothing."""

    def chat_lost(self, chat_id: int) -> bool:
        return chat_id in self._losses.lost_chats

    def stats(self) -> dict[int, BotStats]:
        """A snapshot per bot; later calls do not change it."""
        return {bot_id: self._snapshot_of(bot) for bot_id, bot in self._bots.items()}

    @staticmethod
    def _snapshot_of(bot: _Bot) -> BotStats:
        stats = copy.deepcopy(bot.stats)
        stats.calls_in_flight = bot.calls_in_flight
        stats.uploads_in_flight = bot.uploads_in_flight
        stats.downloads_in_flight = bot.downloads_in_flight
        return stats

    def reset_stats(self) -> None:
        for bot in self._bots.values():
            bot.stats = BotStats(
                max_concurrent_calls=bot.calls_in_flight,
                max_concurrent_uploads=bot.uploads_in_flight,
                max_concurrent_small_calls=bot.small_calls_in_flight,
                max_concurrent_posting_calls=bot.calls_in_flight - bot.small_calls_in_flight,
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
