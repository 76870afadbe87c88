"""Telegram's rules in the simulator: the simulated world (bots, chats,
messages, files) and what each Bot API method does to it, plus the method
table the HTTP layer dispatches on.

`CallBookkeeping` (in `bookkeeping`) adds the in-flight bookkeeping of the
HTTP layer on top of `TelegramRules`, and `TelegramSimulator` (in `state`)
the hooks for tests on top of that.
"""

from __future__ import annotations

import posixpath
import random
import secrets
import time
from pathlib import Path
from typing import Any

from app.config.settings import BotToken
from app.telegram.simulator.bodies import (
    _chat_id_param,
    _int_param,
    _message_id_param,
    _received_file,
)
from app.telegram.simulator.config import SimulatorConfig
from app.telegram.simulator.flood import FloodRules
from app.telegram.simulator.local_disk import LocalDisk
from app.telegram.simulator.losses import Losses
from app.telegram.simulator.model import (
    NOT_KEPT,
    ApiError,
    DiscardedBytes,
    Post,
    _Bot,
    _Chat,
    _FileRef,
    _Message,
    _Params,
    _StoredFile,
)
from app.telegram.types import CAPTION_LIMIT

# What the server answers for any server-side download that failed, a file
# that is gone or one Telegram could not give it now (Client.cpp,
# on_update_file: "also includes all 5xx and 429 errors").
FILE_UNAVAILABLE = "Bad Request: wrong file_id or the file is temporarily unavailable"
# td's MessagesManager.cpp, can_edit_message: without can_edit_messages, a
# bot edits its own channel post only within edit_time_limit (2 days; the
# server's default), with 300 s more for an edit already begun.
EDIT_TIME_LIMIT = 2 * 86400.0
EDIT_GRACE = 300.0


