"""A file or a whole folder removed, moved or copied in the caller's
transaction: the objects, the folder rows and the dead properties under it
together, metadata only (no byte goes to Telegram again).

- Removing sends each object to the trash when the session keeps one
  (`app.db.trash`), else deletes it and releases its chunks to the GC
  ledger; the folder rows, properties and locks under it go.
- Moving renames keys: a moved file keeps its row, its public id (its /f/
  link) and its chunks. Locks stay where they were rooted (RFC 4918 section
  7.7: a lock does not move with its resource), so those of the source go.
- Copying makes new objects pointing at the same chunks
  (`ObjectRepository.put`, as an S3 CopyObject does), with new public ids
  and the copier as their owner.

Every key written or removed is locked first (`lock_object_keys`), so a
concurrent PUT of one of them queues behind the whole operation instead of
finding its row renamed under it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import load_only

from app.db.chunks import ChunkRepository
from app.db.dav_locks import LockRepository
from app.db.dav_properties import PropertyRepository
from app.db.folders import FolderRepository
from app.db.key_ranges import key_prefix_bounds
from app.db.locking import batches, lock_object_keys
from app.db.models import GcReason, Piece, StoredObject, TrashReason
from app.db.object_rows import ObjectSpec, PieceSpec, StoredChecksum
from app.db.objects import ObjectRepository
from app.db.pending import PendingRepository
from app.db.trash import TrashRepository, retention_of
from app.kit.checksums import FULL_OBJECT


class SourcePending(Exception):
    """A file to copy still has bytes in an instance's spool only: no piece
    to point at yet. Nothing was written."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key} is still being stored")
        self.key = key


