"""What `teleuploader check --deep` found: each bot's trials of the storage
chats (app/cli/deep_check.py measures them), the suggestions made of them
(app/cli/deep_advice.py), and the report `--json` prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RateLimit:
    """A 429 Telegram answered, and the wait it asked for."""

    method: str
    chat_id: int | None
    retry_after: float


@dataclass
class DocumentTrial:
    """One test document's way there and back; None: not reached."""

    size: int
    upload_seconds: float | None = None
    getfile_seconds: float | None = None
    download_seconds: float | None = None
    # "honoured" (206, the bytes asked for) or "ignored" (200, the whole file).
    range: str | None = None
    intact: bool | None = None
    deleted: bool | None = None
    problem: str | None = None


@dataclass
class ChatTrial:
    chat_id: int
    rights: dict[str, bool | str] = field(default_factory=dict)
    small: DocumentTrial | None = None
    large: DocumentTrial | None = None
    problem: str | None = None


@dataclass
class BotTrial:
    bot_id: int
    username: str | None = None
    latency_seconds: float | None = None
    chats: list[ChatTrial] = field(default_factory=list)
    rate_limits: list[RateLimit] = field(default_factory=list)
    problem: str | None = None

    def _large(self) -> list[DocumentTrial]:
        return [chat.large for chat in self.chats if chat.large is not None]

    @property
    def upload_bandwidth(self) -> float | None:
        """Bytes/s of its CHUNK_SIZE uploads, taken together."""
        timed = [(d.size, d.upload_seconds) for d in self._large() if d.upload_seconds]
        return _rate(timed)

    @property
    def download_bandwidth(self) -> float | None:
        """Bytes/s of its CHUNK_SIZE downloads (after getFile), taken together."""
        timed = [(d.size, d.download_seconds) for d in self._large() if d.download_seconds]
        return _rate(timed)

    @property
    def problems(self) -> list[str]:
        found = [self.problem] if self.problem else []
        for chat in self.chats:
            found += [f"chat {chat.chat_id}: {chat.problem}"] if chat.problem else []
            for trial in (chat.small, chat.large):
                if trial is not None and trial.problem:
                    found.append(f"chat {chat.chat_id}, {trial.size} bytes: {trial.problem}")
        return found


def _rate(timed: Sequence[tuple[int, float | None]]) -> float | None:
    seconds = sum(s for _, s in timed if s)
    return sum(size for size, _ in timed) / seconds if seconds > 0 else None


@dataclass
class Suggestion:
    setting: str
    value: str
    why: str


@dataclass
class DeepReport:
    server: str  # scheme and host of TELEGRAM_API_BASE: never a token
    local_server: bool
    chunk_size: int
    bots: list[BotTrial]
    suggestions: list[Suggestion] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(bot.problems for bot in self.bots)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for bot, row in zip(self.bots, data["bots"], strict=True):
            row["upload_bytes_per_second"] = bot.upload_bandwidth
            row["download_bytes_per_second"] = bot.download_bandwidth
        data["ok"] = self.ok
        return data
