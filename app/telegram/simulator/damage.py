"""What tests do to the simulated Telegram: network failures, revoked
tokens, kicked or demoted bots, lost chats, files taken down or corrupted,
and posts by someone outside the pool."""

from __future__ import annotations

import random
import secrets

import structlog

from app.telegram.simulator.inspection import SimulatorInspection
from app.telegram.simulator.model import _StoredFile
from app.telegram.simulator.rules import ADMIN_RIGHTS

log = structlog.get_logger("app.telegram.simulator.state")


class SimulatedDamage(SimulatorInspection):
    """Damage done on Telegram's side, as tests ask for it."""

    _damage_rng: random.Random

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
        """The bot is made an administrator of the chat again, with every right."""
        self._kicked.discard((bot_id, chat_id))
        self._demoted.discard((bot_id, chat_id))
        self._restricted.pop((bot_id, chat_id), None)

    def restrict(self, bot_id: int, chat_id: int, **rights: bool) -> None:
        """The bot stays an administrator of the chat with the rights named
        set as given (`can_edit_messages=False`: it may no longer pin, nor
        edit others' posts); getChatMember reports them, and the calls that
        need them get Telegram's 400s. `unkick` gives every right back."""
        self._bot(bot_id)
        self._chat(chat_id)
        unknown = set(rights) - set(ADMIN_RIGHTS)
        if unknown:
            raise ValueError(f"not an administrator's right: {', '.join(sorted(unknown))}")
        self._restricted.setdefault((bot_id, chat_id), {}).update(rights)

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
