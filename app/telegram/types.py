"""Plain values returned by the Bot API client and the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# Characters a message's caption may hold (sendDocument, editMessageCaption).
CAPTION_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class BotInfo:
    """What `getMe` says about a bot."""

    id: int
    username: str | None
    first_name: str


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """One document stored in the storage chat.

    `file_id` only works with the bot that received it (`bot_id`), so callers
    persist every field: (chat_id, message_id) lets another bot reach the
    document through forwardMessage if that bot is ever gone.
    """

    bot_id: int
    file_id: str
    file_unique_id: str
    chat_id: int
    message_id: int
    size: int


@dataclass(frozen=True, slots=True)
class PinnedDocument:
    """A chat's pinned document (getChat's `pinned_message`) and its caption."""

    document: StoredDocument
    caption: str | None


@dataclass(frozen=True, slots=True)
class FileLocation:
    """What `getFile` returns: where the bytes can be downloaded from."""

    file_id: str
    file_unique_id: str
    file_path: str
    file_size: int | None


@dataclass(frozen=True, slots=True)
class ChatMemberInfo:
    """A bot's rights in the storage chat (from getChatMember)."""

    status: str
    can_post_messages: bool
    can_delete_messages: bool
    # Pinning in a channel takes this right (td's DialogManager.cpp,
    # can_pin_messages): a snapshot's manifest is pinned.
    can_edit_messages: bool = False

    @property
    def is_admin(self) -> bool:
        return self.status in ("administrator", "creator")


class DocumentBody(Protocol):
    """A document's bytes made as they are read (a sealed chunk,
    app.sealing.frames.SealedBody): seekable, with a known length, so that
    the request has a Content-Length and a retry reads it again from 0."""

    def __len__(self) -> int: ...
    def seek(self, offset: int, whence: int = 0) -> int: ...
    def read(self, size: int = -1, /) -> bytes | None: ...
