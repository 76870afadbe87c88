"""The object store's writes: content first, then the object that names it
(see app/store/service.py), copies by reference, and tags."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db import objects as db_objects
from app.db.chunks import ChunksMissing
from app.db.object_rows import ObjectSpec, PieceSpec
from app.db.objects import ObjectRepository
from app.db.pending import PendingRepository
from app.db.retry import in_transaction
from app.db.session import session_scope
from app.kit.checksums import FULL_OBJECT
from app.store.errors import NotOwner
from app.store.object_info import ObjectInfo
from app.store.object_write import ObjectWrite
from app.store.store_parts import StoreParts
from app.store.writer import WrittenContent


class ObjectWrites(StoreParts):
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
