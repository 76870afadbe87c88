"""The trash: deleted and replaced objects, restorable until they expire.

Trashing an object moves its row out of every live namespace (into the bucket
`TRASH_BUCKET`, under its row id) and records where it was in `trash`. Its
pieces stay, so its chunks stay referenced: the GC ledger gets their
messages only when `expire` deletes the row, and then only for chunks no
live object (a metadata-only copy) still uses (`ChunkRepository.release`).

Whether deletes and replacements go to the trash is the session's setting
(`configure`), so every writer of objects (plain puts, multipart
completions, tus concatenations, deletes) follows it alike.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import defer

from app.db.chunks import ChunkRepository
from app.db.locking import batches, lock_database_for_write, lock_object_key
from app.db.models import Bucket, Piece, StoredObject, TrashEntry, TrashReason
from app.db.object_rows import ObjectRow, new_public_id
from app.db.pending import PendingRepository
from app.db.single_statement_sql import TRASH_BUCKET as TRASH_BUCKET
from app.db.single_statement_sql import trash_key
from app.db.types import utcnow

# The sessions' `info` entry holding the retention (a timedelta; absent: off).
_RETENTION = "trash_retention"


def configure(sessionmaker: async_sessionmaker[AsyncSession], retention_seconds: float) -> None:
    """Make the sessions of `sessionmaker` trash what they delete or replace
    for `retention_seconds` (0: deletes are final)."""
    if retention_seconds > 0:
        sessionmaker.configure(info={_RETENTION: timedelta(seconds=retention_seconds)})


def retention_of(session: AsyncSession) -> timedelta | None:
    """How long this session's deletes and replacements stay restorable (None: off)."""
    retention: timedelta | None = session.info.get(_RETENTION)
    return retention


class TrashedObject(NamedTuple):
    """An object in the trash, with where it was."""

    entry_id: int
    row: ObjectRow
    bucket: str
    key: str
    reason: str
    trashed_at: datetime
    expires_at: datetime


class KeyTaken(Exception):
    """A live object holds the name a restore wants."""

    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"{bucket}/{key} holds a live object")
        self.bucket = bucket
        self.key = key


class BucketGone(Exception):
    """The S3 bucket an object would be restored into no longer exists."""

    def __init__(self, bucket: str) -> None:
        super().__init__(f"the bucket {bucket!r} no longer exists")
        self.bucket = bucket


#: A check on the object a restore found (its owner, its bucket), under the
#: lock: it raises to refuse the restore.
RestoreCheck = Callable[[TrashedObject], None]


class TrashRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def put(
        self,
        obj: StoredObject,
        reason: TrashReason,
        retention: timedelta,
        *,
        new_id: bool = False,
        now: datetime | None = None,
    ) -> None:
        """Move `obj` (locked by the caller) to the trash, freeing its key;
        with `new_id` it gets a new public id, leaving its own to the object
        that replaces it (a native file keeps its link across uploads)."""
        now = now or utcnow()
        moved: dict[str, Any] = {"bucket": TRASH_BUCKET, "key": trash_key(obj.id)}
        if new_id:
            moved["public_id"] = new_public_id()
        await self._session.execute(
            update(StoredObject)
            .where(StoredObject.id == obj.id)
            .values(**moved)
            .execution_options(synchronize_session=False)
        )
        await self._session.execute(
            insert(TrashEntry).values(
                object_id=obj.id,
                bucket=obj.bucket,
                key=obj.key,
                reason=reason,
                trashed_at=now,
                expires_at=now + retention,
            )
        )
        self._session.expunge(obj)

    async def list(
        self,
        *,
        bucket: str | None = None,
        owner_key_id: int | None = None,
        after: int | None = None,
        limit: int = 100,
        now: datetime | None = None,
    ) -> builtins.list[TrashedObject]:
        """Unexpired trash, the most recently trashed first, after the entry
        `after`; only what was in `bucket` and owned by `owner_key_id` when given."""
        query = self._query(now or utcnow()).options(defer(StoredObject.inline_data))
        if bucket is not None:
            query = query.where(TrashEntry.bucket == bucket)
        if owner_key_id is not None:
            query = query.where(StoredObject.owner_key_id == owner_key_id)
        if after is not None:
            query = query.where(TrashEntry.id < after)
        rows = await self._session.execute(query.order_by(TrashEntry.id.desc()).limit(limit))
        return [_trashed(entry, obj) for entry, obj in rows]

    async def get(self, public_id: str, now: datetime | None = None) -> TrashedObject | None:
        """The unexpired trashed object with this public id, if any."""
        found = (
            await self._session.execute(
                self._query(now or utcnow())
                .where(StoredObject.public_id == public_id)
                .options(defer(StoredObject.inline_data))
            )
        ).first()
        return None if found is None else _trashed(*found)

    async def restore(
        self,
        public_id: str,
        *,
        key: str | None = None,
        name: str | None = None,
        check: RestoreCheck | None = None,
        now: datetime | None = None,
    ) -> ObjectRow | None:
        """Put the trashed object `public_id` back under its old key, or
        `key` (with the file name `name`, if given); None if the trash holds
        no such object (or it expired). KeyTaken if a live object holds the
        key, BucketGone if its S3 bucket was deleted: nothing changes."""
        now = now or utcnow()
        await lock_database_for_write(self._session)
        found = (
            await self._session.execute(
                self._query(now)
                .where(StoredObject.public_id == public_id)
                .with_for_update(of=TrashEntry)
                .execution_options(populate_existing=True)
            )
        ).first()
        if found is None:
            return None
        trashed = _trashed(*found)
        if check is not None:
            check(trashed)
        bucket, key = trashed.bucket, key or trashed.key
        # Buckets whose name starts with "_" are the service's own (no row).
        if not bucket.startswith("_") and await self._session.get(Bucket, bucket) is None:
            raise BucketGone(bucket)
        await lock_object_key(self._session, bucket, key)
        live = await self._session.scalar(
            select(StoredObject.id).where(StoredObject.bucket == bucket, StoredObject.key == key)
        )
        if live is not None:
            raise KeyTaken(bucket, key)
        back: dict[str, Any] = {"bucket": bucket, "key": key}
        if name is not None:
            back["name"] = name
        await self._session.execute(
            update(StoredObject)
            .where(StoredObject.id == trashed.row.id)
            .values(**back)
            .execution_options(synchronize_session=False)
        )
        await self._session.execute(
            delete(TrashEntry)
            .where(TrashEntry.id == trashed.entry_id)
            .execution_options(synchronize_session=False)
        )
        return trashed.row._replace(**back)

    async def any_expired(self, now: datetime | None = None) -> bool:
        """Whether an object's time in the trash is over. Most GC rounds find
        none, and ask in a read-only transaction first: `expire` takes
        SQLite's write lock."""
        found = await self._session.scalar(
            select(TrashEntry.id).where(self._due(now or utcnow())).limit(1)
        )
        return found is not None

    async def expire(self, limit: int, now: datetime | None = None) -> tuple[int, int]:
        """Delete up to `limit` expired objects for good, releasing their
        chunks to the GC ledger (those no other object uses); returns how
        many objects and chunks went. Several instances share the work:
        each skips the entries another has locked. Call it first in its
        transaction: on SQLite it takes the write lock before it reads (a
        transaction that read may not write once another has written)."""
        now = now or utcnow()
        due = (
            select(TrashEntry.object_id)
            .where(self._due(now))
            .order_by(TrashEntry.expires_at, TrashEntry.id)
            .limit(limit)
        )
        await lock_database_for_write(self._session)
        object_ids = builtins.list(
            await self._session.scalars(due.with_for_update(skip_locked=True))
        )
        if not object_ids:
            return 0, 0
        chunk_ids: set[int] = set()
        for batch in batches(object_ids):
            chunk_ids.update(
                await self._session.scalars(
                    select(Piece.chunk_id).where(Piece.object_id.in_(batch)).distinct()
                )
            )
            chunk_ids.update(await PendingRepository(self._session).detach_sources(batch))
            # The pieces, the trash entries and a pending object's upload go
            # with the rows (ON DELETE CASCADE).
            await self._session.execute(
                delete(StoredObject)
                .where(StoredObject.id.in_(batch))
                .execution_options(synchronize_session=False)
            )
        released = await ChunkRepository(self._session).release(chunk_ids, "deleted")
        return len(object_ids), released

    @staticmethod
    def _due(now: datetime) -> ColumnElement[bool]:
        """The entries whose time in the trash is over at `now`."""
        return TrashEntry.expires_at <= now

    @staticmethod
    def _query(now: datetime) -> Select[TrashEntry, StoredObject]:
        return (
            select(TrashEntry, StoredObject)
            .join(StoredObject, StoredObject.id == TrashEntry.object_id)
            .where(TrashEntry.expires_at > now)
        )


def _trashed(entry: TrashEntry, obj: StoredObject) -> TrashedObject:
    return TrashedObject(
        entry_id=entry.id,
        row=ObjectRow.of(obj),
        bucket=entry.bucket,
        key=entry.key,
        reason=entry.reason,
        trashed_at=entry.trashed_at,
        expires_at=entry.expires_at,
    )
