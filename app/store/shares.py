"""Share links: a file or a folder handed out under limits that its owner
controls, checked at every request (docs/http-api.md, "Share links").

What a share is and may become:

* live until revoked (for good), or until its owner key is revoked;
* expired once `expires_at` has passed, exhausted once `max_downloads`
  downloads were counted: both until the owner extends or raises them;
* unavailable while what it names is not there (a trashed file: restoring
  it brings the share back, unless it expired meanwhile).

Counting (the rule docs/http-api.md states): a download counts once, when
its bytes start. A download is a *session*: the requests that carry the
same session key (the share page's cookie, or else the client's address
and User-Agent) for the same item (the file, one file of a folder, or the
folder's zip). It lasts until SESSION_IDLE passes without a request,
SESSION_MAX_AGE since it began, or it has sent SESSION_BYTES_FACTOR times
the item's size; the next request then opens, and counts, a new one. A
request of a live session is served while the share is live, even when the
share's count has since been used up: the player that counted it keeps
seeking. Page views and HEAD requests send no bytes and never count.

Wrong passwords are limited per share and per client address, at most
PASSWORD_FAILURES_ALLOWED in PASSWORD_WINDOW, in the database (every
instance sees them): past that, 429 until the oldest leaves the window,
the right password included.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Final

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.listing import ListedObject
from app.db.models import SHARE_TOKEN_LENGTH
from app.db.retry import in_transaction
from app.db.session import session_scope
from app.db.shares import NewShare, Opened, SessionRules, ShareRepository, ShareRow
from app.db.types import utcnow
from app.store.buckets import BucketStore
from app.store.listing import Listing
from app.store.object_info import ObjectInfo
from app.store.service import ObjectStore
from app.store.share_passwords import Passwords, unlock_cookie, unlocked

__all__ = [
    "MAX_FOLDER_FILES",
    "Opened",
    "PasswordCheck",
    "ShareChanges",
    "ShareInfo",
    "ShareState",
    "ShareStore",
    "ShareTarget",
]

log = structlog.get_logger("app.store.shares")

#: A download session ends after this long without a request ...
SESSION_IDLE: Final = timedelta(hours=1)
#: ... this long after it began ...
SESSION_MAX_AGE: Final = timedelta(hours=24)
#: ... or once it has sent this many times the item's size.
SESSION_BYTES_FACTOR: Final = 3
#: Wrong passwords allowed per share, and per client address, in the window.
PASSWORD_FAILURES_ALLOWED: Final = 10
PASSWORD_WINDOW: Final = timedelta(minutes=10)
#: How long a browser's unlock cookie works.
UNLOCK_LIFETIME: Final = timedelta(hours=24)
#: Files a folder's zip may hold (its listing is read whole before the first byte).
MAX_FOLDER_FILES: Final = 10_000
_LIST_PAGE = 1000


class ShareState(Enum):
    ACTIVE = "active"
    EXPIRED = "expired"
    EXHAUSTED = "exhausted"
    REVOKED = "revoked"


@dataclass(frozen=True, slots=True)
class ShareTarget:
    """What a share names: a file by its public id, or a folder by its key
    prefix (ending in "/"), in `bucket`."""

    bucket: str
    public_id: str | None = None
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class ShareInfo:
    """A share as the HTTP layer sees it: never its password's hash."""

    id: int
    token: str
    owner_key_id: int
    owner_name: str
    target: ShareTarget
    disposition: str
    has_password: bool
    created_at: datetime
    expires_at: datetime | None
    max_downloads: int | None
    downloads: int
    last_download_at: datetime | None
    revoked: bool
    # For the password's checks only (app.store.share_passwords).
    _password_hash: str | None = field(repr=False, default=None)

    @property
    def is_folder(self) -> bool:
        return self.target.prefix is not None

    def state(self, now: datetime | None = None) -> ShareState:
        now = now or utcnow()
        if self.revoked:
            return ShareState.REVOKED
        if self.expires_at is not None and self.expires_at <= now:
            return ShareState.EXPIRED
        if self.max_downloads is not None and self.downloads >= self.max_downloads:
            return ShareState.EXHAUSTED
        return ShareState.ACTIVE


def _info(row: ShareRow) -> ShareInfo:
    return ShareInfo(
        id=row.id,
        token=row.token,
        owner_key_id=row.owner_key_id,
        owner_name=row.owner_name,
        target=ShareTarget(row.bucket, row.public_id, row.prefix),
        disposition=row.disposition,
        has_password=row.password_hash is not None,
        created_at=row.created_at,
        expires_at=row.expires_at,
        max_downloads=row.max_downloads,
        downloads=row.downloads,
        last_download_at=row.last_download_at,
        revoked=row.revoked_at is not None or row.owner_revoked,
        _password_hash=row.password_hash,
    )


