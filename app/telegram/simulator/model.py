"""The simulator's records: Bot API errors, statistics, bots, chats, messages, files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# --- errors and statistics ---------------------------------------------------------


class ApiError(Exception):
    """A Bot API error response: `{"ok": false, "error_code": ..., "description": ...}`."""

    def __init__(self, status: int, description: str, *, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after

    @classmethod
    def too_many_requests(cls, retry_after: int) -> ApiError:
        return cls(429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after)

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return body


class SimulatedDrop(Exception):
    """Raised mid-response so that the server closes the connection (a fault)."""


OVERLAPS_KEPT = 20


@dataclass
class BotStats:
    """What one bot's token has been asked and answered since the last reset."""

    calls: dict[str, int] = field(default_factory=dict)  # by Bot API method
    bytes_received: int = 0  # request bodies of method calls, as read off the wire
    bytes_sent: int = 0  # file bytes served by downloads
    max_concurrent_calls: int = 0  # Bot API method calls in flight at once, any method
    max_concurrent_uploads: int = 0  # sendDocument calls in flight at once
    # Of the calls in flight at once, the small ones (config.SMALL_METHODS),
    # and all the others (uploads, forwards, pins): the dispatcher runs at
    # most one of each per token.
    max_concurrent_small_calls: int = 0
    max_concurrent_posting_calls: int = 0
    # Each call that arrived while another ran on the token, as "method
    # during method(s) (seconds into the oldest)", the first OVERLAPS_KEPT:
    # what a test that finds two calls at once says they were.
    overlaps: list[str] = field(default_factory=list)
    rate_limited: int = 0  # 429s given, for any reason
    faults_injected: int = 0  # random 5xx, 429 and drops
    errors: dict[int, int] = field(default_factory=dict)  # error responses by status
    downloads: int = 0
    max_concurrent_downloads: int = 0
    # Seconds getFile calls spent downloading the file on the server's side
    # before they answered (`getfile_bandwidth`).
    getfile_download_seconds: float = 0.0
    # Uploads held back by the same-size spacing (`upload_spacing`), and how long.
    spaced_uploads: int = 0
    spacing_wait_seconds: float = 0.0
    # Gauges, as of the snapshot: what is running right now.
    calls_in_flight: int = 0
    uploads_in_flight: int = 0
    downloads_in_flight: int = 0


# --- state --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Post:
    """One message a bot posted into a chat (sent or forwarded), for tests
    that count posts per (bot, chat) over time."""

    bot_id: int
    chat_id: int
    message_id: int
    posted_at: float  # on the simulator's monotonic clock


@dataclass
class _Bot:
    bot_id: int
    token: str
    revoked: bool = False
    calls_in_flight: int = 0
    uploads_in_flight: int = 0
    small_calls_in_flight: int = 0
    downloads_in_flight: int = 0
    # The calls in flight now, with when each arrived (for `BotStats.overlaps`).
    running: list[_Call] = field(default_factory=list)
    stats: BotStats = field(default_factory=BotStats)

    def info(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": f"Simulated bot {self.bot_id}",
            "username": f"sim{self.bot_id}_bot",
        }


class ReceivedBytes:
    """A file's bytes as they arrived, in pieces; `_StoredFile.data` joins
    them into one `bytes` the first time the file is read whole, and keeps
    that. Most files an upload bench or test sends are never read back;
    joining each at once cost the simulator a pass over fresh memory per
    upload, on the CPUs the service shares with it."""

    __slots__ = ("_pieces", "_size")

    def __init__(self, pieces: list[memoryview]) -> None:
        self._pieces = pieces
        self._size = sum(len(piece) for piece in pieces)

    def __len__(self) -> int:
        return self._size

    def joined(self) -> bytes:
        return b"".join(self._pieces)


NOT_KEPT = "the simulator keeps no file bytes (--discard-file-bytes)"


class BytesNotKept(KeyError):
    """The simulator was told not to keep file bytes (`keep_file_bytes` off)."""


class DiscardedBytes:
    """What is left of a file whose bytes were not kept: its size."""

    __slots__ = ("_size",)

    def __init__(self, size: int) -> None:
        self._size = size

    def __len__(self) -> int:
        return self._size


@dataclass(eq=False)
class _StoredFile:
    """One file on Telegram's side, shared by every message and file_id of it."""

    unique_id: str
    # Changed only by `corrupt` (and `swap_files`): every message and file_id of the file then
    # serves the damaged bytes, as damage on Telegram's side would. (`data` also puts the
    # joined bytes of a ReceivedBytes here: the same bytes.)
    content: bytes | ReceivedBytes | DiscardedBytes
    file_name: str
    mime_type: str

    @property
    def size(self) -> int:
        return len(self.content)

    @property
    def kept(self) -> bool:
        return not isinstance(self.content, DiscardedBytes)

    @property
    def data(self) -> bytes:
        if isinstance(self.content, DiscardedBytes):
            raise BytesNotKept(NOT_KEPT)
        if isinstance(self.content, ReceivedBytes):
            self.content = self.content.joined()
        return self.content


@dataclass
class _Message:
    chat_id: int
    message_id: int
    date: int
    posted_at: float  # on the simulator's monotonic clock, for the delete window
    file: _StoredFile
    file_id: str  # the file_id of the bot that posted (or forwarded) it
    caption: str | None
    forwarded_from: _Message | None = None
    deleted: bool = False


@dataclass
class _Chat:
    chat_id: int
    title: str
    last_message_id: int = 0
    messages: dict[int, _Message] = field(default_factory=dict)
    # Pinned message ids, oldest pin first: getChat's pinned_message is the
    # most recent pin still standing.
    pinned: list[int] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"id": self.chat_id, "title": self.title, "type": "channel"}


@dataclass(frozen=True)
class _FileRef:
    """What a file_id or a file_path resolves to: a file, for one bot only."""

    bot_id: int
    file: _StoredFile
    issued_at: float = 0.0
    # The chat of the message a file_id came from (its server-side
    # downloads go through it); None: not known (a journal's replay).
    chat_id: int | None = None


@dataclass(frozen=True)
class _Upload:
    """One file part of a multipart request."""

    filename: str
    content_type: str
    data: ReceivedBytes


@dataclass
class _Params:
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, _Upload] = field(default_factory=dict)


@dataclass
class _Call:
    """One Bot API method call while it is in flight."""

    bot_id: int
    method: str
    collided: bool = False  # arrived while the token had its limit of calls in flight
    arrived: float = 0.0  # on the simulator's monotonic clock
