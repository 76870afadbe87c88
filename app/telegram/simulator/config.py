"""The simulator's knobs: `SimulatorConfig`, its validation, and test tokens."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

MB = 1000 * 1000
MiB = 1024 * 1024
# What sendDocument takes: 50 MB from api.telegram.org, 2000 MB from a
# `--local` server (telegram-bot-api's README, "local mode").
CLOUD_UPLOAD_BYTES = 50 * MiB
LOCAL_UPLOAD_BYTES = 2000 * MB
SEND_WINDOW = 60.0  # seconds: the per-chat flood limit counts sends over one minute
DOWNLOAD_PIECE = 64 * 1024
MIN_PACED_PIECE = 1024

# The knobs that may change while the simulator runs (everything but the
# tokens and chats, which the state is built from).
# Bot API methods random faults strike (getMe and getChatMember stay clean so
# that startup checks are deterministic), and the rates a method may override.
FAULTABLE_METHODS = ("sendDocument", "getFile", "deleteMessage", "forwardMessage")
# Calls that carry no file and post nothing. The official Bot API server
# neither throttles nor spaces them: its only per-bot guard is a spacing of
# uploads of the same size (tdlib/telegram-bot-api, Client.cpp, on_cmd), and
# nothing else serialises one token's calls. The dispatcher runs them in a
# lane of their own beside a bot's uploads (app/telegram/worker.py), so the
# simulator counts them apart (`BotStats.max_concurrent_small_calls`).
SMALL_METHODS = frozenset(
    {"getMe", "getFile", "deleteMessage", "getChatMember", "getChat", "editMessageCaption"}
)
METHOD_FAULT_KINDS = ("fault_5xx_rate", "fault_429_rate", "fault_drop_rate")

MUTABLE_KNOBS = frozenset(
    {
        "max_concurrent_calls_per_bot",
        "collision_retry_after",
        "sends_per_minute",
        "send_window",
        "latency",
        "upload_bandwidth",
        "download_bandwidth",
        "fault_5xx_rate",
        "fault_drop_rate",
        "fault_download_drop_rate",
        "fault_429_rate",
        "method_fault_rates",
        "random_429_retry_after",
        "seed",
        "max_upload_bytes",
        "max_getfile_bytes",
        "file_path_ttl",
        "delete_window",
        "files_outlive_lost_chats",
        "honour_range",
        "getfile_bandwidth",
        "fault_file_unavailable_rate",
        "upload_spacing",
    }
)

# Telegram's own gateway error page; the client must cope with a non-JSON 5xx.

# --- configuration ------------------------------------------------------------------


@dataclass
class SimulatorConfig:
    """Everything the simulator can be told. Rates are probabilities per call."""

    tokens: list[str]
    chat_ids: list[int]
    # None means no limit. Calls on one token beyond it are answered with a
    # 429, counted apart for small calls (SMALL_METHODS) and every other
    # method (uploads, forwards, pins): not Telegram's rule (the official
    # server refuses only bursts of same-size uploads, see SMALL_METHODS) but
    # the dispatcher's own promise, made loud: at most one upload-lane call
    # and one small call at once per token.
    max_concurrent_calls_per_bot: int | None = 1
    collision_retry_after: int = 30
    # Per bot per chat, over a sliding minute (Telegram: about 20 into one channel).
    sends_per_minute: int | None = None
    # The sliding window of that budget; benchmarks shorten it to run quickly.
    send_window: float = SEND_WINDOW
    latency: float = 0.0
    upload_bandwidth: float | None = None  # bytes/s per connection
    download_bandwidth: float | None = None  # bytes/s per connection
    fault_5xx_rate: float = 0.0
    fault_drop_rate: float = 0.0
    # File downloads only: they drop halfway, Bot API methods are left alone.
    fault_download_drop_rate: float = 0.0
    fault_429_rate: float = 0.0
    # Per Bot API method, rates that replace the ones above for that method:
    # {"sendDocument": {"fault_drop_rate": 0.5}}. Keys: FAULTABLE_METHODS and
    # METHOD_FAULT_KINDS.
    method_fault_rates: dict[str, dict[str, float]] = field(default_factory=dict)
    random_429_retry_after: int = 1
    seed: int | None = None
    # LOCAL_UPLOAD_BYTES in local mode (`local_dir`) unless set otherwise.
    max_upload_bytes: int = CLOUD_UPLOAD_BYTES
    # It is unknown whether Telegram's "20 MB" is 10**6- or 2**20-based; the
    # smaller reading is the stricter test of the 19 MiB chunk size. (The
    # server's source says 2**20: Client.h, MAX_DOWNLOAD_FILE_SIZE = 20 << 20.)
    # Not applied in local mode, which has no download cap (Client.cpp,
    # do_get_file).
    max_getfile_bytes: int = 20 * MB
    # Telegram keeps a file_path valid for "at least one hour". None: forever.
    file_path_ttl: float | None = 3600.0
    # Bots may delete messages younger than 48 hours only.
    delete_window: float = 48 * 3600.0
    # Whether a file stays downloadable once every chat holding it is lost
    # (`lose_chat`). Telegram's Bot API server fetches a file through the
    # message it came from, so a lost chat most likely takes its files with
    # it, if not at once then when their file references expire; nothing
    # documents how soon. False is the pessimistic reading: gone at once.
    files_outlive_lost_chats: bool = False
    # Whether the file endpoint answers `Range: bytes=a-b` with 206. Telegram's
    # file server is a static-file nginx, which does; no Telegram document
    # promises it. False: a server that ignores Range (200, the whole file).
    honour_range: bool = True
    # The official server's spacing of one bot's uploads of the same size
    # (telegram-bot-api's Client.cpp, on_cmd; TelegramRules._space_upload):
    # up to 0.9 s between two equal uploads, and a 429 "retry after 60"
    # once a bot's queue of them runs 5 s ahead. Off by default: the waits
    # would slow every test that uploads equal chunks, and with one call per
    # token at a time the 429 cannot happen (bench/spacing_bench.py measures
    # what the waits cost the service).
    upload_spacing: bool = False
    # False: a document's bytes are dropped once its sendDocument is answered
    # (its size is kept; downloading it answers 404). For ingest benches,
    # which never read back: holding every upload made the simulator's
    # memory grow by each one, and touching that much fresh memory cost it
    # three times the CPU per byte after a gigabyte or so, on the CPUs the
    # service being measured shares with it.
    keep_file_bytes: bool = True
    # A `--local` Bot API server with this working directory (`--dir`, as the
    # server sees it; absolute). Then, as telegram-bot-api does: getFile
    # answers the file's absolute path on the server's disk, in a directory
    # named after the bot's token (Client.cpp: json_store_file, and `dir_`
    # in Client::start_up), having written the file there; no size cap on
    # getFile, 2000 MB on uploads; and no `/file/` route: every path not
    # under /bot is a JSON 404 (HttpConnection.cpp, handle). None: the cloud.
    local_dir: str | None = None
    # Where the files of `local_dir` land on this machine, when the service
    # sees the server's directory elsewhere (a container's volume: the test
    # of TELEGRAM_LOCAL_PATH_MAP). None: at `local_dir` itself.
    local_volume: str | None = None
    # Whether the token's directory keeps the token's ':' (the server's
    # default on a file system that takes it) or writes '~' for it
    # (telegram-bot-api.cpp probes the --dir; Client.cpp start_up).
    allow_colon_in_filenames: bool = True
    # getFile is a download: the server fetches the whole file from
    # Telegram's data centre before it answers (Client.cpp, do_get_file and
    # on_file_download), unless it has it on its disk already (a path it gave
    # and still keeps). Bytes/s of that fetch; None: at once.
    getfile_bandwidth: float | None = None
    # getFile answered "wrong file_id or the file is temporarily unavailable",
    # which the server sends for ANY failed server-side download, "also
    # includes all 5xx and 429 errors" (Client.cpp, on_update_file): a rate
    # of its own, as it is a fault of Telegram's data centres, not of the
    # call. The file is still there.
    fault_file_unavailable_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.local_dir is not None and self.max_upload_bytes == CLOUD_UPLOAD_BYTES:
            self.max_upload_bytes = LOCAL_UPLOAD_BYTES
        self.validate()

    @property
    def local(self) -> bool:
        """Whether this is a `--local` server (absolute paths, no /file/ route)."""
        return self.local_dir is not None

    def validate(self) -> None:
        if not self.tokens:
            raise ValueError("the simulator needs at least one bot token")
        if not self.chat_ids:
            raise ValueError("the simulator needs at least one chat id")
        for name in (
            "fault_5xx_rate",
            "fault_drop_rate",
            "fault_download_drop_rate",
            "fault_429_rate",
            "fault_file_unavailable_rate",
        ):
            rate = getattr(self, name)
            if not _is_number(rate) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be a number between 0 and 1")
        _check_method_fault_rates(self.method_fault_rates)
        _check_number(self, "latency", minimum=0.0)
        _check_number(self, "delete_window", minimum=0.0)
        _check_number(self, "send_window", minimum=0.0, exclusive=True)
        for name in (
            "upload_bandwidth",
            "download_bandwidth",
            "file_path_ttl",
            "getfile_bandwidth",
        ):
            _check_number(self, name, minimum=0.0, exclusive=True, optional=True)
        for name in ("max_concurrent_calls_per_bot", "sends_per_minute"):
            _check_int(self, name, minimum=1, optional=True)
        for name in ("collision_retry_after", "random_429_retry_after"):
            _check_int(self, name, minimum=1)
        for name in ("max_upload_bytes", "max_getfile_bytes"):
            _check_int(self, name, minimum=1)
        _check_int(self, "seed", minimum=None, optional=True)
        _check_bool(self, "files_outlive_lost_chats")
        _check_bool(self, "honour_range")
        _check_bool(self, "upload_spacing")
        _check_bool(self, "keep_file_bytes")
        _check_bool(self, "allow_colon_in_filenames")
        _check_local(self)


def _check_local(config: SimulatorConfig) -> None:
    for name in ("local_dir", "local_volume"):
        value = getattr(config, name)
        if value is not None and (not isinstance(value, str) or not value.startswith("/")):
            raise ValueError(f"{name} must be an absolute path")
    if config.local_volume is not None and config.local_dir is None:
        raise ValueError("local_volume needs local_dir (it is where local_dir's files land)")
    if config.local and not config.keep_file_bytes:
        raise ValueError("a local server writes every file it is asked for: keep_file_bytes")


def _check_method_fault_rates(rates: object) -> None:
    if not isinstance(rates, dict):
        raise ValueError("method_fault_rates must map method names to rates")
    for method, kinds in rates.items():
        if method not in FAULTABLE_METHODS:
            raise ValueError(
                f"method_fault_rates: {method!r} is not one of {', '.join(FAULTABLE_METHODS)}"
            )
        if not isinstance(kinds, dict):
            raise ValueError(f"method_fault_rates[{method!r}] must map fault kinds to rates")
        for kind, rate in kinds.items():
            if kind not in METHOD_FAULT_KINDS:
                raise ValueError(
                    f"method_fault_rates[{method!r}]: {kind!r} is not one of "
                    f"{', '.join(METHOD_FAULT_KINDS)}"
                )
            if not _is_number(rate) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"method_fault_rates[{method!r}][{kind!r}] must be 0 to 1")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_number(
    config: SimulatorConfig,
    name: str,
    *,
    minimum: float,
    exclusive: bool = False,
    optional: bool = False,
) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    too_small = _is_number(value) and (value <= minimum if exclusive else value < minimum)
    if not _is_number(value) or too_small:
        relation = ">" if exclusive else ">="
        raise ValueError(f"{name} must be a number {relation} {minimum}")


def _check_int(
    config: SimulatorConfig, name: str, *, minimum: int | None, optional: bool = False
) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")


def _check_bool(config: SimulatorConfig, name: str) -> None:
    if not isinstance(getattr(config, name), bool):
        raise ValueError(f"{name} must be true or false")


def make_tokens(n: int, first_id: int = 100001) -> list[str]:
    """Deterministic, valid-looking tokens `<id>:<35 chars of [A-Za-z0-9_-]>`."""
    tokens = []
    for bot_id in range(first_id, first_id + n):
        digest = hashlib.sha256(f"teleuploader-simulator-{bot_id}".encode()).digest()
        secret = base64.urlsafe_b64encode(digest).decode("ascii")[:35]
        tokens.append(f"{bot_id}:{secret}")
    return tokens
