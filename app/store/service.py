"""The object store: what the HTTP layers (native API, S3) call.

Writing is two steps, so a caller can learn things from the stream before it
names the object (a form's `fileName` field may come after the file):

1. `write_content(stream)` stores the bytes (chunks in Telegram, or inline when
   small) and returns their hashes and pieces; nothing is visible yet.
2. `commit(...)` makes the object visible in one transaction, replacing any
   object under the same key (last writer wins).

If step 2 fails or never happens, `discard(content)` releases the chunks to the
GC ledger. Reading resolves only the pieces a byte range touches and streams
them through the `RangeReader`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import objects as db_objects
from app.db.chunks import ChunksMissing
from app.db.copies import CopyRepository
from app.db.object_rows import ObjectSpec, PieceSpec, new_public_id, row_values
from app.db.object_rows import PartSummary as PartSummary
from app.db.object_rows import StoredChecksum as StoredChecksum
from app.db.objects import ListOrder as ListOrder  # for the API: orders of a listing
from app.db.objects import ObjectRepository
from app.db.objects import WriteCheck as WriteCheck  # for the APIs: a condition on a put
from app.db.pending import PendingRepository
from app.db.retry import in_transaction
from app.db.sealing import OBJECT_SEALS, seal_rows
from app.db.session import session_scope
from app.db.single_statement_sql import TrashMove, inserted_row
from app.db.single_statements import AsyncStatements, SingleStatements
from app.db.types import utcnow

# COMPOSITE, FULL_OBJECT, PartSummary and StoredChecksum are re-exported for
# the HTTP layers, which never import app.db.
from app.kit.checksums import COMPOSITE as COMPOSITE
from app.kit.checksums import FULL_OBJECT as FULL_OBJECT
from app.store import encryption
from app.store.errors import NotOwner, ObjectNotFound
from app.store.gc import GarbageCollector
from app.store.locator import chunk_ref
from app.store.object_info import ObjectInfo as ObjectInfo
from app.store.object_seal import PLAIN, seal_from
from app.store.object_seal import ObjectSeal as ObjectSeal
from app.store.object_write import DEFAULT_CONTENT_TYPE as DEFAULT_CONTENT_TYPE
from app.store.object_write import ObjectWrite as ObjectWrite
from app.store.pending import PendingReads
from app.store.reader import PieceSpan, RangeReader, first_fetched
from app.store.spool import Spool
from app.store.writer import ChunkWriter, WrittenContent


class ObjectStore:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        writer: ChunkWriter,
        reader: RangeReader,
        gc: GarbageCollector,
        *,
        statements: SingleStatements | None = None,
        trash_retention: timedelta | None = None,
        spool: Spool | None = None,
        pending_copies: bool = True,
    ) -> None:
        self._sessionmaker = sessionmaker
        # A copy of a pending object is pending too (metadata only, resolved
        # at the source's flush: app.db.pending); COMPLETE_WAITS_FOR=telegram
        # makes it wait for that flush instead.
        self._pending_copies = pending_copies
        # Objects completed with parts still spooled are read from there.
        self._pending = PendingReads(sessionmaker, reader, writer.encryption, spool)
        # Deletes and replacements go to the trash for this long (the
        # sessions keep it too: app.db.trash.configure); small objects then
        # take the single statements that trash them instead of those that
        # overwrite or delete them in place.
        self._trash_retention = trash_retention
        # Default: Core statements on the sessions' engine (tests, tools).
        engine = sessionmaker.kw["bind"]
        self._statements = statements or AsyncStatements(engine, engine)
        self._writer = writer
        self._reader = reader
        self._gc = gc

    @property
    def encryption_enabled(self) -> bool:
        """Whether new chunks are sealed (ENCRYPTION_KEYS)."""
        return self._writer.encryption.enabled

    async def seal_of(self, info: ObjectInfo) -> ObjectSeal:
        """How the object's bytes in Telegram are sealed (docs/encryption.md).
        Objects without chunks ask nothing: they are in the database."""
        if info.size == 0 or info.inline_data is not None:
            return PLAIN
        rows = await self._statements.rows(OBJECT_SEALS, {"object_id": info.id})
        if not rows and await self._pending.is_pending(info.id):
            # No pieces yet: sealed as the flusher will seal its spooled parts
            # (never under a customer key: such parts are not spooled).
            seals = self._writer.encryption.seals_new_chunks
            return ObjectSeal(
                master=seals and self.encryption_enabled, customer=(), other_chunks=True
            )
        return seal_from(seal_rows(rows), master_keys=self.encryption_enabled)

    @staticmethod
    def customer_key(key: bytes | None) -> AbstractContextManager[None]:
        """Within the block, written chunks are sealed under the customer key
        `key` (S3 SSE-C), and chunks sealed under it open."""
        return encryption.customer_key(key)

    async def close(self) -> None:
        """Let statements in flight finish and close what they hold."""
        await self._statements.close()

    # --- writing ------------------------------------------------------------------

    async def write_content(
        self,
        stream: AsyncIterator[bytes],
        *,
        max_size: int | None = None,
        label: str = "",
        allow_inline: bool = True,
        expected_size: int | None = None,
    ) -> WrittenContent:
        return await self._writer.write(
            stream,
            max_size=max_size,
            label=label,
            allow_inline=allow_inline,
            expected_size=expected_size,
        )

    async def commit(self, content: WrittenContent, write: ObjectWrite) -> ObjectInfo:
        """Make `content` the object `write` names (replacing the one under its
        key, last writer wins). A refused write (NotOwner, or what its
        `check` raises) discards the content."""
        spec = ObjectSpec(
            bucket=write.bucket,
            key=write.key,
            name=write.name,
            content_type=write.stored_content_type,
            size=content.size,
            etag=f'"{content.md5_hex}"',
            md5=content.md5_hex,
            sha256=content.sha256_hex,
            user_metadata=dict(write.metadata),
            inline_data=content.inline_data,
            pieces=content.pieces,
            owner_key_id=write.owner_key_id,
            checksum=write.checksum() if write.checksum is not None else None,
            tags=write.tags,
        )

        if not content.pieces and write.check is None:
            # Small (the common case): one statement, no session, under a
            # new key or over an object that references no chunk. Writes
            # that need the version they replace, read under the key's lock
            # (its owner checked, its public id kept), take it under a new
            # key only; conditional writes and chunks to release take the
            # session's path.
            over_chunkless = not write.keep_public_id and write.only_if_owned_by is None
            stored = await self._store_small(spec, over_chunkless=over_chunkless)
            if stored is not None:
                return stored

        async def put(session: AsyncSession) -> tuple[ObjectInfo, int]:
            repo = ObjectRepository(session)
            row = await repo.put(
                spec,
                keep_public_id=write.keep_public_id,
                only_if_owned_by=write.only_if_owned_by,
                check=write.check,
            )
            return ObjectInfo.from_row(row, with_content=False), repo.chunks_released

        try:
            info, released = await in_transaction(self._sessionmaker, put)
        except db_objects.NotOwner as exc:
            await self.discard(content)
            raise NotOwner(str(exc)) from None
        except BaseException:
            await self.discard(content)
            raise
        # The replaced object's chunks are in the ledger now. Only then: a GC
        # round per small PUT would cost more than the PUT itself.
        if released:
            self._gc.wake()
        return info

    async def _store_small(self, spec: ObjectSpec, *, over_chunkless: bool) -> ObjectInfo | None:
        """`spec`, which references no chunk, stored in one statement under a
        new key or, if `over_chunkless`, over an object without chunks; None
        if the key is taken otherwise (the session's path)."""
        spec.check()
        now = utcnow()
        values = row_values(spec, new_public_id(), now, now)
        if over_chunkless and self._trash_retention:
            # A new key (the common case) is one statement; over an object,
            # that object goes to the trash in the same transaction as the
            # new row is written.
            new_id = await self._statements.insert_object_unless_exists(values)
            if new_id is not None:
                row_id = new_id
            else:
                outcome = await self._statements.trash_chunkless_object(
                    self._trash_move(spec.bucket, spec.key, "replaced", now), values
                )
                if outcome is None or outcome.stored is None:
                    return None
                row_id, values["created_at"] = outcome.stored
        elif over_chunkless:
            stored = await self._statements.put_chunkless_object(values)
            if stored is None:
                return None
            row_id, values["created_at"] = stored
        else:
            new_id = await self._statements.insert_object_unless_exists(values)
            if new_id is None:
                return None
            row_id = new_id
        return ObjectInfo.from_row(inserted_row(row_id, values), with_content=False)

    async def discard(self, content: WrittenContent) -> None:
        """Release the chunks of content that will not be committed."""
        if content.chunk_ids:
            # Shielded: this often runs while the caller is being cancelled.
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self._gc.release_chunks(content.chunk_ids, reason="failed_upload")
                )

    async def put_stream(self, stream: AsyncIterator[bytes], write: ObjectWrite) -> ObjectInfo:
        """Store the whole stream as the object `write` names."""
        content = await self.write_content(
            stream, max_size=write.max_size, label=write.key, expected_size=write.expected_size
        )
        return await self.commit(content, write)

    # --- reading ------------------------------------------------------------------

    async def get(self, bucket: str, key: str) -> ObjectInfo | None:
        row = await self._statements.object(bucket, key)
        return ObjectInfo.from_row(row) if row is not None else None

    async def damage(self, info: ObjectInfo, *, replicas: int) -> str | None:
        """'lost' when a chunk of the object has no intact copy left, 'degraded'
        when one has fewer than `replicas`, None when it is whole (inline
        objects always are)."""
        if info.inline_data is not None or info.size == 0:
            return None
        async with session_scope(self._sessionmaker) as session:
            return await CopyRepository(session).object_damage(info.id, replicas)

    async def parts_of(self, info: ObjectInfo) -> list[PartSummary] | None:
        """The parts of a multipart object (None for any other object)."""
        async with session_scope(self._sessionmaker) as session:
            return await ObjectRepository(session).parts_of(info.id)

    async def get_by_public_id(self, public_id: str, *, bucket: str) -> ObjectInfo | None:
        """The object with this public id, if it is in `bucket`: every object
        has a public id, and a caller of one bucket must never reach another's."""
        row = await self._statements.object_by_public_id(public_id)
        if row is None or row.bucket != bucket:
            return None
        return ObjectInfo.from_row(row)

    async def list(
        self,
        bucket: str,
        *,
        prefix: str = "",
        after_key: str | None = None,
        limit: int = 1000,
        name_prefix: str = "",
        order: ListOrder = "key",
        after_id: int | None = None,
    ) -> list[ObjectInfo]:
        async with session_scope(self._sessionmaker) as session:
            rows = await ObjectRepository(session).list(
                bucket,
                prefix,
                after_key,
                limit,
                name_prefix=name_prefix,
                order=order,
                after_id=after_id,
            )
            return [ObjectInfo.from_row(row, with_content=False) for row in rows]

    async def copy(
        self,
        source: ObjectInfo,
        *,
        bucket: str,
        key: str,
        name: str,
        content_type: str,
        metadata: Mapping[str, Any],
        tags: Mapping[str, str] | None = None,
    ) -> ObjectInfo | None:
        """A new object with the source's content, by reference to the same
        chunks (metadata only). None if the source changed meanwhile."""

        spec = ObjectSpec(
            bucket=bucket,
            key=key,
            name=name,
            content_type=content_type,
            size=source.size,
            etag=source.etag,
            md5=source.md5,
            sha256=source.sha256,
            user_metadata=dict(metadata),
            inline_data=source.inline_data,
            # A full-object checksum still holds; a composite one names parts
            # the copy does not have (AWS drops it too).
            checksum=source.checksum
            if source.checksum is not None and source.checksum.type == FULL_OBJECT
            else None,
            tags=tags,
        )
        if source.inline_data is not None:
            # The content is in hand: stored like a small PUT's.
            stored = await self._store_small(spec, over_chunkless=True)
            if stored is not None:
                return stored

        async def copy(session: AsyncSession) -> tuple[ObjectInfo, int] | None:
            repo = ObjectRepository(session)
            if source.inline_data is not None:
                pieces: list[PieceSpec] | None = []
            else:
                pieces = await repo.piece_specs(source.id, 0, source.size)
            if pieces is None:
                source_upload = None
                if self._pending_copies:
                    source_upload = await PendingRepository(session).lock_source(source.id)
                if source_upload is None:
                    return None
                pending = PendingRepository(session)
                copy_upload = await pending.copy_object(
                    source_upload, 0, bucket=bucket, key=key, size=source.size, etag=source.etag
                )
                row = await repo.put(replace(spec, pending=True))
                await pending.attach(copy_upload, row.id)
                return ObjectInfo.from_row(row, with_content=False), repo.chunks_released
            row = await repo.put(replace(spec, pieces=pieces))
            return ObjectInfo.from_row(row, with_content=False), repo.chunks_released

        try:
            copied = await in_transaction(self._sessionmaker, copy)
            if copied is None and await self.wait_settled(source):
                copied = await in_transaction(self._sessionmaker, copy)
        except ChunksMissing:
            # The source was replaced and its chunks released between reading
            # its pieces and locking them.
            return None
        if copied is None:
            return None
        info, released = copied
        if released:
            self._gc.wake()
        return info

    async def set_tags(self, bucket: str, key: str, tags: Mapping[str, str] | None) -> bool:
        """Replace the object's tags (None or empty: remove them); False if
        there is no object under (bucket, key)."""
        async with session_scope(self._sessionmaker) as session:
            return await ObjectRepository(session).set_tags(bucket, key, tags)

    async def wait_settled(self, info: ObjectInfo) -> bool:
        """If the object is pending, wait until its bytes are in Telegram
        (a metadata-only copy needs its pieces); whether it was pending.
        Raises ContentPending past PENDING_COPY_WAIT."""
        return await self._pending.settled(info.id, f"{info.bucket}/{info.key}")

    def keeps_the_pool_busy(self, size: int) -> bool:
        return self._writer.keeps_the_pool_busy(size)

    def count_uploaded_bytes(self, size: int) -> None:
        """Bytes received from a client that the writer did not see (spooled)."""
        self._writer.count_bytes(size)

    def wake_gc(self) -> None:
        self._gc.wake()

    def inline_range(self, info: ObjectInfo, start: int, end: int) -> bytes | None:
        """The bytes [start, end) of an object held in its row; None if it is
        in chunks and must be streamed (`open_range`)."""
        if info.inline_data is None and info.size > 0:
            return None
        return (info.inline_data or b"")[start:end] if end > start else b""

    async def open_range(self, info: ObjectInfo, start: int, end: int) -> AsyncIterator[bytes]:
        """The bytes [start, end) of an object, as a stream.

        The pieces are resolved now (a replaced object raises ObjectNotFound
        before any header is sent); the bytes are fetched as the stream is read.
        """
        if end <= start:
            return _from_bytes(b"")
        if info.inline_data is not None or info.size <= 0:
            return _from_bytes((info.inline_data or b"")[start:end])
        async with session_scope(self._sessionmaker) as session:
            trimmed = await ObjectRepository(session).covering_pieces(info.id, start, end)
        if trimmed is None:
            # Pending (its parts partly in the spool), or replaced meanwhile.
            label = f"{info.bucket}/{info.key}"
            pending = await self._pending.open(info.id, label, start, end)
            if pending is not None:
                return pending
            async with session_scope(self._sessionmaker) as session:
                trimmed = await ObjectRepository(session).covering_pieces(info.id, start, end)
        if trimmed is None:
            # The object was replaced or deleted after `info` was read.
            raise ObjectNotFound(f"object {info.bucket}/{info.key} changed while being read")
        # A sealed chunk's data key is unwrapped now: a master key that is
        # not configured is an error before any header goes out.
        encryption = self._writer.encryption
        spans = [
            PieceSpan(chunk=chunk_ref(chunk, encryption), offset=spec.offset, length=spec.length)
            for spec, chunk in trimmed
        ]
        return await first_fetched(self._reader.stream(spans))

    # --- deleting -----------------------------------------------------------------

    async def delete(self, bucket: str, key: str) -> bool:
        # One statement when there are no chunks to release (small objects,
        # as a registry's upload state files), and one read more when there
        # is no object at all (a delete is answered alike either way, and
        # clients send it for keys long gone); the session finds and releases
        # the chunks otherwise. An object written between the two statements
        # came after this delete. With the trash on, the read comes first
        # (an absent key costs no transaction), then a small object goes to
        # the trash in one short transaction; one with chunks, in the session.
        if self._trash_retention:
            if await self._statements.object(bucket, key) is None:
                return False
            outcome = await self._statements.trash_chunkless_object(
                self._trash_move(bucket, key, "deleted", utcnow())
            )
            if outcome is not None:
                return outcome.trashed
        else:
            if await self._statements.delete_chunkless_object(bucket, key):
                return True
            if await self._statements.object(bucket, key) is None:
                return False
        return await self._deleted(lambda repo: repo.delete(bucket, key))

    def _trash_move(self, bucket: str, key: str, reason: str, now: datetime) -> TrashMove:
        assert self._trash_retention is not None
        return TrashMove(bucket, key, reason, now, now + self._trash_retention)

    async def delete_by_public_id(
        self, public_id: str, *, bucket: str, only_if_owned_by: int | None = None
    ) -> bool:
        """False if no object in `bucket` has this id; NotOwner if
        `only_if_owned_by` is given and the object belongs to another key
        (nothing deleted)."""
        try:
            return await self._deleted(
                lambda repo: repo.delete_by_public_id(
                    public_id, bucket=bucket, only_if_owned_by=only_if_owned_by
                )
            )
        except db_objects.NotOwner as exc:
            raise NotOwner(str(exc)) from None

    async def _deleted(self, delete: Callable[[ObjectRepository], Awaitable[bool]]) -> bool:
        """`delete` in a transaction, run again if Postgres makes it a
        deadlock's victim (a pending object settling at that moment locks the
        same rows); the collector is woken when it released chunks."""

        async def work(session: AsyncSession) -> tuple[bool, int]:
            repo = ObjectRepository(session)
            return await delete(repo), repo.chunks_released

        deleted, released = await in_transaction(self._sessionmaker, work)
        if released:
            self._gc.wake()
        return deleted


async def _from_bytes(data: bytes) -> AsyncIterator[bytes]:
    if data:
        yield data