class ForeignObject(Exception):
    """An object the caller may not change (another key's) lies in the way."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key} belongs to another API key")
        self.key = key


@dataclass(frozen=True, slots=True)
class Place:
    """A file (`key`) or a folder (`key` ending with "/") of a bucket."""

    bucket: str
    key: str

    @property
    def folder(self) -> bool:
        return self.key.endswith("/")


class SubtreeRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        # Chunks handed to the GC ledger: the caller wakes the collector.
        self.chunks_released = 0

    async def keys(self, place: Place) -> builtins.list[str]:
        """The object keys at `place`: the file's, or every one under the folder."""
        return list(
            await self._session.scalars(
                select(StoredObject.key)
                .where(StoredObject.bucket == place.bucket, *_at(place))
                .order_by(StoredObject.key)
            )
        )

    async def lock(self, bucket: str, keys: Iterable[str]) -> None:
        """Lock the object keys about to be written or removed (SQLite: the
        write lock, to be taken before anything is read)."""
        await lock_object_keys(self._session, bucket, keys)

    async def check_owner(self, place: Place, owner: int | None) -> None:
        """ForeignObject if an object at `place` is not `owner`'s (None: anyone's)."""
        if owner is None:
            return
        foreign = await self._session.scalar(
            select(StoredObject.key)
            .where(
                StoredObject.bucket == place.bucket,
                *_at(place),
                StoredObject.owner_key_id.is_distinct_from(owner),
            )
            .limit(1)
        )
        if foreign is not None:
            raise ForeignObject(foreign)

    async def remove(self, place: Place, reason: TrashReason) -> int:
        """Remove what is at `place` (its keys locked by the caller): objects,
        folder rows, properties, locks. How many objects went."""
        retention = retention_of(self._session)
        rows = list(
            await self._session.scalars(
                select(StoredObject)
                .where(StoredObject.bucket == place.bucket, *_at(place))
                .options(load_only(StoredObject.id, StoredObject.bucket, StoredObject.key))
                .with_for_update()
            )
        )
        if retention:
            trash = TrashRepository(self._session)
            for row in rows:
                await trash.put(row, reason, retention)
        elif rows:
            ids = [row.id for row in rows]
            for row in rows:
                self._session.expunge(row)
            chunk_ids: set[int] = set()
            for batch in batches(ids):
                chunk_ids.update(
                    await self._session.scalars(
                        select(Piece.chunk_id).where(Piece.object_id.in_(batch)).distinct()
                    )
                )
                chunk_ids.update(await PendingRepository(self._session).detach_sources(batch))
                await self._session.execute(
                    delete(StoredObject)
                    .where(StoredObject.id.in_(batch))
                    .execution_options(synchronize_session=False)
                )
            gc_reason: GcReason = "overwritten" if reason == "replaced" else "deleted"
            await ChunkRepository(self._session).release(chunk_ids, gc_reason)
            self.chunks_released += len(chunk_ids)
        properties = PropertyRepository(self._session)
        locks = LockRepository(self._session)
        if place.folder:
            await FolderRepository(self._session).delete_under(place.bucket, place.key)
            await properties.delete_under(place.bucket, place.key)
            await locks.remove_under(place.bucket, place.key)
        else:
            await properties.delete_of(place.bucket, place.key)
            await locks.remove_of(place.bucket, place.key)
        return len(rows)

    async def move(self, source: Place, target: Place, name: str) -> None:
        """Rename what is at `source` to `target` (free: the caller removed
        what was there, and locked both sides' keys); a moved file is named
        `name`."""
        bucket = source.bucket
        properties = PropertyRepository(self._session)
        if source.folder:
            await self._session.execute(
                update(StoredObject)
                .where(StoredObject.bucket == bucket, *_at(source))
                .values(
                    key=literal(target.key) + func.substr(StoredObject.key, len(source.key) + 1)
                )
                .execution_options(synchronize_session=False)
            )
            await FolderRepository(self._session).move_under(bucket, source.key, target.key)
            await properties.move_under(bucket, source.key, target.key)
            await LockRepository(self._session).remove_under(bucket, source.key)
        else:
            await self._session.execute(
                update(StoredObject)
                .where(StoredObject.bucket == bucket, StoredObject.key == source.key)
                .values(key=target.key, name=name)
                .execution_options(synchronize_session=False)
            )
            await properties.move(bucket, source.key, target.key)
            await LockRepository(self._session).remove_of(bucket, source.key)

    async def copy(
        self,
        source: Place,
        target: Place,
        *,
        name: str,
        owner_key_id: int | None,
        members: bool,
        now: datetime,
    ) -> None:
        """Copy what is at `source` to `target` (free, keys locked by the
        caller); a copied file is named `name`. A folder's files and folders
        come along only with `members` (Depth: infinity)."""
        bucket = source.bucket
        folders = FolderRepository(self._session)
        properties = PropertyRepository(self._session)
        if not source.folder:
            row = await self._object(bucket, source.key)
            if row is not None:
                await self._copy_object(row, target.key, name, owner_key_id)
            await properties.copy(bucket, source.key, target.key, under=False)
            return
        await folders.add(bucket, target.key, now)
        if not members:
            await properties.copy(bucket, source.key, target.key, under=False)
            return
        for key in await self.keys(source):
            row = await self._object(bucket, key)
            if row is not None:
                await self._copy_object(
                    row, target.key + key[len(source.key) :], row.name, owner_key_id
                )
        await folders.copy_under(bucket, source.key, target.key, now)
        await properties.copy(bucket, source.key, target.key, under=True)

    async def _object(self, bucket: str, key: str) -> StoredObject | None:
        return await self._session.scalar(
            select(StoredObject).where(StoredObject.bucket == bucket, StoredObject.key == key)
        )

    async def _copy_object(
        self, source: StoredObject, key: str, name: str, owner_key_id: int | None
    ) -> None:
        objects = ObjectRepository(self._session)
        pieces: Sequence[PieceSpec]
        if source.inline_data is not None or source.size == 0:
            pieces = ()
        else:
            found = await objects.piece_specs(source.id, 0, source.size)
            if found is None:
                raise SourcePending(source.key)
            pieces = found
        checksum = None
        if source.checksum_algorithm and source.checksum and source.checksum_type == FULL_OBJECT:
            checksum = StoredChecksum(source.checksum_algorithm, source.checksum, FULL_OBJECT)
        await objects.put(
            ObjectSpec(
                bucket=source.bucket,
                key=key,
                name=name,
                content_type=source.content_type,
                size=source.size,
                etag=source.etag,
                md5=source.md5,
                sha256=source.sha256,
                user_metadata=dict(source.user_metadata or {}),
                inline_data=source.inline_data,
                pieces=pieces,
                owner_key_id=owner_key_id,
                checksum=checksum,
            )
        )
        self.chunks_released += objects.chunks_released


def _at(place: Place) -> builtins.list[ColumnElement[bool]]:
    """The condition on an object's key that it lies at `place`."""
    if place.folder:
        return key_prefix_bounds(StoredObject.key, place.key)
    return [StoredObject.key == place.key]
