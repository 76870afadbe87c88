"""A simulator that keeps its chats in a directory, for `teleuploader demo
--data-dir`: the demo's database points at messages, so the messages and
their files must outlive the process as they would in Telegram.

Every message posted (sent or forwarded) and every deletion is appended to
`journal.jsonl`, each file's bytes are written once to `files/`, and a new
simulator on the same directory replays the journal. What Telegram lost is
journalled too (`lose_chat`, `take_down`, `corrupt`, by the message they
named), so a demo that lost a chat or a file still has lost it after a
restart; `files/` keeps each file as it was received, and a corruption is
replayed onto it. File paths are not kept (getFile issues new ones, as
Telegram may), nor are pacing windows or statistics. Files are held in
memory as in the plain simulator: it is a demo, not a store.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from app.telegram.simulator.bodies import _chat_id_param, _message_id_param
from app.telegram.simulator.config import SimulatorConfig
from app.telegram.simulator.model import _FileRef, _Message, _Params, _StoredFile
from app.telegram.simulator.state import TelegramSimulator


class PersistentSimulator(TelegramSimulator):
    """TelegramSimulator whose messages and files live in `directory`."""

    def __init__(self, config: SimulatorConfig, directory: Path) -> None:
        if not config.keep_file_bytes:
            raise ValueError("a simulator that keeps its chats must keep their files' bytes")
        super().__init__(config)
        self._files_dir = directory / "files"
        self._files_dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, _StoredFile] = {}
        journal = directory / "journal.jsonl"
        if journal.exists():
            self._replay(journal)
        self._journal = journal.open("a", encoding="utf-8")

    def close(self) -> None:
        self._journal.close()

    # --- what changes the chats ------------------------------------------------------

    def _send_document(self, bot_id: int, params: _Params) -> dict[str, Any]:
        result = super()._send_document(bot_id, params)
        self._record_post(result)
        return result

    def _forward_message(self, bot_id: int, params: _Params) -> dict[str, Any]:
        result = super()._forward_message(bot_id, params)
        self._record_post(result)
        return result

    def _delete_message(self, bot_id: int, params: _Params) -> bool:
        done = super()._delete_message(bot_id, params)
        chat_id = _chat_id_param(params, "chat_id")
        message_id = _message_id_param(params, "message_id")
        self._append({"op": "delete", "chat_id": chat_id, "message_id": message_id})
        return done

    def post_foreign(self, chat_id: int, text: str = "hello") -> int:
        message_id = super().post_foreign(chat_id, text)
        self._write(self._chats[chat_id].messages[message_id])
        return message_id

    def lose_chat(self, chat_id: int) -> None:
        super().lose_chat(chat_id)
        self._append({"op": "lose_chat", "chat_id": chat_id})

    def take_down(self, chat_id: int, message_id: int) -> list[tuple[int, int]]:
        taken = super().take_down(chat_id, message_id)
        self._append({"op": "take_down", "chat_id": chat_id, "message_id": message_id})
        return taken

    def corrupt(self, chat_id: int, message_id: int, offset: int | None = None) -> int:
        flipped = super().corrupt(chat_id, message_id, offset)
        entry = {"op": "corrupt", "chat_id": chat_id, "message_id": message_id, "offset": flipped}
        self._append(entry)
        return flipped

    def _record_post(self, result: dict[str, Any]) -> None:
        chat = self._chats[int(result["chat"]["id"])]
        self._write(chat.messages[int(result["message_id"])])

    def _write(self, message: _Message) -> None:
        file = message.file
        stored = self._files_dir / file.unique_id
        if not stored.exists():
            # The bytes first: a journal line never names a file that is not there.
            stored.write_bytes(file.data)
        origin = message.forwarded_from
        self._append(
            {
                "op": "post",
                "chat_id": message.chat_id,
                "message_id": message.message_id,
                "date": message.date,
                "posted_at": time.time() - (self._now() - message.posted_at),
                "bot_id": self._file_ids[message.file_id].bot_id if message.file_id else 0,
                "file_id": message.file_id,
                "unique_id": file.unique_id,
                "file_name": file.file_name,
                "mime_type": file.mime_type,
                "caption": message.caption,
                "origin": None if origin is None else [origin.chat_id, origin.message_id],
            }
        )

    def _append(self, entry: dict[str, Any]) -> None:
        self._journal.write(json.dumps(entry) + "\n")
        self._journal.flush()

    # --- reading it back -------------------------------------------------------------

    def _replay(self, journal: Path) -> None:
        for line in journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            chat = self._chats.get(entry.get("chat_id"))
            if chat is None:
                continue  # a chat the demo no longer has
            if entry["op"] == "post":
                self._replay_post(entry)
            elif entry["op"] == "lose_chat":
                # The base class's hooks: replaying writes no new journal lines.
                super().lose_chat(chat.chat_id)
            elif entry.get("message_id") not in chat.messages:
                continue  # a message whose post line was cut short
            elif entry["op"] == "delete":
                chat.messages[entry["message_id"]].deleted = True
            elif entry["op"] == "take_down":
                super().take_down(chat.chat_id, entry["message_id"])
            elif entry["op"] == "corrupt":
                super().corrupt(chat.chat_id, entry["message_id"], entry["offset"])

    def _replay_post(self, entry: dict[str, Any]) -> None:
        file = self._files.get(entry["unique_id"])
        if file is None:
            data = (self._files_dir / entry["unique_id"]).read_bytes()
            file = _StoredFile(entry["unique_id"], data, entry["file_name"], entry["mime_type"])
            self._files[file.unique_id] = file
        origin = None
        if entry["origin"] is not None:
            origin_chat = self._chats.get(entry["origin"][0])
            origin = origin_chat.messages.get(entry["origin"][1]) if origin_chat else None
        chat = self._chats[entry["chat_id"]]
        message = _Message(
            chat_id=chat.chat_id,
            message_id=entry["message_id"],
            date=entry["date"],
            # Ages carry over, for the 48-hour delete window.
            posted_at=self._now() - (time.time() - entry["posted_at"]),
            file=file,
            file_id=entry["file_id"],
            caption=entry["caption"],
            forwarded_from=origin,
        )
        chat.messages[message.message_id] = message
        self._losses.hold(message)
        chat.last_message_id = max(chat.last_message_id, message.message_id)
        if message.file_id:
            self._file_ids[message.file_id] = _FileRef(entry["bot_id"], file, chat_id=chat.chat_id)
