"""Everything configurable, in one place.

Settings come from the environment (and an optional `.env` file). The names the
TypeScript predecessor used are accepted as aliases so an existing env file keeps
working. Bot tokens are secrets: they are kept as `BotToken` values whose `repr`
and `str` are masked, so a settings dump or a validation error never prints one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url

from app.config import values as settings_values
from app.config.bot_tokens import BotToken as BotToken
from app.config.bot_tokens import parse_tokens
from app.config.keyring import load_keyring
from app.config.names import names_given, renamed_problem
from app.config.names import retired_settings as retired_settings
from app.config.telegram_limits import CLOUD_API_HOST as CLOUD_API_HOST
from app.config.telegram_limits import CLOUD_GETFILE_CAP as CLOUD_GETFILE_CAP
from app.config.telegram_limits import GETFILE_LIMIT as GETFILE_LIMIT
from app.config.telegram_limits import LOCAL_GETFILE_LIMIT as LOCAL_GETFILE_LIMIT
from app.config.telegram_limits import MAX_CHUNK_SIZE as MAX_CHUNK_SIZE
from app.config.telegram_limits import check_chunk_size, check_local_server, is_cloud

if TYPE_CHECKING:
    from app.sealing.keys import Keyring

MiB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    # --- Telegram -------------------------------------------------------------
    bot_tokens: Annotated[list[BotToken], NoDecode] = Field(
        default_factory=list,
        validation_alias=AliasChoices("BOT_TOKENS", "bot_tokens"),
        description="Comma-separated bot tokens, one asyncio worker each.",
    )
    storage_chat_id: int | None = Field(
        default=None,
        validation_alias=AliasChoices("STORAGE_CHAT_ID", "storage_chat_id"),
        description="The storage channel (the one-chat form of STORAGE_CHAT_IDS).",
    )
    storage_chat_ids: Annotated[list[int], NoDecode] = Field(
        default_factory=list,
        validation_alias=AliasChoices("STORAGE_CHAT_IDS", "storage_chat_ids"),
        description="Comma-separated storage channels; new chunks spread across them.",
    )
    chat_message_limit: int = Field(
        default=500_000,
        ge=0,
        validation_alias=AliasChoices("CHAT_MESSAGE_LIMIT", "chat_message_limit"),
        description="A storage chat whose newest message id reaches this takes no new "
        "writes (another Telegram store's users lost their oldest files past about a "
        "million messages in a channel); 0: no ceiling.",
    )
    telegram_api_base: str = Field(
        default="https://api.telegram.org",
        validation_alias=AliasChoices("TELEGRAM_API_BASE", "telegram_api_base"),
    )
    telegram_local_server: bool = Field(
        default=False,
        validation_alias=AliasChoices("TELEGRAM_LOCAL_SERVER", "telegram_local_server"),
        description="A local Bot API server (--local): getFile answers a path on its disk, "
        "read from the file system this service shares with it; no 20 MiB cap.",
    )
    telegram_local_path_map: Annotated[tuple[str, str] | None, NoDecode] = Field(
        default=None,
        validation_alias=AliasChoices("TELEGRAM_LOCAL_PATH_MAP", "telegram_local_path_map"),
        description="SERVER_DIR:LOCAL_DIR: the local server's --dir, and where this service "
        "sees it (a container's volume).",
    )
    chunk_size: int = Field(
        default=MAX_CHUNK_SIZE,
        gt=0,
        validation_alias=AliasChoices("CHUNK_SIZE", "chunk_size"),
    )
    max_attempts: int = Field(
        default=10, ge=1, le=100, validation_alias=AliasChoices("MAX_ATTEMPTS", "max_attempts")
    )
    sends_per_minute: int = Field(
        default=20,
        ge=0,
        validation_alias=AliasChoices("SENDS_PER_MINUTE", "sends_per_minute"),
        description="Per-bot pacing of sendDocument; 0 turns pacing off.",
    )
    small_call_lane: bool = Field(
        default=True,
        validation_alias=AliasChoices("SMALL_CALL_LANE", "small_call_lane"),
        description="Each bot runs its small calls (getFile, deleteMessage, getChatMember...) "
        "one at a time beside its uploads, so a read need not wait for an upload to end; "
        "false: one call at a time per bot.",
    )
    telegram_floor_bandwidth: int = Field(
        default=256 * 1024,
        gt=0,
        validation_alias=AliasChoices("TELEGRAM_FLOOR_BANDWIDTH", "telegram_floor_bandwidth"),
        description="Bytes/s below which a transfer to Telegram counts as stalled.",
    )
    shutdown_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        validation_alias=AliasChoices("SHUTDOWN_GRACE_SECONDS", "shutdown_grace_seconds"),
    )
    shutdown_delay_seconds: float = Field(
        default=5.0,
        ge=0,
        le=60,
        validation_alias=AliasChoices("SHUTDOWN_DELAY_SECONDS", "shutdown_delay_seconds"),
        description="With other instances serving: how long a stopping instance goes on "
        "serving, with /ready at 503, before it closes its listener, so the proxy's health "
        "check sends new requests elsewhere first. A lone instance stops at once.",
    )

    # --- Storage --------------------------------------------------------------
    database_url: str = Field(
        default="sqlite+aiosqlite:///./teleuploader.db",
        validation_alias=AliasChoices("DATABASE_URL", "database_url"),
    )
    migration_database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("MIGRATION_DATABASE_URL", "migration_database_url"),
        description="Direct connection for migrations (pgbouncer's transaction pool can't).",
    )
    inline_threshold: int = Field(
        default=64 * 1024,
        ge=0,
        validation_alias=AliasChoices("INLINE_THRESHOLD", "inline_threshold"),
        description="Objects up to this many bytes live in the database, not in Telegram.",
    )
    max_upload_size: int = Field(
        default=50 * 1024 * MiB,
        gt=0,
        validation_alias=AliasChoices("MAX_UPLOAD_SIZE", "max_upload_size"),
    )

    # --- Durability -------------------------------------------------------------
    replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        validation_alias=AliasChoices("REPLICAS", "replicas"),
        description="Copies of every chunk, each an upload of its own, in distinct storage "
        "chats where there are enough; 2 is recommended with two or more chats.",
    )
    scrub_period_seconds: float = Field(
        default=7 * 24 * 3600,
        ge=0,
        validation_alias=AliasChoices("SCRUB_PERIOD_SECONDS", "scrub_period_seconds"),
        description="Every chunk copy is checked (getFile) once within this time, spread "
        "evenly; 0 turns the background scrub off (repairs found by reads still run).",
    )
    scrub_read_bytes_per_day: int = Field(
        default=10 * 1024**3,
        ge=0,
        validation_alias=AliasChoices("SCRUB_READ_BYTES_PER_DAY", "scrub_read_bytes_per_day"),
        description="Bytes a day the scrub reads whole and checks against their hashes.",
    )

    trash_retention_seconds: float = Field(
        default=24 * 3600,
        ge=0,
        validation_alias=AliasChoices(
            "TRASH_RETENTION_SECONDS", "TRASH_RETENTION", "trash_retention_seconds"
        ),
        description="Deleted and replaced objects stay restorable this long (GET /api/trash); "
        "0 turns the trash off (deletes are final).",
    )
    snapshot_interval_seconds: float = Field(
        default=3600,
        ge=0,
        validation_alias=AliasChoices(
            "SNAPSHOT_INTERVAL_SECONDS", "SNAPSHOT_INTERVAL", "snapshot_interval_seconds"
        ),
        description="A snapshot of the metadata goes to the storage chats this often, and at a "
        "clean stop (`teleuploader restore` rebuilds a lost database from it); 0 turns "
        "them off.",
    )
    journal_seconds: float = Field(
        default=10,
        ge=0,
        validation_alias=AliasChoices("JOURNAL_SECONDS", "journal_seconds"),
        description="Changes since the last snapshot go to the storage chats in one batch "
        "this often, when something changed (a restore then loses at most this much); 0 "
        "turns the journal off (a restore then ends at the last snapshot).",
    )

    # --- Upload budget and staging spool --------------------------------------
    upload_buffer_chunks: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        validation_alias=AliasChoices("UPLOAD_BUFFER_CHUNKS", "upload_buffer_chunks"),
        description="Chunk buffers in memory across all uploads; default 2 x bots + 2.",
    )
    spool_dir: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SPOOL_DIR", "spool_dir"),
        description="Where acknowledged S3 parts wait for Telegram; default: systemd's "
        "$STATE_DIRECTORY/spool, else next to the SQLite database, else ./spool.",
    )
    spool_max_bytes: int = Field(
        default=8 * 1024 * MiB,
        ge=0,
        validation_alias=AliasChoices("SPOOL_MAX_BYTES", "spool_max_bytes"),
        description="Bytes the spool may hold; 0 turns it off (parts go to Telegram "
        "before they are acknowledged).",
    )

    complete_waits_for: Literal["spool", "telegram"] = Field(
        default="spool",
        validation_alias=AliasChoices("COMPLETE_WAITS_FOR", "complete_waits_for"),
        description="What CompleteMultipartUpload and a tus upload's completion wait for: "
        "`spool` (every part durable on this machine's disk; reads are served from the "
        "spool until the flush) or `telegram` (every part's chunks, every copy, in "
        "Telegram).",
    )
    flush_lag_alert: float = Field(
        default=600.0,
        gt=0,
        validation_alias=AliasChoices("FLUSH_LAG_ALERT", "flush_lag_alert"),
        description="Seconds the oldest spooled byte may wait for Telegram before /ready "
        "says `degraded`.",
    )

    # --- Resumable uploads (tus) ----------------------------------------------
    tus_expiration_seconds: float = Field(
        default=24 * 3600,
        gt=0,
        validation_alias=AliasChoices("TUS_EXPIRATION_SECONDS", "tus_expiration_seconds"),
        description="An unfinished tus upload untouched this long is deleted (Upload-Expires).",
    )
    # --- HTTP -----------------------------------------------------------------
    host: str = Field(default="127.0.0.1", validation_alias=AliasChoices("HOST", "host"))
    port: int = Field(default=4000, ge=1, le=65535, validation_alias=AliasChoices("PORT", "port"))
    public_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PUBLIC_BASE_URL", "public_base_url"),
        description="Base of download URLs given to clients; taken from the request if unset.",
    )
    require_key_for_downloads: bool = Field(
        default=False,
        validation_alias=AliasChoices("REQUIRE_KEY_FOR_DOWNLOADS", "require_key_for_downloads"),
    )
    web_session_hours: float = Field(
        default=12,
        gt=0,
        le=24 * 30,
        validation_alias=AliasChoices("WEB_SESSION_HOURS", "web_session_hours"),
        description="How long a sign-in of the web page lasts.",
    )

    metrics_access: Literal["off", "public", "key"] = Field(
        default="key",
        validation_alias=AliasChoices("METRICS_ACCESS", "metrics_access"),
        description="/metrics: off (404), public, or key (needs an API key).",
    )

    # --- Downloads ------------------------------------------------------------
    # One budget shared by every download in the process (app/store/download_budget.py).
    download_buffer_bytes: int = Field(
        default=64 * MiB,
        gt=0,
        validation_alias=AliasChoices("DOWNLOAD_BUFFER_BYTES", "download_buffer_bytes"),
        description="Bytes fetched from Telegram and not yet sent, across all downloads.",
    )
    download_connections: int = Field(
        default=32,
        ge=1,
        validation_alias=AliasChoices("DOWNLOAD_CONNECTIONS", "download_connections"),
        description="Telegram file downloads open at once, across all downloads.",
    )
    download_stall_seconds: float = Field(
        default=60.0,
        gt=0,
        validation_alias=AliasChoices("DOWNLOAD_STALL_SECONDS", "download_stall_seconds"),
        description="A download whose client takes no byte, or waits for one, this long is ended.",
    )

    # --- S3 API -------------------------------------------------------------
    s3_credentials: Annotated[dict[str, SecretStr], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("S3_CREDENTIALS", "s3_credentials"),
        description="ACCESS_KEY:SECRET pairs, comma-separated. The S3 API is off without one.",
    )
    s3_region: str | None = Field(
        default=None,
        validation_alias=AliasChoices("S3_REGION", "s3_region"),
        description="The only region accepted in signatures; any region if unset.",
    )
    s3_domain: str | None = Field(
        default=None,
        validation_alias=AliasChoices("S3_DOMAIN", "s3_domain"),
        description="Enables virtual-host style requests: <bucket>.<S3_DOMAIN>.",
    )
    # --- Encryption at rest (docs/encryption.md) -------------------------------
    encryption_keys: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("ENCRYPTION_KEYS", "encryption_keys"),
        description="id:base64-32-bytes master keys, comma-separated; the first seals new chunks.",
    )
    encryption_keys_file: str | None = Field(
        default=None,
        validation_alias=AliasChoices("ENCRYPTION_KEYS_FILE", "encryption_keys_file"),
        description="A file of id:base64 keys, one a line (systemd LoadCredential=).",
    )
    # The parsed keyring (app.sealing.keys.Keyring), None without keys.
    _keyring: Any = PrivateAttr(default=None)

    # --- Logging --------------------------------------------------------------
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", validation_alias=AliasChoices("LOG_LEVEL", "log_level")
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto",
        validation_alias=AliasChoices("LOG_FORMAT", "log_format"),
        description="auto: console lines on a terminal, JSON lines otherwise (journald).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("bot_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: Any) -> list[BotToken]:
        if value and all(isinstance(v, BotToken) for v in value):
            return list(value)
        return parse_tokens(settings_values.split_csv(value))

    @field_validator("s3_credentials", mode="before")
    @classmethod
    def _parse_s3_credentials(cls, value: Any) -> dict[str, SecretStr]:
        return settings_values.s3_credentials(value)

    @field_validator("storage_chat_ids", mode="before")
    @classmethod
    def _parse_chat_ids(cls, value: Any) -> list[int]:
        return settings_values.chat_ids(value)

    @field_validator("database_url", "migration_database_url")
    @classmethod
    def _known_database(cls, value: str | None) -> str | None:
        return settings_values.database_url(value)

    @field_validator("telegram_api_base")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("telegram_local_path_map", mode="before")
    @classmethod
    def _parse_path_map(cls, value: Any) -> tuple[str, str] | None:
        return settings_values.local_path_map(value)

    @model_validator(mode="after")
    def _merge_and_check(self) -> Settings:
        unique: dict[int, BotToken] = {}
        for token in self.bot_tokens:
            previous = unique.get(token.bot_id)
            if previous is not None and previous != token:
                raise ValueError(f"two different tokens are given for bot {token.bot_id}")
            unique[token.bot_id] = token
        self.bot_tokens = list(unique.values())
        # Both set: two answers to one question; refuse rather than guess.
        both = self.storage_chat_id is not None and bool(self.storage_chat_ids)
        if both and self.storage_chat_ids != [self.storage_chat_id]:
            raise ValueError(
                "STORAGE_CHAT_ID and STORAGE_CHAT_IDS are both set and disagree: "
                "keep STORAGE_CHAT_IDS (the list of every storage chat) only"
            )
        check_local_server(
            local=self.telegram_local_server,
            api_base=self.telegram_api_base,
            path_map=self.telegram_local_path_map,
        )
        check_chunk_size(self.chunk_size, local=self.telegram_local_server)
        self._keyring = load_keyring(self.encryption_keys, self.encryption_keys_file)
        return self

    @property
    def telegram_api_is_cloud(self) -> bool:
        """Whether TELEGRAM_API_BASE is Telegram's own server."""
        return is_cloud(self.telegram_api_base)

    def keyring(self) -> Keyring | None:
        """The master keys (app.sealing.keys.Keyring), or None: encryption off."""
        keyring: Keyring | None = self._keyring
        return keyring

    @property
    def bot_ids(self) -> list[int]:
        return [token.bot_id for token in self.bot_tokens]

    @property
    def chat_ids(self) -> list[int]:
        """Every storage chat: STORAGE_CHAT_IDS, or STORAGE_CHAT_ID alone."""
        if self.storage_chat_ids:
            return list(self.storage_chat_ids)
        return [] if self.storage_chat_id is None else [self.storage_chat_id]

    @property
    def upload_buffers(self) -> int:
        """UPLOAD_BUFFER_CHUNKS, or enough for every bot to send one chunk while
        another is being filled for it, plus two."""
        if self.upload_buffer_chunks is not None:
            return self.upload_buffer_chunks
        return 2 * max(1, len(self.bot_tokens)) + 2

    @property
    def spool_path(self) -> Path:
        if self.spool_dir:
            return Path(self.spool_dir)
        state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
        if state:
            return Path(state) / "spool"
        url = make_url(self.database_url)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            return Path(url.database).resolve().parent / "spool"
        return Path("spool").resolve()


class SettingsError(Exception):
    """Settings are invalid; the message is one line naming the variable."""


_FIELD_TO_ENV = {
    "bot_tokens": "BOT_TOKENS",
    "storage_chat_id": "STORAGE_CHAT_ID",
    "storage_chat_ids": "STORAGE_CHAT_IDS",
    "telegram_api_base": "TELEGRAM_API_BASE",
    "telegram_local_path_map": "TELEGRAM_LOCAL_PATH_MAP",
    "chunk_size": "CHUNK_SIZE",
    "max_attempts": "MAX_ATTEMPTS",
    "s3_credentials": "S3_CREDENTIALS",
    "database_url": "DATABASE_URL",
    "migration_database_url": "MIGRATION_DATABASE_URL",
}


def load_settings(**overrides: Any) -> Settings:
    """Build Settings, turning a validation error into one clear line."""
    from pydantic import ValidationError

    renamed = renamed_problem(names_given())
    if renamed is not None:
        raise SettingsError(renamed)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = [str(part) for part in error["loc"]]
            name = loc[0] if loc else ""
            env = _FIELD_TO_ENV.get(name, name.upper())
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{env}: {message}" if env else message)
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
