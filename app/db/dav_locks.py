"""WebDAV locks (RFC 4918 section 6), in the database: every instance sees
every lock.

A lock is rooted at a key (a file's, or a folder's ending with "/"); with
`infinite` it covers everything under a folder too. An expired lock binds
nobody and is deleted the next time a lock is taken.

Taking a lock and writing under one must not interleave: a LOCK checks for
conflicts and inserts under `serialize`, exclusive across instances, and a
write checks the locks it must honour under `serialize_shared`, so writes go
on in parallel with each other but never between a LOCK's check and its
insert. (SQLite has one writer at a time anyway.)
"""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    BindParameter,
    Boolean,
    Select,
    String,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.key_ranges import key_prefix_bounds, prefix_upper_bound
from app.db.listing import RowReader
from app.db.locking import lock_named
from app.db.models import DavLock
from app.db.types import UtcDateTime

# The one lock every LOCK takes, and every write's check of the locks shares.
_LOCKS = "dav-locks"


class LockRow(NamedTuple):
    token: str
    key: str
    infinite: bool
    exclusive: bool
    owner: str
    api_key_id: int
    timeout_seconds: int
    expires_at: datetime
    created_at: datetime


_COLUMNS = (
    DavLock.token,
    DavLock.key,
    DavLock.infinite,
    DavLock.exclusive,
    DavLock.owner,
    DavLock.api_key_id,
    DavLock.timeout_seconds,
    DavLock.expires_at,
    DavLock.created_at,
)


def _covering() -> Select[Any]:
    """The live locks of a bucket that cover :key: rooted at it, or infinite
    and rooted at a folder above it (a key the target starts with), or, when
    :subtree, rooted anywhere under it (up to :stop). The locks table is
    small (a lock per file a client holds open), so the ancestors' test may
    read the bucket's live locks rather than an index range."""
    locks = DavLock.__table__.c
    target: BindParameter[str] = bindparam("key", type_=String())
    return (
        select(*(locks[column.key] for column in _COLUMNS))
        .where(
            locks.bucket == bindparam("bucket"),
            locks.expires_at > bindparam("now", type_=UtcDateTime()),
            or_(
                locks.key == target,
                and_(
                    locks.infinite.is_(True),
                    func.substr(target, 1, func.length(locks.key)) == locks.key,
                ),
                and_(
                    bindparam("subtree", type_=Boolean()).is_(True),
                    locks.key >= target,
                    locks.key < bindparam("stop"),
                ),
            ),
        )
        .order_by(locks.key, locks.created_at)
    )


#: Built once: the row reader compiles each statement object once.
COVERING = _covering()


def covering_values(bucket: str, key: str, now: datetime, *, subtree: bool) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "key": key,
        "now": now,
        "subtree": subtree,
        "stop": prefix_upper_bound(key) or key,
    }


class LockReader:
    """The locks covering a key, read outside any transaction (a check of
    the moment, before a body is read), through the service's row reader."""

    def __init__(self, reader: RowReader) -> None:
        self._reader = reader

    async def covering(
        self, bucket: str, key: str, now: datetime, *, subtree: bool = False
    ) -> builtins.list[LockRow]:
        rows = await self._reader.rows(COVERING, covering_values(bucket, key, now, subtree=subtree))
        return [LockRow(*row) for row in rows]


class LockRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def serialize(self) -> None:
        """Until this transaction ends, no other takes a lock or checks one."""
        await lock_named(self._session, _LOCKS)

    async def serialize_shared(self) -> None:
        """Until this transaction ends, no lock is taken (other writes go on)."""
        await lock_named(self._session, _LOCKS, shared=True)

    async def covering(
        self, bucket: str, key: str, now: datetime, *, subtree: bool = False
    ) -> builtins.list[LockRow]:
        """The live locks that cover `key`: its own, and the infinite ones of
        the folders above it; with `subtree` (a folder deleted or moved
        whole), also those of everything under it."""
        rows = await self._session.execute(
            COVERING, covering_values(bucket, key, now, subtree=subtree)
        )
        return [LockRow(*row) for row in rows]

    async def get(self, token: str, now: datetime) -> LockRow | None:
        row = (
            await self._session.execute(
                select(*_COLUMNS).where(DavLock.token == token, DavLock.expires_at > now)
            )
        ).first()
        return None if row is None else LockRow(*row)

    async def add(self, bucket: str, lock: LockRow) -> None:
        self._session.add(
            DavLock(
                token=lock.token,
                bucket=bucket,
                key=lock.key,
                infinite=lock.infinite,
                exclusive=lock.exclusive,
                owner=lock.owner,
                api_key_id=lock.api_key_id,
                timeout_seconds=lock.timeout_seconds,
                expires_at=lock.expires_at,
                created_at=lock.created_at,
            )
        )
        await self._session.flush()

    async def refresh(self, token: str, seconds: int, now: datetime) -> None:
        await self._session.execute(
            update(DavLock)
            .where(DavLock.token == token)
            .values(timeout_seconds=seconds, expires_at=now + timedelta(seconds=seconds))
            .execution_options(synchronize_session=False)
        )

    async def remove(self, token: str) -> bool:
        result = await self._session.execute(
            delete(DavLock)
            .where(DavLock.token == token)
            .execution_options(synchronize_session=False)
        )
        return bool(getattr(result, "rowcount", 0))

    async def remove_of(self, bucket: str, key: str) -> None:
        """Drop the locks rooted at `key` (its resource is gone or moved away)."""
        await self._session.execute(
            delete(DavLock)
            .where(DavLock.bucket == bucket, DavLock.key == key)
            .execution_options(synchronize_session=False)
        )

    async def remove_under(self, bucket: str, prefix: str) -> None:
        """Drop the locks rooted at `prefix` or under it."""
        await self._session.execute(
            delete(DavLock)
            .where(DavLock.bucket == bucket, *key_prefix_bounds(DavLock.key, prefix))
            .execution_options(synchronize_session=False)
        )

    async def purge_expired(self, now: datetime) -> None:
        await self._session.execute(
            delete(DavLock)
            .where(DavLock.expires_at <= now)
            .execution_options(synchronize_session=False)
        )