class TelegramRules:
    """The simulated Telegram's world and its rules; synchronous, so that
    every check-and-update is atomic on the event loop."""

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
        # Administrators with some rights taken away (`restrict`): the
        # rights named map to False; any other is ADMIN_RIGHTS'.
        self._restricted: dict[tuple[int, int], dict[str, bool]] = {}
        self._losses = Losses()
        self._file_ids: dict[str, _FileRef] = {}
        self._file_paths: dict[str, _FileRef] = {}
        self._current_path: dict[tuple[int, str], str] = {}  # (bot_id, unique_id) -> path
        self._path_counter = 0
        self._flood = FloodRules(config)
        self._posts: list[Post] = []
        self._clock_offset = 0.0
        # A `--local` server's disk, and where each path it gave has its bytes.
        self._local = LocalDisk(config) if config.local else None
        self._local_files: dict[str, Path] = {}

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
            if not self.config.keep_file_bytes:
                file.content = DiscardedBytes(file.size)
        else:
            file = self._file_to_resend(bot_id, resent_id)
        self._check_send_budget(bot_id, chat.chat_id)
        file_id = (
            self._issue_file_id(bot_id, file, chat.chat_id) if upload is not None else resent_id
        )
        return self._message_json(self._post(bot_id, chat, file, file_id, caption))

    def _file_to_resend(self, bot_id: int, document: str) -> _StoredFile:
        """sendDocument with a file_id instead of a file: no upload, no size limit."""
        if not document:
            raise ApiError(400, "Bad Request: there is no document in the request")
        ref = self._file_ids.get(document)
        if ref is None or ref.bot_id != bot_id or self._file_gone(ref.file):
            # URLs are not fetched by the simulator, so they end up here too.
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        return ref.file

    def _get_file(self, bot_id: int, params: _Params) -> dict[str, Any]:
        file_id = params.fields.get("file_id")
        if not file_id:
            raise ApiError(400, "Bad Request: file_id is empty")
        ref = self._file_ids.get(file_id)
        if ref is None or ref.bot_id != bot_id:
            raise ApiError(400, FILE_UNAVAILABLE)
        # A local server has no cap (Client.cpp, do_get_file: `!local_mode_`).
        if not self.config.local and ref.file.size > self.config.max_getfile_bytes:
            raise ApiError(400, "Bad Request: file is too big")
        # After the size check: Telegram checks the size it knows from the
        # file_id first, and finds the file missing only when it fetches it.
        if self._file_gone(ref.file):
            raise ApiError(400, FILE_UNAVAILABLE)
        if self._must_fetch(bot_id, ref.file) and not self._may_fetch(bot_id, ref):
            # The fetch goes through the message the file_id came from, which
            # a bot out of its chat cannot read: the download fails, and the
            # server says what it says of every failed download. (Not in the
            # server's source, which leaves it to td: unverified.)
            raise ApiError(400, FILE_UNAVAILABLE)
        return {
            "file_id": file_id,
            "file_unique_id": ref.file.unique_id,
            "file_size": ref.file.size,
            "file_path": self._file_path_for(bot_id, ref.file),
        }

    def _delete_message(self, bot_id: int, params: _Params) -> bool:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        message_id = _message_id_param(params, "message_id")
        message = chat.messages.get(message_id)
        if message is None or message.deleted or self._losses.message_gone(message):
            raise ApiError(400, "Bad Request: message to delete not found")
        # td's MessagesManager.cpp, can_delete_channel_message: a bot may not
        # delete a message 48 hours (2 * 86400 s) or more after it was posted
        # (its `date`), whatever its rights; below that, can_delete_messages
        # deletes any post, can_post_messages only the bot's own.
        if self._now() - message.posted_at >= self.config.delete_window:
            raise ApiError(400, "Bad Request: message can't be deleted")
        own = self._poster(message) == bot_id
        if not self._may(bot_id, chat.chat_id, "can_delete_messages") and not (
            own and self._may(bot_id, chat.chat_id, "can_post_messages")
        ):
            raise ApiError(400, "Bad Request: message can't be deleted")
        # The file stays: file_ids issued for it keep working, as in Telegram.
        message.deleted = True
        return True

    def _forward_message(self, bot_id: int, params: _Params) -> dict[str, Any]:
        target = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        self._check_may_post(bot_id, target.chat_id)
        source_chat = self._member_chat(bot_id, _chat_id_param(params, "from_chat_id"))
        source = source_chat.messages.get(_message_id_param(params, "message_id"))
        if source is None or source.deleted or self._losses.message_gone(source):
            raise ApiError(400, "Bad Request: message to forward not found")
        self._check_send_budget(bot_id, target.chat_id)
        file_id = self._issue_file_id(bot_id, source.file, target.chat_id)
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
        rights = {**ADMIN_RIGHTS, **self._restricted.get((user_id, chat.chat_id), {})}
        return {"status": "administrator", "user": bot.info(), **rights}

    def _pin_chat_message(self, bot_id: int, params: _Params) -> bool:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        message_id = _message_id_param(params, "message_id")
        self._check_may_pin(bot_id, chat.chat_id)
        if not self._standing(chat, message_id):
            raise ApiError(400, "Bad Request: message to pin not found")
        if message_id in chat.pinned:
            chat.pinned.remove(message_id)
        chat.pinned.append(message_id)
        # In a channel, a pin posts a service message ("... pinned ..."): it
        # takes the next message id, and bots never see it (no document).
        chat.last_message_id += 1
        return True

    def _unpin_chat_message(self, bot_id: int, params: _Params) -> bool:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        self._check_may_pin(bot_id, chat.chat_id)
        # Without message_id, Telegram unpins the most recent pin.
        named = params.fields.get("message_id")
        standing = [i for i in chat.pinned if self._standing(chat, i)]
        if not standing:
            raise ApiError(400, "Bad Request: message to unpin not found")
        message_id = _message_id_param(params, "message_id") if named else standing[-1]
        if message_id not in standing:
            raise ApiError(400, "Bad Request: message to unpin not found")
        chat.pinned.remove(message_id)
        return True

    def _edit_message_caption(self, bot_id: int, params: _Params) -> dict[str, Any]:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        message_id = _message_id_param(params, "message_id")
        if not self._standing(chat, message_id):
            raise ApiError(400, "Bad Request: message to edit not found")
        self._check_may_edit(bot_id, chat.chat_id, chat.messages[message_id])
        caption = params.fields.get("caption") or None
        if caption is not None and len(caption) > CAPTION_LIMIT:
            raise ApiError(400, "Bad Request: message caption is too long")
        message = chat.messages[message_id]
        if caption == message.caption:
            raise ApiError(400, "Bad Request: message is not modified")
        # An edit posts no service message and keeps the pin where it is.
        message.caption = caption
        return self._message_json(message)

    def _get_chat(self, bot_id: int, params: _Params) -> dict[str, Any]:
        chat = self._member_chat(bot_id, _chat_id_param(params, "chat_id"))
        result = chat.as_json()
        standing = [i for i in chat.pinned if self._standing(chat, i)]
        if standing:
            message = chat.messages[standing[-1]]
            pinned = self._message_json(message)
            # file_ids are per bot: the caller gets one of its own, as from Telegram.
            pinned["document"]["file_id"] = self._issue_file_id(bot_id, message.file, chat.chat_id)
            result["pinned_message"] = pinned
        return result

    def _standing(self, chat: _Chat, message_id: int) -> bool:
        message = chat.messages.get(message_id)
        return (
            message is not None and not message.deleted and not self._losses.message_gone(message)
        )

    def getfile_download_seconds(self, bot_id: int, params: _Params) -> float:
        """How long this getFile's server-side download takes before the
        answer: the file's size at `getfile_bandwidth`, unless the server has
        the file on its disk already (Client.cpp, do_get_file: td's
        downloadFile returns at once for a file downloaded before)."""
        bandwidth = self.config.getfile_bandwidth
        ref = self._file_ids.get(params.fields.get("file_id", ""))
        if bandwidth is None or ref is None or ref.bot_id != bot_id:
            return 0.0
        if not self._must_fetch(bot_id, ref.file):
            return 0.0
        return ref.file.size / bandwidth

    def _file_for_download(self, bot_id: int, file_path: str) -> bytes:
        ref = self._file_paths.get(file_path)
        if ref is None or ref.bot_id != bot_id or self._expired(ref) or self._file_gone(ref.file):
            raise ApiError(404, "Not Found")
        if not ref.file.kept:
            raise ApiError(404, f"Not Found: {NOT_KEPT}")
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
        if chat is None or chat_id in self._losses.lost_chats:
            raise ApiError(400, "Bad Request: chat not found")
        if (bot_id, chat_id) in self._kicked:
            raise ApiError(403, "Forbidden: bot was kicked from the channel chat")
        return chat

    def _file_gone(self, file: _StoredFile) -> bool:
        return self._losses.file_gone(file, outlive_lost_chats=self.config.files_outlive_lost_chats)

    def _may(self, bot_id: int, chat_id: int, right: str) -> bool:
        """Whether the bot holds an administrator's `right` in the chat."""
        if (bot_id, chat_id) in self._demoted:
            return False
        return self._restricted.get((bot_id, chat_id), {}).get(right, True)

    def _poster(self, message: _Message) -> int:
        """The bot that posted (or forwarded) the message; 0: someone else."""
        ref = self._file_ids.get(message.file_id)
        return ref.bot_id if ref is not None else 0

    def _check_may_post(self, bot_id: int, chat_id: int) -> None:
        if not self._may(bot_id, chat_id, "can_post_messages"):
            raise ApiError(400, "Bad Request: not enough rights to send documents to the chat")

    def _check_may_pin(self, bot_id: int, chat_id: int) -> None:
        # td's DialogManager.cpp, can_pin_messages: in a broadcast channel,
        # pinning (and unpinning) takes can_edit_messages; can_post_messages
        # is not enough.
        if not self._may(bot_id, chat_id, "can_edit_messages"):
            raise ApiError(
                400, "Bad Request: not enough rights to manage pinned messages in the chat"
            )

    def _check_may_edit(self, bot_id: int, chat_id: int, message: _Message) -> None:
        # td's MessagesManager.cpp, can_edit_message: a channel post is
        # editable with can_edit_messages at any age; without it, only the
        # bot's own post with can_post_messages, and only while
        # edit_time_limit (2 days, plus 300 s for an edit) has not passed.
        if self._may(bot_id, chat_id, "can_edit_messages"):
            return
        own = self._poster(message) == bot_id and self._may(bot_id, chat_id, "can_post_messages")
        if not own or self._now() - message.posted_at - EDIT_GRACE >= EDIT_TIME_LIMIT:
            raise ApiError(400, "Bad Request: message can't be edited")

    def _space_upload(self, bot_id: int, files_size: int) -> float:
        """Seconds an upload waits before Telegram takes it (`FloodRules`)."""
        if not self.config.upload_spacing or self.config.local:
            return 0.0  # the server skips the rule with --local
        return self._flood.space_upload(bot_id, files_size, self._now())

    def _check_send_budget(self, bot_id: int, chat_id: int) -> None:
        self._flood.check_send_budget(bot_id, chat_id, self._now())

    def _issue_file_id(self, bot_id: int, file: _StoredFile, chat_id: int) -> str:
        # Opaque, like Telegram's: nothing in it says which bot or file it is.
        file_id = "BQACAgIAAx" + secrets.token_urlsafe(48)
        self._file_ids[file_id] = _FileRef(bot_id, file, chat_id=chat_id)
        return file_id

    def _kept_path(self, bot_id: int, file: _StoredFile) -> str | None:
        """The path the server gave the bot for the file, while it still
        keeps it: unexpired, and (local mode) still on its disk."""
        path = self._current_path.get((bot_id, file.unique_id))
        if path is None or self._expired(self._file_paths[path]):
            return None
        if self._local is not None and not self._local.holds(self._local_files[path]):
            return None  # the server's storage clean-up took it
        return path

    def _must_fetch(self, bot_id: int, file: _StoredFile) -> bool:
        """Whether a getFile of the file makes the server download it."""
        return self._kept_path(bot_id, file) is None

    def _may_fetch(self, bot_id: int, ref: _FileRef) -> bool:
        """Whether the bot may still read the message its file_id came from
        (a lost chat's files are `_file_gone`'s)."""
        return ref.chat_id is None or (bot_id, ref.chat_id) not in self._kicked

    def _file_path_for(self, bot_id: int, file: _StoredFile) -> str:
        """The bot's path for a file: reused while the server keeps it. A
        local server answers the absolute path of the copy it wrote."""
        path = self._kept_path(bot_id, file)
        if path is not None:
            return path
        self._path_counter += 1
        suffix = posixpath.splitext(file.file_name)[1].lower()
        name = f"file_{self._path_counter}{suffix or '.bin'}"
        if self._local is None:
            path = f"documents/{name}"
        else:
            path, where = self._local.paths(self._bots[bot_id].token, name)
            self._local.write(where, file.data)
            self._local_files[path] = where
        self._file_paths[path] = _FileRef(bot_id, file, issued_at=self._now())
        self._current_path[(bot_id, file.unique_id)] = path
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
        self._losses.hold(message)
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
                "file_size": message.file.size,
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


ADMIN_RIGHTS: dict[str, Any] = {
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
