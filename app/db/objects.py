"""Objects and their pieces: atomic writes, range reads, ordered listing."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Select, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from app.db.chunks import ChunkRepository
from app.db.copies import ChunkRow, CopyRepository
from app.db.key_ranges import key_prefix_bounds
from app.db.locking import batches, dialect_name, lock_database_for_write, lock_object_key
from app.db.models import Chunk, GcReason, Piece, StoredObject
from app.db.object_rows import (
    INSERTS,
    INSERTS_UNLESS_EXISTS,
    ObjectRow,
    ObjectSpec,
    PartSummary,
    PieceSpec,
    new_public_id,
    piece_rows,
    row_values,
)
from app.db.pending import PendingRepository
from app.db.trash import TrashRepository, retention_of
from app.db.types import utcnow

#: The orders of the native listing (ObjectRepository.list).
ListOrder = Literal["key", "newest", "oldest"]


class NotOwner(Exception):
    """The object belongs to another API key (or to none): nothing was changed."""

    def __init__(self, bucket: str, key: str) -> None:
        super().__init__(f"object {bucket}/{key} belongs to another API key")
        self.bucket = bucket
        self.key = key


#: A condition on the object a put replaces (S3's If-Match / If-None-Match),
#: called under the key's lock with that object's ETag, or None when the key
#: has no object. It raises to refuse the put: nothing is written.
WriteCheck = Callable[[str | None], None]


class ObjectRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._chunks = ChunkRepository(session)
        # Chunks this repository's writes handed to the GC ledger: callers wake
        # the collector only when there is something for it to do.
        self.chunks_released = 0

    # --- reading --------------------------------------------------------------

    async def get(self, bucket: str, key: str) -> ObjectRow | None:
        obj = await self._session.scalar(
            select(StoredObject).where(StoredObject.bucket == bucket, StoredObject.key == key)
        )
        return None if obj is None else ObjectRow.of(obj)

    async def parts_of(self, object_id: int) -> builtins.list[PartSummary] | None:
        """The parts of a multipart object (None for any other object)."""
        parts = await self._session.scalar(
            select(StoredObject.parts).where(StoredObject.id == object_id)
        )
        if parts is None:
            return None
        return [(int(size), checksum) for size, checksum in parts]

    async def get_by_public_id(self, public_id: str) -> ObjectRow | None:
        obj = await self._session.scalar(
            select(StoredObject).where(StoredObject.public_id == public_id)
        )
        return None if obj is None else ObjectRow.of(obj)

    async def pieces(
        self, object_id: int, start: int, end: int
    ) -> builtins.list[tuple[Piece, Chunk]]:
        """The pieces overlapping object bytes [start, end), in order, with their chunks.

        `Piece.start` is each piece's offset in the object. An object that was
        replaced or deleted since `object_id` was read has no pieces any more
        (a write makes a new row), so a reader never mixes two versions; it
        sees pieces that do not cover the range and must treat that as gone.
        """
        if end <= start:
            return []
        # The piece containing `start` is the last one starting at or before
        # it; bounding the scan there keeps it to the requested pieces on the
        # (object_id, start) index, however many pieces come before.
        first_start = (
            select(func.max(Piece.start))
            .where(Piece.object_id == object_id, Piece.start <= start)
            .scalar_subquery()
        )
        rows = await self._session.execute(
            select(Piece, Chunk)
            .join(Chunk, Chunk.id == Piece.chunk_id)
            .where(
                Piece.object_id == object_id,
                Piece.start >= func.coalesce(first_start, 0),
                Piece.start < end,
                Piece.start + Piece.length > start,
            )
            .order_by(Piece.start)
        )
        return [(piece, chunk) for piece, chunk in rows]

    async def list(
        self,
        bucket: str,
        prefix: str = "",
        after_key: str | None = None,
        limit: int = 1000,
        *,
        name_prefix: str = "",
        order: ListOrder = "key",
        after_id: int | None = None,
    ) -> builtins.list[ObjectRow]:
        """Whole objects of `bucket` whose key starts with `prefix`: the
        native API's file listing. (S3 listings show fewer columns and roll
        keys up: app.db.listing.) `name_prefix` keeps the objects whose name
        starts with it, ignoring case (SQLite folds ASCII letters only);
        names have no index, so that filter reads the bucket's rows in the
        listing's order until the page is full.

        `order` "key": in key order, after `after_key` (a range scan on the
        (bucket, key) index). "newest" / "oldest": by when the object was
        stored (its row id: a replaced file was stored anew), after the row
        `after_id`; a range scan on the (bucket, id) index.

        `inline_data` is not read (it is None in the rows): listings must not
        drag content along.
        """
        if limit <= 0:
            return []
        query = select(StoredObject).where(
            StoredObject.bucket == bucket, *key_prefix_bounds(StoredObject.key, prefix)
        )
        if order == "key":
            if after_key is not None:
                query = query.where(StoredObject.key > after_key)
            query = query.order_by(StoredObject.key)
        elif order == "newest":
            if after_id is not None:
                query = query.where(StoredObject.id < after_id)
            query = query.order_by(StoredObject.id.desc())
        else:
            if after_id is not None:
                query = query.where(StoredObject.id > after_id)
            query = query.order_by(StoredObject.id)
        if name_prefix:
            start = func.substr(StoredObject.name, 1, len(name_prefix))
            query = query.where(func.lower(start) == name_prefix.lower())
        query = query.options(defer(StoredObject.inline_data, raiseload=True)).limit(limit)
        return [ObjectRow.of(obj) for obj in await self._session.scalars(query)]

    async def covering_pieces(
        self, object_id: int, start: int, end: int
    ) -> builtins.list[tuple[PieceSpec, ChunkRow]] | None:
        """Object bytes [start, end) as pieces trimmed to the range, each with
        its chunk and the chunk's copies; None when they no longer cover the
        range (the object was replaced or deleted since `object_id` was read)."""
        trimmed: builtins.list[PieceSpec] = []
        for piece, _chunk in await self.pieces(object_id, start, end):
            first = max(start, piece.start)
            last = min(end, piece.end)
            trimmed.append(
                PieceSpec(piece.chunk_id, piece.offset + (first - piece.start), last - first)
            )
        if sum(spec.length for spec in trimmed) != max(0, end - start):
            return None
        chunks = await CopyRepository(self._session).chunks(spec.chunk_id for spec in trimmed)
        return [(spec, chunks[spec.chunk_id]) for spec in trimmed]

    async def piece_specs(
        self, object_id: int, start: int, end: int
    ) -> builtins.list[PieceSpec] | None:
        """Object bytes [start, end) as pieces for a new object or part: a
        metadata-only copy that points into the same chunks. None when the
        pieces no longer cover the range (the object was replaced or deleted).

        Takes the write lock first: the copy is written in this transaction.
        """
        await lock_database_for_write(self._session)
        trimmed = await self.covering_pieces(object_id, start, end)
        return None if trimmed is None else [spec for spec, _ in trimmed]

    # --- writing --------------------------------------------------------------

    async def put(
        self,
        spec: ObjectSpec,
        *,
        keep_public_id: bool = False,
        only_if_owned_by: int | None = None,
        now: datetime | None = None,
        check: WriteCheck | None = None,
    ) -> ObjectRow:
        """Write a whole object under (bucket, key), replacing any previous one.

        All in the caller's transaction, which must commit for it to count:
        the new chunks become live, the previous object's row and pieces go
        and its chunks are released ('overwritten'), or, when the session
        keeps a trash, the previous object goes there whole. Concurrent writers of a
        key queue on a per-key lock, so the last to commit wins and readers
        see either version whole. The new object gets a new row id and, unless
        `keep_public_id`, a new public id.

        With `only_if_owned_by`, a previous object must belong to that API key,
        checked under the key's lock: otherwise NotOwner, nothing written.
        `check` sees the replaced object's ETag (None: a new key) under the
        same lock, so no concurrent write slips between it and the commit.
        Raises ChunksMissing (nothing written) if a referenced chunk is gone.
        """
        spec.check()
        now = now or utcnow()
        if dialect_name(self._session) != "sqlite":
            await lock_object_key(self._session, spec.bucket, spec.key)
        # On SQLite the key lock is the database's write lock, and the INSERT
        # below takes it before anything is read: a separate locking statement
        # would only cost a round trip.
        new_chunk_ids = [piece.chunk_id for piece in spec.pieces]

        # A new key (the common case) is one statement; only a replacement
        # reads the previous version. A chunk released meanwhile makes
        # mark_live raise ChunksMissing, and the caller's rollback undoes the
        # insert: nothing is written.
        created = await self._insert(spec, new_public_id(), now, now, unless_exists=True)
        if created is not None:
            if check is not None:
                check(None)  # raising rolls the insert back with the transaction
            await self._lock_chunks(new_chunk_ids)
            await self._chunks.mark_live(new_chunk_ids)
            await self._insert_pieces(created, spec)
            return ObjectRow.of(created)

        previous = await self._get_for_update(spec.bucket, spec.key)
        if previous is None:
            # Only a concurrent delete could do this, and the key lock rules it out.
            raise RuntimeError(f"object {spec.bucket}/{spec.key} vanished under its lock")
        if not _owned(previous, only_if_owned_by):
            raise NotOwner(spec.bucket, spec.key)
        if check is not None:
            check(previous.etag)
        retention = retention_of(self._session)
        # A trashed version keeps its chunks: none to release.
        old_chunk_ids = [] if retention else await self._chunk_ids_of(previous.id)
        await self._lock_chunks(new_chunk_ids, old_chunk_ids)
        await self._chunks.mark_live(new_chunk_ids)
        public_id = previous.public_id if keep_public_id else new_public_id()
        created_at = previous.created_at
        if retention:
            await TrashRepository(self._session).put(
                previous, "replaced", retention, new_id=keep_public_id, now=now
            )
        else:
            await self._delete_row(previous)
        replacement = await self._insert(spec, public_id, created_at, now)
        assert replacement is not None  # the key is free: its row was just moved or deleted
        await self._insert_pieces(replacement, spec)
        # After the new pieces exist, so a chunk shared by both versions stays.
        await self._chunks.release(old_chunk_ids, "overwritten")
        self.chunks_released += len(old_chunk_ids)
        return ObjectRow.of(replacement)

    async def set_tags(self, bucket: str, key: str, tags: Mapping[str, str] | None) -> bool:
        """Replace the tags of the object under (bucket, key), in place: its
        content, ETag and dates stay. False if there is no object."""
        if dialect_name(self._session) != "sqlite":
            # After a put of the key in progress, on the version it commits
            # (an UPDATE waiting on the replaced row would find it deleted).
            await lock_object_key(self._session, bucket, key)
        updated = await self._session.scalar(
            update(StoredObject)
            .where(StoredObject.bucket == bucket, StoredObject.key == key)
            .values(tags=dict(tags) if tags else None)
            .returning(StoredObject.id)
            .execution_options(synchronize_session=False)
        )
        return updated is not None

    async def set_metadata(self, bucket: str, key: str, metadata: Mapping[str, Any]) -> bool:
        """Replace the user metadata of the object under (bucket, key) in
        place (a WebDAV client setting a file's modification time), under
        the caller's lock of the key. False if there is no object."""
        updated = await self._session.scalar(
            update(StoredObject)
            .where(StoredObject.bucket == bucket, StoredObject.key == key)
            .values(user_metadata=dict(metadata))
            .returning(StoredObject.id)
            .execution_options(synchronize_session=False)
        )
        return updated is not None

    async def delete(self, bucket: str, key: str) -> bool:
        """Delete the object and release its chunks ('deleted'), or trash it
        (`app.db.trash`). False if there was none."""
        await lock_object_key(self._session, bucket, key)
        found = await self._get_for_update(bucket, key)
        return await self._delete_and_release(found, "deleted")

    async def delete_by_public_id(
        self, public_id: str, *, bucket: str, only_if_owned_by: int | None = None
    ) -> bool:
        """Delete the object with this public id in `bucket`; False if there
        is none (an object of another bucket is not touched).

        With `only_if_owned_by`, it must belong to that API key (checked under
        the key's lock): otherwise NotOwner, nothing deleted.
        """
        # SQLite: become the writer before reading (see app.db.locking).
        await lock_database_for_write(self._session)
        found = await self.get_by_public_id(public_id)
        if found is None or found.bucket != bucket:
            return False
        # Take the key's lock, then look again: a put may have replaced it.
        await lock_object_key(self._session, found.bucket, found.key)
        locked = await self._session.scalar(
            self._locking(
                select(StoredObject).where(
                    StoredObject.public_id == public_id, StoredObject.bucket == bucket
                )
            )
        )
        if locked is not None and not _owned(locked, only_if_owned_by):
            raise NotOwner(locked.bucket, locked.key)
        return await self._delete_and_release(locked, "deleted")

    # --- helpers --------------------------------------------------------------

    async def _lock_chunks(self, *chunk_ids: Iterable[int]) -> None:
        """Lock every chunk this put touches, once, in id order, FOR UPDATE.

        Postgres: a put references its new chunks and may release the
        replaced object's. Locking the new ones FOR SHARE and then the old
        ones FOR UPDATE deadlocks two puts over metadata-only copies of each
        other (A->B while B->A): each holds a share lock the other must
        upgrade past. One pass in one order cannot form such a cycle, and the
        later FOR SHARE / FOR UPDATE of `mark_live` and `release` find the
        rows already held. SQLite: the write lock is held already.
        """
        ids = sorted(set().union(*chunk_ids))
        if not ids or dialect_name(self._session) == "sqlite":
            return
        for batch in batches(ids):
            await self._session.execute(
                select(Chunk.id).where(Chunk.id.in_(batch)).order_by(Chunk.id).with_for_update()
            )

    @staticmethod
    def _locking(query: Select[StoredObject]) -> Select[StoredObject]:
        # populate_existing: the row may already be in this session's identity
        # map from an earlier read; we want the values as of the lock.
        return query.with_for_update().execution_options(populate_existing=True)

    async def _get_for_update(self, bucket: str, key: str) -> StoredObject | None:
        return await self._session.scalar(
            self._locking(
                select(StoredObject).where(StoredObject.bucket == bucket, StoredObject.key == key)
            )
        )

    async def _chunk_ids_of(self, object_id: int) -> builtins.list[int]:
        """The chunks the object holds: its pieces', or a pending object's
        parts' (its upload goes with its row)."""
        own = set(
            await self._session.scalars(
                select(Piece.chunk_id).where(Piece.object_id == object_id).distinct()
            )
        )
        if not own:
            own = await PendingRepository(self._session).detach_sources([object_id])
        return sorted(own)

    async def _delete_row(self, obj: StoredObject) -> None:
        # The pieces go with it (ON DELETE CASCADE).
        await self._session.execute(
            delete(StoredObject)
            .where(StoredObject.id == obj.id)
            .execution_options(synchronize_session=False)
        )
        self._session.expunge(obj)

    async def _delete_and_release(self, obj: StoredObject | None, reason: GcReason) -> bool:
        """Delete `obj` and release its chunks, or move it to the trash when
        the session keeps one (its chunks stay until it expires)."""
        if obj is None:
            return False
        retention = retention_of(self._session)
        if retention:
            await TrashRepository(self._session).put(obj, "deleted", retention)
            return True
        chunk_ids = await self._chunk_ids_of(obj.id)
        await self._delete_row(obj)
        await self._chunks.release(chunk_ids, reason)
        self.chunks_released += len(chunk_ids)
        return True

    async def _insert(
        self,
        spec: ObjectSpec,
        public_id: str,
        created_at: datetime,
        updated_at: datetime,
        *,
        unless_exists: bool = False,
    ) -> StoredObject | None:
        """Insert the object's row in one statement (no ORM flush); None if
        `unless_exists` and the key already has an object."""
        values = row_values(spec, public_id, created_at, updated_at)
        inserts = INSERTS_UNLESS_EXISTS if unless_exists else INSERTS
        new_id = await self._session.scalar(inserts[dialect_name(self._session)], values)
        if new_id is None:
            return None
        # Detached, like `get`'s: what callers read after the commit.
        return StoredObject(id=new_id, **values)

    async def _insert_pieces(self, obj: StoredObject, spec: ObjectSpec) -> None:
        if not spec.pieces:
            return
        await self._session.execute(insert(Piece), piece_rows(obj.id, spec.pieces))


def _owned(obj: StoredObject, only_if_owned_by: int | None) -> bool:
    """Whether `obj` may be changed by a caller limited to its own objects (None: no limit)."""
    return only_if_owned_by is None or obj.owner_key_id == only_if_owned_by
