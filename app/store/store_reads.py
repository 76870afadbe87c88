"""The object store's reads: an object by key or public id, listings, its
damage and parts, and its bytes: from its row when small, else streamed
from the chunks a range touches (or from the spool while it is pending)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from app.db.copies import CopyRepository
from app.db.object_rows import PartSummary
from app.db.objects import ListOrder, ObjectRepository
from app.db.session import session_scope
from app.store.errors import ObjectNotFound
from app.store.locator import chunk_ref
from app.store.object_info import ObjectInfo
from app.store.reader import PieceSpan, first_fetched
from app.store.store_parts import StoreParts


class ObjectReads(StoreParts):
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


async def _from_bytes(data: bytes) -> AsyncIterator[bytes]:
    if data:
        yield data