_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class ShareChanges:
    """What a PATCH changes; a field left at _UNSET stays as it is, None
    removes the limit (no expiry, no download limit, no password)."""

    expires_at: datetime | None = _UNSET
    max_downloads: int | None = _UNSET
    password: str | None = _UNSET
    disposition: str = _UNSET

    @staticmethod
    def unset() -> Any:
        return _UNSET


class PasswordCheck(Enum):
    NOT_NEEDED = "not_needed"
    RIGHT = "right"
    WRONG = "wrong"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class Limited:
    """Too many wrong passwords: try again in `retry_after` seconds."""

    retry_after: int


class ShareStore:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        store: ObjectStore,
        buckets: BucketStore,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._store = store
        self._buckets = buckets
        self.passwords = Passwords()

    # --- the owner's side ---------------------------------------------------------

    async def create(
        self,
        owner_key_id: int,
        target: ShareTarget,
        *,
        expires_at: datetime | None,
        max_downloads: int | None,
        password: str | None,
        disposition: str,
    ) -> ShareInfo:
        password_hash = None if password is None else await self.passwords.hash(password)
        new = NewShare(
            # 256 random bits, from the OS: nothing in it comes from the file.
            token=secrets.token_urlsafe(32),
            owner_key_id=owner_key_id,
            bucket=target.bucket,
            public_id=target.public_id,
            prefix=target.prefix,
            disposition=disposition,
            password_hash=password_hash,
            created_at=utcnow(),
            expires_at=expires_at,
            max_downloads=max_downloads,
        )

        async def create(session: AsyncSession) -> ShareRow:
            return await ShareRepository(session).create(new)

        share = _info(await in_transaction(self._sessionmaker, create))
        log.info("share_created", share_id=share.id, folder=share.is_folder)
        return share

    async def list(
        self, owner_key_id: int | None, *, after: int | None = None, limit: int = 100
    ) -> list[ShareInfo]:
        """Shares not revoked, newest first (only `owner_key_id`'s when given)."""
        async with session_scope(self._sessionmaker) as session:
            rows = await ShareRepository(session).list(
                owner_key_id=owner_key_id, after=after, limit=limit
            )
        return [_info(row) for row in rows]

    async def get(self, share_id: int) -> ShareInfo | None:
        """The share with this id, unless it was revoked."""
        async with session_scope(self._sessionmaker) as session:
            row = await ShareRepository(session).get(share_id)
        return None if row is None or row.revoked_at is not None else _info(row)

    async def change(self, share_id: int, changes: ShareChanges) -> ShareInfo | None:
        """Apply `changes`; None if the share is revoked or was never there."""
        values: dict[str, Any] = {}
        if changes.expires_at is not _UNSET:
            values["expires_at"] = changes.expires_at
        if changes.max_downloads is not _UNSET:
            values["max_downloads"] = changes.max_downloads
        if changes.disposition is not _UNSET:
            values["disposition"] = changes.disposition
        if changes.password is not _UNSET:
            values["password_hash"] = (
                None if changes.password is None else await self.passwords.hash(changes.password)
            )

        async def change(session: AsyncSession) -> ShareRow | None:
            return await ShareRepository(session).change(share_id, values)

        row = await in_transaction(self._sessionmaker, change)
        if row is not None:
            log.info("share_changed", share_id=share_id, fields=sorted(values))
        return None if row is None else _info(row)

    async def revoke(self, share_id: int) -> bool:
        async def revoke(session: AsyncSession) -> bool:
            return await ShareRepository(session).revoke(share_id, utcnow())

        revoked = await in_transaction(self._sessionmaker, revoke)
        if revoked:
            log.info("share_revoked", share_id=share_id)
        return revoked

    # --- the recipient's side ------------------------------------------------------

    async def find(self, token: str) -> ShareInfo | None:
        """The share whose link holds `token`, in whatever state."""
        if len(token) != SHARE_TOKEN_LENGTH:
            return None
        async with session_scope(self._sessionmaker) as session:
            row = await ShareRepository(session).by_token(token)
        return None if row is None else _info(row)

    async def file_of(self, share: ShareInfo) -> ObjectInfo | None:
        """The file a file share names, if it is there (not trashed)."""
        target = share.target
        if target.public_id is None:
            return None
        return await self._store.get_by_public_id(target.public_id, bucket=target.bucket)

    async def file_in_folder(self, share: ShareInfo, path: str) -> ObjectInfo | None:
        """The file at `path` under a folder share's prefix, if there is one."""
        prefix = share.target.prefix
        if prefix is None or not path or path.endswith("/"):
            return None
        return await self._store.get(share.target.bucket, prefix + path)

    async def list_folder(
        self, share: ShareInfo, path: str, *, after: str | None, limit: int
    ) -> Listing:
        """A page of the folder at `path` (ending in "/", or empty: the
        shared folder itself): its files and sub-folders, keys as stored."""
        prefix = share.target.prefix
        assert prefix is not None
        return await self._buckets.list_objects(
            share.target.bucket,
            prefix=prefix + path,
            delimiter="/",
            after=after,
            max_keys=limit,
        )

    async def every_file(self, share: ShareInfo) -> Sequence[ListedObject] | None:
        """Every file under a folder share (for its zip), in key order; None
        if there are more than MAX_FOLDER_FILES."""
        prefix = share.target.prefix
        assert prefix is not None
        found: list[ListedObject] = []
        after: str | None = None
        while True:
            page = await self._buckets.list_objects(
                share.target.bucket, prefix=prefix, delimiter=None, after=after, max_keys=_LIST_PAGE
            )
            found.extend(page.objects)
            if len(found) > MAX_FOLDER_FILES:
                return None
            if not page.truncated:
                return found
            after = page.last

    # --- counting --------------------------------------------------------------------

    @staticmethod
    def session_key(share: ShareInfo, item: str, client: str) -> str:
        """The download session's key: the share, the item (a path, or ""),
        and who downloads (the page's cookie, or address and User-Agent)."""
        text = f"{share.id}\x00{item}\x00{client}".encode("utf-8", "surrogatepass")
        return hashlib.sha256(text).hexdigest()

    async def open_download(self, share: ShareInfo, key: str, size: int) -> Opened:
        """Count a new download, or go on with the session `key` while it lasts."""
        rules = SessionRules(
            idle=SESSION_IDLE,
            max_age=SESSION_MAX_AGE,
            max_bytes=max(1, size) * SESSION_BYTES_FACTOR,
        )

        async def open_(session: AsyncSession) -> Opened:
            return await ShareRepository(session).open_download(share.id, key, utcnow(), rules)

        opened = await in_transaction(self._sessionmaker, open_)
        if opened is Opened.COUNTED:
            log.info("share_download_counted", share_id=share.id)
        return opened

    async def sent(self, key: str, count: int) -> None:
        """`count` bytes went out to the session `key`."""
        if count <= 0:
            return
        async with session_scope(self._sessionmaker) as session:
            await ShareRepository(session).add_sent(key, count)

    # --- passwords ---------------------------------------------------------------------

    async def check_password(
        self, share: ShareInfo, address: str, password: str | None, cookie: str | None
    ) -> PasswordCheck | Limited:
        """Whether the request may have the share's content: no password
        set, the unlock cookie, or the right password (RIGHT); a missing or
        wrong one; Limited when this share or address has failed too often."""
        password_hash = share._password_hash
        if password_hash is None:
            return PasswordCheck.NOT_NEEDED
        address = address[:64]
        if unlocked(cookie, share.id, password_hash, time.time()):
            return PasswordCheck.RIGHT
        if password is None:
            return PasswordCheck.MISSING
        wait = await self._failure_wait(share.id, address)
        if wait:
            return Limited(wait)
        if await self.passwords.verify(password_hash, password):
            return PasswordCheck.RIGHT
        now = utcnow()

        async def record(session: AsyncSession) -> None:
            await ShareRepository(session).record_failure(
                share.id, address, now, now - PASSWORD_WINDOW
            )

        await in_transaction(self._sessionmaker, record)
        log.info("share_password_wrong", share_id=share.id)
        wait = await self._failure_wait(share.id, address)
        return Limited(wait) if wait else PasswordCheck.WRONG

    async def _failure_wait(self, share_id: int, address: str) -> int:
        """Whole seconds until this share and address may be tried again (0: now)."""
        now = utcnow()
        async with session_scope(self._sessionmaker) as session:
            of_share, of_address = await ShareRepository(session).failures_since(
                share_id, address, now - PASSWORD_WINDOW
            )
        wait = 0.0
        for times in (of_share, of_address):
            if len(times) >= PASSWORD_FAILURES_ALLOWED:
                oldest = times[-PASSWORD_FAILURES_ALLOWED]
                wait = max(wait, (oldest + PASSWORD_WINDOW - now).total_seconds())
        return max(1, int(wait + 0.999)) if wait > 0 else 0

    @staticmethod
    def unlock_cookie(share: ShareInfo) -> tuple[str, int]:
        """The cookie a browser keeps once it gave the right password, and
        its lifetime in seconds."""
        assert share._password_hash is not None
        lifetime = int(UNLOCK_LIFETIME.total_seconds())
        value = unlock_cookie(share.id, share._password_hash, int(time.time()) + lifetime)
        return value, lifetime
