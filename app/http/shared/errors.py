"""The one error table: what a client is told when the layers below fail.

Both APIs render the same decision: the native API as JSON
(`app.http.api.errors`), the S3 API as an `<Error>` document (`app.http.s3.errors`).
Only the HTTP layer knows this table; the store, Telegram and database layers
raise their own types and never import HTTP.

The rules:

* 503 + Retry-After means "the same request will work later": Telegram is
  rate-limiting or failing every bot (Retry-After from the bots' cooldowns),
  no bot is usable, the service is shutting down, or the database cannot be
  *reached*. A database error that is not a connection failure is never 503:
  SDKs re-upload whole bodies on 503, which cannot help.
* 502 is a permanent refusal by Telegram, with Telegram's description
  (tokens scrubbed).
* 507 means nothing new can be stored until an operator adds a storage
  chat: every one holds CHAT_MESSAGE_LIMIT messages. Not 503: no retry helps.
* 400 is a value the database refused as malformed (DataError, or SQLSTATE
  class 22): the input was wrong, although validation should have caught it
  earlier.
* Everything else is a 500 whose cause is logged, never shown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import structlog
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.store.errors import (
    BotUnusable,
    ChatsFull,
    ContentPending,
    ContentUnavailable,
    CustomerKeyMismatch,
    CustomerKeyRequired,
    DispatcherClosed,
    EncryptionKeyUnavailable,
    InstanceFenced,
    NoUsableBot,
    ObjectDamaged,
    ObjectNotFound,
    PermanentError,
    RateLimited,
    StoreError,
    TelegramError,
    TooManyFailedChecks,
    TransientError,
    UploadTooLarge,
)

log = structlog.get_logger("app.http.errors")

#: Retry-After (seconds) when the database cannot be reached.
DATABASE_RETRY_AFTER = 5
#: Retry-After when the service is shutting down (another instance, or this
#: one restarted, takes the request).
SHUTDOWN_RETRY_AFTER = 5
#: Retry-After when no bot is usable (tokens revoked); while the bots are still
#: being checked at startup the dispatcher estimates a shorter one.
NO_BOT_RETRY_AFTER = 30
#: Retry-After when Telegram failed and the dispatcher gave no estimate.
STORAGE_RETRY_AFTER = 5
#: Retry-After when a chunk could not be read back from Telegram.
READ_RETRY_AFTER = 5
#: Retry-After when an object's master key is not configured (an operator
#: has to act: not soon).
KEY_RETRY_AFTER = 300

# Postgres SQLSTATEs of a connection that failed or went away: class 08
# (connection exception), the server shutting down or starting (57P01-57P03)
# and too many connections (53300).
_CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# SQLite: another writer holds the database past busy_timeout, or the file is
# out of reach. Like a connection failure, the same request works later.
_SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file", "disk i/o error")
# A bot token: the bot id, a colon and the secret.
_TOKEN = re.compile(r"\b\d{3,}:[A-Za-z0-9_-]{20,}")


@dataclass(frozen=True, slots=True)
class Failure:
    """What a client is told: the status, the native API's error name, the S3
    code (and its status where S3 differs), a message safe to show, and how
    many seconds to wait before retrying (503 and 429 only)."""

    status: int
    error: str
    s3_code: str
    message: str
    retry_after: int | None = None
    s3_status: int | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


INTERNAL_ERROR = Failure(
    500, "internal_error", "InternalError", "an internal error occurred; see the logs"
)


def failure_for(exc: BaseException, *, path: str = "") -> Failure | None:
    """The answer to `exc`, or None when it is not a store, Telegram or
    database error (the API answers it itself, or as an internal error).
    Logs what an operator needs: the cause of every 5xx but a rate limit."""
    if isinstance(exc, StoreError):
        return _store_failure(exc, path)
    if isinstance(exc, TelegramError):
        return _telegram_failure(exc, path)
    if isinstance(exc, DBAPIError | PoolTimeout | ConnectionError):
        return _database_failure(exc, path)
    return None


def retry_after_seconds(seconds: float | None, default: int) -> int:
    """A Retry-After value: whole seconds, rounded up, at least 1."""
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return default
    return max(1, math.ceil(seconds))


def scrub_tokens(text: str) -> str:
    """`text` with anything shaped like a bot token masked (the client already
    scrubs its own token; this keeps any other out of a response)."""
    return _TOKEN.sub("<token>", text)


def _store_failure(exc: StoreError, path: str) -> Failure:
    if isinstance(exc, ObjectNotFound):
        return Failure(404, "not_found", "NoSuchKey", str(exc) or "the object does not exist")
    if isinstance(exc, UploadTooLarge):
        return Failure(413, "payload_too_large", "EntityTooLarge", str(exc), s3_status=400)
    # Before EncryptionKeyUnavailable, their base: the client's own key (S3
    # SSE-C) is missing or wrong, as AWS answers it.
    if isinstance(exc, CustomerKeyRequired):
        return Failure(400, "customer_key_required", "InvalidRequest", str(exc))
    if isinstance(exc, CustomerKeyMismatch):
        return Failure(403, "customer_key_mismatch", "AccessDenied", "Access Denied")
    if isinstance(exc, EncryptionKeyUnavailable):
        # 503: the data is intact; it comes back once the operator puts the
        # master key back into ENCRYPTION_KEYS (logged by the store, by id).
        return Failure(
            503,
            "encryption_key_unavailable",
            "EncryptionKeyUnavailable",
            str(exc),
            KEY_RETRY_AFTER,
        )
    if isinstance(exc, InstanceFenced):
        return Failure(503, "instance_fenced", "ServiceUnavailable", str(exc), exc.retry_after)
    if isinstance(exc, ContentPending):
        return Failure(503, "content_pending", "SlowDown", str(exc), exc.retry_after)
    if isinstance(exc, TooManyFailedChecks):
        # S3 has no 429: SlowDown is what its clients back off on.
        return Failure(
            429, "too_many_requests", "SlowDown", str(exc), exc.retry_after, s3_status=503
        )
    if isinstance(exc, ObjectDamaged):
        # Not 503: no retry brings a lost chunk back (docs: "Durability").
        log.error("object_damaged", path=path, error=str(exc))
        return Failure(
            502,
            "object_damaged",
            "ObjectDamaged",
            f"the object is damaged and cannot be served: {scrub_tokens(str(exc))}",
        )
    if isinstance(exc, ContentUnavailable):
        log.warning("content_unavailable", path=path, error=str(exc))
        return Failure(
            503,
            "content_unavailable",
            "ServiceUnavailable",
            f"the content cannot be read from Telegram right now: {scrub_tokens(str(exc))}",
            READ_RETRY_AFTER,
        )
    log.error("store_error", path=path, exc_info=exc)
    return INTERNAL_ERROR


def _telegram_failure(exc: TelegramError, path: str) -> Failure:
    description = scrub_tokens(str(exc))
    if isinstance(exc, DispatcherClosed):
        return Failure(
            503,
            "shutting_down",
            "ServiceUnavailable",
            "the service is shutting down; retry shortly",
            SHUTDOWN_RETRY_AFTER,
        )
    if isinstance(exc, ChatsFull):
        log.error("storage_chats_full", path=path, error=description)
        return Failure(507, "storage_full", "StorageFull", description)
    if isinstance(exc, NoUsableBot | BotUnusable):
        log.warning("storage_unavailable", path=path, error=description)
        return Failure(
            503,
            "storage_unavailable",
            "ServiceUnavailable",
            f"no Telegram bot can store or read files right now: {description}",
            retry_after_seconds(exc.pool_wait, NO_BOT_RETRY_AFTER),
        )
    if isinstance(exc, RateLimited):
        # Every attempt was used up, the last on a 429: the bots' cooldowns
        # say when the pool takes work again.
        wait = exc.pool_wait if exc.pool_wait is not None else exc.retry_after
        return Failure(
            503,
            "rate_limited",
            "SlowDown",
            f"Telegram is rate-limiting the bots: {description}",
            retry_after_seconds(wait, STORAGE_RETRY_AFTER),
        )
    if isinstance(exc, TransientError):
        log.warning("telegram_unavailable", path=path, error=description)
        return Failure(
            503,
            "telegram_unavailable",
            "ServiceUnavailable",
            f"Telegram failed every attempt: {description}",
            retry_after_seconds(exc.pool_wait, STORAGE_RETRY_AFTER),
        )
    status = exc.status if isinstance(exc, PermanentError) else None
    log.warning("telegram_refused", path=path, error=description, telegram_status=status)
    return Failure(502, "telegram_error", "InternalError", f"Telegram refused: {description}")


def _database_failure(exc: BaseException, path: str) -> Failure:
    if is_connection_failure(exc):
        # The cause (the driver's message) goes to the log, not the client.
        log.warning(
            "database_unavailable", path=path, error=type(exc).__name__, cause=_cause_of(exc)
        )
        return Failure(
            503,
            "database_unavailable",
            "ServiceUnavailable",
            "the database cannot be reached right now; try again shortly",
            DATABASE_RETRY_AFTER,
        )
    if isinstance(exc, DataError) or (_sqlstate(exc) or "").startswith("22"):
        # A value the database refused (too long, out of range; SQLSTATE
        # class 22, which SQLAlchemy's asyncpg adapter raises as a plain
        # DBAPIError): the input.
        # Validation should have refused it before; the log says where not.
        log.warning("database_refused_value", path=path, cause=_cause_of(exc))
        return Failure(
            400,
            "invalid_request",
            "InvalidArgument",
            "a value of the request is too long or malformed for storage",
        )
    log.error("database_error", path=path, cause=_cause_of(exc), exc_info=exc)
    return INTERNAL_ERROR


def is_connection_failure(exc: BaseException) -> bool:
    """Whether a database error means the database could not be reached or
    the connection was lost (the same request works later), as opposed to an
    error of the statement or transaction itself."""
    if isinstance(exc, PoolTimeout | ConnectionError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated or isinstance(exc, InterfaceError):
        return True
    orig = exc.orig
    if isinstance(orig, OSError):
        return True
    sqlstate = _sqlstate(exc)
    if sqlstate is not None:
        return sqlstate.startswith("08") or sqlstate in _CONNECTION_SQLSTATES
    if isinstance(exc, OperationalError):
        message = str(orig).lower()
        return any(sign in message for sign in _SQLITE_UNAVAILABLE)
    return False


def _sqlstate(exc: BaseException) -> str | None:
    """Postgres' SQLSTATE of a database error (None on SQLite)."""
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return sqlstate if isinstance(sqlstate, str) else None


def _cause_of(exc: BaseException) -> str:
    """The driver's own message, one line, for the log."""
    orig = getattr(exc, "orig", None) or exc
    text = f"{type(orig).__name__}: {orig}".splitlines()
    return text[0][:500] if text else type(orig).__name__
