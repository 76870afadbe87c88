"""What Telegram has lost: chats that are gone, files taken down, and which
messages hold each file.

A file is Telegram's, not a message's: a forward or a re-send by file_id
posts the same file again (the same file_unique_id), so a takedown takes every
message that holds it, and a file lives as long as some chat still holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.telegram.simulator.model import _Message, _StoredFile


@dataclass
class Losses:
    lost_chats: set[int] = field(default_factory=set)
    taken_down: set[str] = field(default_factory=set)  # file_unique_ids
    # file_unique_id -> every message ever posted with that file, deleted ones too.
    holders: dict[str, list[_Message]] = field(default_factory=dict)

    def hold(self, message: _Message) -> None:
        """Record a new message as a holder of its file."""
        self.holders.setdefault(message.file.unique_id, []).append(message)

    def holders_of(self, file: _StoredFile) -> list[_Message]:
        return list(self.holders.get(file.unique_id, []))

    def message_gone(self, message: _Message) -> bool:
        """Whether Telegram no longer has the message (its chat lost, or its
        file taken down); a deletion is the bot's doing and not counted here."""
        return message.chat_id in self.lost_chats or message.file.unique_id in self.taken_down

    def file_gone(self, file: _StoredFile, *, outlive_lost_chats: bool) -> bool:
        """Whether Telegram no longer has the file: taken down, or (unless
        files outlive their chats) held only in chats that are lost. A
        deleted message in a live chat still holds its file, as in Telegram."""
        if file.unique_id in self.taken_down:
            return True
        if outlive_lost_chats or not self.lost_chats:
            return False
        holders = self.holders.get(file.unique_id, [])
        return bool(holders) and all(message.chat_id in self.lost_chats for message in holders)
