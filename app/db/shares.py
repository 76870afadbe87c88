"""The SQL of share links: the shares, the download sessions that count
them, and the wrong passwords that limit guessing (app/store/shares.py says
the rules; this module only keeps the rows).

A download is counted in the same transaction that opens its session, with
the share's row locked by the conditional UPDATE that counts it: two
requests of one session that race each other count once, and two sessions
that race for the last download of a share cannot both have it.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from sqlalchemy import Row, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import dialect_name, lock_database_for_write
from app.db.models import ApiKey, Share, ShareFailure, ShareSession


@dataclass(frozen=True, slots=True)
class ShareRow:
    """A share as the store reads it, with its owner's name; never the
    password's hash, only whether there is one (`password_hash` is read by
    the one place that checks passwords)."""

    id: int
    token: str
    owner_key_id: int
    owner_name: str
    owner_revoked: bool
    bucket: str
    public_id: str | None
    prefix: str | None
    disposition: str
    password_hash: str | None
    created_at: datetime
    expires_at: datetime | None
    max_downloads: int | None
    downloads: int
    last_download_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewShare:
    token: str
    owner_key_id: int
    bucket: str
    public_id: str | None
    prefix: str | None
    disposition: str
    password_hash: str | None
    created_at: datetime
    expires_at: datetime | None
    max_downloads: int | None


@dataclass(frozen=True, slots=True)
class SessionRules:
    """When a download session ends: `idle` after its last request, `max_age`
    after it began, or once it has sent `max_bytes`."""

    idle: timedelta
    max_age: timedelta
    max_bytes: int


class Opened(Enum):
    COUNTED = "counted"  # a new download: the share's count went up
    CONTINUED = "continued"  # a request of a download already counted
    REFUSED = "refused"  # a new download the share no longer allows


_COLUMNS = (
    Share.id,
    Share.token,
    Share.owner_key_id,
    ApiKey.name,
    ApiKey.revoked_at,
    Share.bucket,
    Share.public_id,
    Share.prefix,
    Share.disposition,
    Share.password_hash,
    Share.created_at,
    Share.expires_at,
    Share.max_downloads,
    Share.downloads,
    Share.last_download_at,
    Share.revoked_at,
)


def _row(found: Row[Any]) -> ShareRow:
    values = list(found)
    values[4] = values[4] is not None  # the owner's revoked_at: whether revoked
    return ShareRow(*values)


def _query() -> Any:
    return select(*_COLUMNS).join(ApiKey, ApiKey.id == Share.owner_key_id)


class ShareRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def create(self, new: NewShare) -> ShareRow:
        share_id = await self._session.scalar(
            insert(Share)
            .values(
                token=new.token,
                owner_key_id=new.owner_key_id,
                bucket=new.bucket,
                public_id=new.public_id,
                prefix=new.prefix,
                disposition=new.disposition,
                password_hash=new.password_hash,
                created_at=new.created_at,
                expires_at=new.expires_at,
                max_downloads=new.max_downloads,
                downloads=0,
            )
            .returning(Share.id)
        )
        assert share_id is not None
        found = await self.get(share_id)
        assert found is not None
        return found

    async def get(self, share_id: int) -> ShareRow | None:
        found = (await self._session.execute(_query().where(Share.id == share_id))).first()
        return None if found is None else _row(found)

    async def by_token(self, token: str) -> ShareRow | None:
        found = (await self._session.execute(_query().where(Share.token == token))).first()
        return None if found is None else _row(found)

    async def list(
        self, *, owner_key_id: int | None, after: int | None, limit: int
    ) -> builtins.list[ShareRow]:
        """Shares not revoked, the newest first, after the share `after`;
        only `owner_key_id`'s when given."""
        query = _query().where(Share.revoked_at.is_(None))
        if owner_key_id is not None:
            query = query.where(Share.owner_key_id == owner_key_id)
        if after is not None:
            query = query.where(Share.id < after)
        rows = await self._session.execute(query.order_by(Share.id.desc()).limit(limit))
        return [_row(found) for found in rows.all()]

    async def change(self, share_id: int, values: dict[str, Any]) -> ShareRow | None:
        """Set columns of a share not revoked; None if there is none."""
        if values:
            result = await self._session.execute(
                update(Share)
                .where(Share.id == share_id, Share.revoked_at.is_(None))
                .values(**values)
            )
            if not getattr(result, "rowcount", 0):
                return None
        found = await self.get(share_id)
        return None if found is None or found.revoked_at is not None else found

    async def revoke(self, share_id: int, now: datetime) -> bool:
        """Revoke the share (for good); False if it was not live."""
        result = await self._session.execute(
            update(Share)
            .where(Share.id == share_id, Share.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        # Its sessions and failures are of no use any more.
        await self._session.execute(delete(ShareSession).where(ShareSession.share_id == share_id))
        await self._session.execute(delete(ShareFailure).where(ShareFailure.share_id == share_id))
        return bool(getattr(result, "rowcount", 0))

    # --- downloads ------------------------------------------------------------

    async def open_download(
        self, share_id: int, key_hash: str, now: datetime, rules: SessionRules
    ) -> Opened:
        """Go on with the download session `key_hash` while it lasts, else
        count a new download, if the share still allows one."""
        await lock_database_for_write(self._session)
        # The row first, then locked: racing requests of one session meet
        # on it (Postgres), and the second sees what the first decided.
        await self._session.execute(
            upsert_insert(dialect_name(self._session), ShareSession.__table__)
            .values(key_hash=key_hash, share_id=share_id, opened_at=None, last_at=now, bytes_sent=0)
            .on_conflict_do_nothing(index_elements=["key_hash"])
        )
        query = select(
            ShareSession.id, ShareSession.opened_at, ShareSession.last_at, ShareSession.bytes_sent
        ).where(ShareSession.key_hash == key_hash)
        if dialect_name(self._session) == "postgresql":
            query = query.with_for_update()
        session_id, opened_at, last_at, bytes_sent = (await self._session.execute(query)).one()
        live = (
            opened_at is not None
            and opened_at > now - rules.max_age
            and last_at > now - rules.idle
            and bytes_sent < rules.max_bytes
        )
        if live:
            await self._session.execute(
                update(ShareSession).where(ShareSession.id == session_id).values(last_at=now)
            )
            return Opened.CONTINUED
        counted = await self._session.execute(
            update(Share)
            .where(
                Share.id == share_id,
                Share.revoked_at.is_(None),
                or_(Share.expires_at.is_(None), Share.expires_at > now),
                or_(Share.max_downloads.is_(None), Share.downloads < Share.max_downloads),
            )
            .values(downloads=Share.downloads + 1, last_download_at=now)
        )
        if not getattr(counted, "rowcount", 0):
            return Opened.REFUSED
        await self._session.execute(
            update(ShareSession)
            .where(ShareSession.id == session_id)
            .values(opened_at=now, last_at=now, bytes_sent=0)
        )
        # Sessions nobody can continue any more, of every share: a new
        # download is rare next to the requests that continue one.
        await self._session.execute(
            delete(ShareSession).where(ShareSession.last_at < now - rules.max_age)
        )
        return Opened.COUNTED

    async def add_sent(self, key_hash: str, sent: int) -> None:
        """Bytes a request of the session sent (when it ended)."""
        await self._session.execute(
            update(ShareSession)
            .where(ShareSession.key_hash == key_hash)
            .values(bytes_sent=ShareSession.bytes_sent + sent)
        )

    # --- wrong passwords ---------------------------------------------------------

    async def failures_since(
        self, share_id: int, address: str, since: datetime
    ) -> tuple[builtins.list[datetime], builtins.list[datetime]]:
        """The times of wrong passwords since `since`: for the share, and
        from the address (for any share)."""
        of_share = await self._session.scalars(
            select(ShareFailure.failed_at)
            .where(ShareFailure.share_id == share_id, ShareFailure.failed_at > since)
            .order_by(ShareFailure.failed_at)
        )
        of_address = await self._session.scalars(
            select(ShareFailure.failed_at)
            .where(ShareFailure.address == address, ShareFailure.failed_at > since)
            .order_by(ShareFailure.failed_at)
        )
        return builtins.list(of_share), builtins.list(of_address)

    async def record_failure(
        self, share_id: int, address: str, now: datetime, forget_before: datetime
    ) -> None:
        await self._session.execute(
            insert(ShareFailure).values(share_id=share_id, address=address, failed_at=now)
        )
        await self._session.execute(
            delete(ShareFailure).where(ShareFailure.failed_at < forget_before)
        )

    async def count_live(self, owner_key_id: int | None = None) -> int:
        """Shares not revoked (an owner's, when given)."""
        query = select(func.count()).select_from(Share).where(Share.revoked_at.is_(None))
        if owner_key_id is not None:
            query = query.where(Share.owner_key_id == owner_key_id)
        return int(await self._session.scalar(query) or 0)
