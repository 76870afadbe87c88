"""How full each storage chat is, and the ceiling past which it takes no
new writes (CHAT_MESSAGE_LIMIT).

Users of another Telegram store lost access to their oldest files once a
channel passed about a million messages (teldrive #255, #562; not documented
by Telegram, not verifiable here); that project now caps a channel at
500,000 (teldrive #504, PR #492). What the cause counts is not known, so the
count here is the cautious one: every message id Telegram has given out in
the chat. A channel numbers its messages 1, 2, 3..., so that is the newest
id: every message ever posted there, by the service or anyone else, deleted
or not (a deleted message took its id all the same), pins' service messages
included. Every post the service makes is answered with its id, so keeping
the count costs no call; taking the highest id seen, it cannot drift or
double-count, and instances merge theirs by taking the highest
(app/store/chat_fill.py keeps it in the database).

A full chat takes no new chunk, replica, snapshot or journal batch; the
others carry on. Reads, deletions and the few posts that keep existing data
reachable (a forward that gives another bot a file id, a reconciliation's
probe) still go to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.telegram.errors import ChatsFull

#: The ceiling by default: teldrive's, half the count past which its users lost files.
DEFAULT_CHAT_MESSAGE_LIMIT = 500_000
#: A chat this full (of the limit) is reported (`teleuploader check`).
WARN_FRACTION = 0.8


class ChatFill:
    """The newest message id seen in each storage chat, against the limit
    (0: no limit)."""

    def __init__(self, chat_ids: Iterable[int], limit: int) -> None:
        self.limit = limit
        self.newest: dict[int, int] = dict.fromkeys(chat_ids, 0)
        # Raised here since the database last heard (app/store/chat_fill.py).
        self._unsaved: set[int] = set()

    def saw(self, chat_id: int, message_id: int) -> None:
        """A message with `message_id` was posted in the chat."""
        if message_id > self.newest.get(chat_id, 0):
            self.newest[chat_id] = message_id
            self._unsaved.add(chat_id)

    def learn(self, known: Mapping[int, int]) -> None:
        """What the database holds (every instance's posts)."""
        for chat_id, newest in known.items():
            if chat_id in self.newest and newest > self.newest[chat_id]:
                self.newest[chat_id] = newest

    def take_unsaved(self) -> dict[int, int]:
        """The chats raised since the last call, with their counts."""
        taken = {chat_id: self.newest[chat_id] for chat_id in self._unsaved}
        self._unsaved.clear()
        return taken

    def put_back(self, unsaved: Iterable[int]) -> None:
        """The database refused `take_unsaved`'s chats: they go with the next try."""
        self._unsaved.update(unsaved)

    def full(self, chat_id: int) -> bool:
        return self.limit > 0 and self.newest.get(chat_id, 0) >= self.limit

    def open_chats(self, chat_ids: Iterable[int]) -> list[int]:
        """Of `chat_ids`, those that take new writes."""
        return [chat_id for chat_id in chat_ids if not self.full(chat_id)]

    def refusal(self) -> ChatsFull:
        """The error of a write no chat can take."""
        return ChatsFull(
            f"every storage chat holds CHAT_MESSAGE_LIMIT ({self.limit:,}) messages or more, "
            "so nothing new can be stored: add a storage chat (a new private channel with "
            "the bots as administrators, its id added to STORAGE_CHAT_IDS, then a restart; "
            'deploy/README.md, "Adding a storage chat")'
        )
