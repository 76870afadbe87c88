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
from typing import NamedTuple

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.key_ranges import key_prefix_bounds
from app.db.locking import lock_named
from app.db.models import DavLock

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


def ancestors(key: str) -> builtins.list[str]:
    """The folders above `key`, outermost first: "a/b/c" -> ["a/", "a/b/"]."""
    cut = key.rstrip("/")
    found = []
    position = cut.find("/")
    while position >= 0:
        found.append(cut[: position + 1])
        position = cut.find("/", position + 1)
    return found


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
        above = ancestors(key)
        conditions = [DavLock.key == key]
        if above:
            conditions.append(DavLock.infinite.is_(True) & DavLock.key.in_(above))
        if subtree:
            conditions.append(and_(*key_prefix_bounds(DavLock.key, key)))
        rows = await self._session.execute(
            select(*_COLUMNS)
            .where(DavLock.bucket == bucket, DavLock.expires_at > now, or_(*conditions))
            .order_by(DavLock.key, DavLock.created_at)
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
