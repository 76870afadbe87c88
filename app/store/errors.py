"""Errors of the object store, each with what a client should be told."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

# What the Telegram layer raises passes through the store unchanged: the HTTP
# layers map it (app.http.shared.errors) by these names, so that they depend on the
# store alone (api/s3 -> store -> telegram/db, checked by import-linter).
from app.telegram.errors import BotUnusable as BotUnusable
from app.telegram.errors import ChatsFull as ChatsFull
from app.telegram.errors import DispatcherClosed as DispatcherClosed
from app.telegram.errors import NoUsableBot as NoUsableBot
from app.telegram.errors import PermanentError as PermanentError
from app.telegram.errors import RateLimited as RateLimited
from app.telegram.errors import TelegramError as TelegramError
from app.telegram.errors import TransientError as TransientError


class StoreError(Exception):
    """Base of object-store errors; `str()` is safe to show a client."""


class UploadTooLarge(StoreError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the upload is larger than the limit of {limit} bytes")
        self.limit = limit


class ObjectNotFound(StoreError):
    pass


class NotOwner(StoreError):
    """The caller may change only the objects its API key uploaded, and this
    one belongs to another key (or to none): nothing was changed."""


class ContentUnavailable(StoreError):
    """A chunk could not be read back from Telegram (after retries)."""


class ObjectDamaged(ContentUnavailable):
    """No intact copy of a chunk of the object is left (every one is gone from
    Telegram or holds wrong bytes): it is lost, and never served."""


class DownloadStalled(ContentUnavailable):
    """No byte came for the stall timeout (Telegram slow or unreachable, or every
    download connection busy): the download is aborted."""


class InstanceFenced(StoreError):
    """Another instance took this one for dead (it stalled past the
    heartbeat) and took over its work: what it had under way is refused
    until it has registered anew. Retry after `retry_after` seconds."""

    def __init__(self, *, retry_after: int) -> None:
        super().__init__(
            "this instance was taken for dead by another one after a stall and "
            "is registering anew; the upload was not stored, retry it"
        )
        self.retry_after = retry_after


class ContentPending(StoreError):
    """The object's bytes are still in another instance's spool, on their way
    to Telegram (app.store.pending): retry after `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooManyFailedChecks(StoreError):
    """The client failed too many key checks lately (app.store.key_failures):
    its key is not checked; retry after `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ClientStalled(StoreError):
    """The client took no byte for the stall timeout: its download was dropped."""


class EncryptionKeyUnavailable(StoreError):
    """An object is sealed under a master key that is not configured: it
    cannot be opened here, and is never served as its sealed bytes."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"the object is encrypted under master key {key_id!r}, which is not configured "
            "(ENCRYPTION_KEYS)"
        )
        self.key_id = key_id


class CustomerKeyRequired(EncryptionKeyUnavailable):
    """An object written with a customer key (S3 SSE-C) was asked for
    without one: only its owner's key opens it."""

    def __init__(self) -> None:
        StoreError.__init__(
            self,
            "The object was stored using a form of Server Side Encryption. The correct "
            "parameters must be provided to retrieve the object.",
        )
        self.key_id = "~customer"


class CustomerKeyMismatch(EncryptionKeyUnavailable):
    """The customer key given is not the one the object was written with."""

    def __init__(self) -> None:
        StoreError.__init__(self, "The customer key given does not open the object.")
        self.key_id = "~customer"


def pass_failure(exc: BaseException, event: str) -> str:
    """How a background pass's status (the scrub, the sealing migration)
    says it failed: a stable sentence by kind, never the exception's text,
    which may quote SQL, paths or Telegram's words; the log line `event`
    has the detail."""
    if isinstance(exc, TelegramError):
        kind = "Telegram failed"
    elif isinstance(exc, SQLAlchemyError | ConnectionError | TimeoutError):
        kind = "the database failed"
    else:
        kind = "an internal error stopped it"
    return f"the pass did not finish: {kind} (the service's log has the detail: {event})"
