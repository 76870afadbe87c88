"""Multipart uploads: parts stored one by one, an object made of them at the end.

Write-behind: a part of known size under half of bots x CHUNK_SIZE (on its
own it would leave bots idle) is written to the local staging spool, made
durable, recorded, and acknowledged at disk speed; the flusher sends it to
Telegram in the background, in full chunks cut across parts. Completing
answers once the listed parts are durable (an object whose parts are still
spooled is pending, read from the spool until the flush: app.db.pending),
or, with COMPLETE_WAITS_FOR=telegram, waits for them to be flushed. A
bigger part, or one of unknown size, or any part when the spool is off or
full, goes through the chunk writer while the client waits, as any upload
(cut into equal chunks that keep every bot busy; never inline: an object is
inline or pieces, not both).

A part copied from an existing object points into that object's chunks
(metadata only); in an upload with a checksum algorithm its bytes are read
back once, streamed, for the part's checksum (range_checksum.py). Completing
writes the object from the listed parts' pieces in one transaction; the
chunks of parts left out, replaced or aborted go to the GC ledger, and their
spool files are deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import ChunksMissing
from app.db.models import MultipartUpload, UploadPart
from app.db.multipart import MultipartRepository
from app.db.multipart_errors import (
    InvalidPart,
    InvalidPartOrder,
    PartsNotStored,
    PartTooSmall,
    UploadMissing,
)
from app.db.multipart_etag import multipart_etag, unquote_etag
from app.db.object_rows import PieceSpec
from app.db.objects import ObjectRepository, WriteCheck
from app.db.pending import PendingRepository
from app.db.retry import in_transaction
from app.db.sealing import SealingRepository
from app.db.session import session_scope
from app.db.spool import SpoolRepository
from app.store.encryption import customer_key_given
from app.store.errors import ObjectNotFound
from app.store.flusher import Flusher, FlushFailed
from app.store.object_seal import ObjectSeal, seal_from
from app.store.range_checksum import range_checksum
from app.store.service import ObjectInfo, ObjectStore
from app.store.spool import Spool, SpoolFull

#: Before Complete looks again at parts that were not stored yet.
RECHECK_PAUSE = 0.2

__all__ = [
    "FlushFailed",
    "InvalidPart",
    "InvalidPartOrder",
    "MultipartStore",
    "PartInfo",
    "PartTooSmall",
    "UploadInfo",
    "UploadMissing",
]


@dataclass(frozen=True, slots=True)
class UploadInfo:
    upload_id: str
    bucket: str
    key: str
    created_at: datetime
    #: ChecksumAlgorithm (lowercase) and ChecksumType asked for at creation.
    checksum_algorithm: str | None = None
    checksum_type: str | None = None

    @classmethod
    def from_row(cls, row: MultipartUpload) -> UploadInfo:
        return cls(
            row.id,
            row.bucket,
            row.key,
            row.created_at,
            row.checksum_algorithm,
            row.checksum_type,
        )


@dataclass(frozen=True, slots=True)
class PartInfo:
    part_number: int
    size: int
    etag: str
    created_at: datetime
    checksum: str | None = None

    @classmethod
    def from_row(cls, row: UploadPart) -> PartInfo:
        return cls(row.part_number, row.size, row.etag, row.created_at, row.checksum)


class MultipartStore:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        objects: ObjectStore,
        *,
        spool: Spool | None = None,
        flusher: Flusher | None = None,
        min_part_size: int = 0,
        wait_for_telegram: bool = False,
    ) -> None:
        self._sessionmaker = sessionmaker
        # COMPLETE_WAITS_FOR=telegram: Complete waits for the flush of its
        # parts, as before objects could be pending (app.db.pending).
        self._wait_for_telegram = wait_for_telegram
        self._objects = objects
        self._spool = spool if spool is not None and spool.enabled else None
        self._flusher = flusher
        self._min_part_size = min_part_size

    async def create(
        self,
        *,
        bucket: str,
        key: str,
        content_type: str,
        metadata: Mapping[str, Any],
        checksum_algorithm: str | None = None,
        checksum_type: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> UploadInfo:
        async with session_scope(self._sessionmaker) as session:
            row = await MultipartRepository(session).create(
                bucket=bucket,
                key=key,
                content_type=content_type,
                user_metadata=dict(metadata),
                checksum_algorithm=checksum_algorithm,
                checksum_type=checksum_type,
                tags=tags,
            )
            return UploadInfo.from_row(row)

    async def get(self, upload_id: str, *, bucket: str, key: str) -> UploadInfo | None:
        async with session_scope(self._sessionmaker) as session:
            row = await MultipartRepository(session).get(upload_id, bucket=bucket, key=key)
            return UploadInfo.from_row(row) if row is not None else None

    async def upload_part(
        self,
        upload: UploadInfo,
        part_number: int,
        body: AsyncIterator[bytes],
        *,
        max_size: int,
        expected_size: int | None,
        checksum: Callable[[], str | None] | None = None,
    ) -> str:
        """Store one part from a stream; returns its ETag (quoted MD5).
        `checksum` is asked once the stream ended: the part's checksum.

        Raises UploadMissing (the upload was completed or aborted meanwhile;
        the part's chunks are released), UploadTooLarge and ChatsFull."""
        self._objects.require_room()  # before the spool acknowledges a byte
        spool = self._spool
        # A part big enough to keep the bots busy on its own gains nothing from
        # waiting in the spool: it goes straight on, cut into equal chunks.
        # (A registry's one-part blob of 100 MiB: 6 x 16.7 MiB at once.)
        if (
            spool is not None
            and expected_size
            and not customer_key_given()  # the spool holds plaintext
            and not self._objects.keeps_the_pool_busy(expected_size)
            and spool.reserve(expected_size)
        ):
            try:
                return await self._spool_part(
                    spool,
                    upload,
                    part_number,
                    body,
                    max_size=max_size,
                    size=expected_size,
                    checksum=checksum,
                )
            except SpoolFull as full:
                body = full.received  # the disk filled: the rest goes straight on
        content = await self._objects.write_content(
            body,
            max_size=max_size,
            label=f"{upload.key} part {part_number}",
            allow_inline=False,
            expected_size=expected_size,
        )
        etag = f'"{content.md5_hex}"'
        try:
            await self._put_part(
                upload,
                part_number,
                content.size,
                etag,
                content.pieces,
                checksum=checksum() if checksum is not None else None,
            )
        except BaseException:
            await self._objects.discard(content)
            raise
        return etag

    async def _spool_part(
        self,
        spool: Spool,
        upload: UploadInfo,
        part_number: int,
        body: AsyncIterator[bytes],
        *,
        max_size: int,
        size: int,
        etag: str | None = None,
        checksum: Callable[[], str | None] | None = None,
    ) -> str:
        """Spool a part and record it; its ETag is its MD5 unless given (a
        copy, whose bytes are not counted as received from a client)."""
        written = await spool.write(
            body,
            reserved=size,
            max_size=max_size,
            on_bytes=self._objects.count_uploaded_bytes if etag is None else None,
        )
        etag = etag or f'"{written.md5_hex}"'
        try:
            async with session_scope(self._sessionmaker) as session:
                replaced = await SpoolRepository(session).put(
                    upload.upload_id,
                    part_number,
                    size=written.size,
                    etag=etag,
                    path=written.path,
                    owner=spool.instance_id,
                    bucket=upload.bucket,
                    key=upload.key,
                    checksum=checksum() if checksum is not None else None,
                    md5=written.md5_hex,
                )
        except BaseException:
            await spool.delete([written.path])
            raise
        await spool.delete(replaced)
        self._objects.wake_gc()
        if self._flusher is not None:
            self._flusher.notify(upload.upload_id)
        return etag

    async def seal_of(self, upload: UploadInfo, *, sample: bool = False) -> ObjectSeal:
        """How the upload's parts so far are sealed (SSE-C: every part must
        bring the same customer key). `sample`: one chunk's seal only, which
        is enough when every part is checked as it comes (one row, not a
        scan per part of an upload of thousands)."""
        async with session_scope(self._sessionmaker) as session:
            repo = SealingRepository(session)
            rows = await repo.upload_seals(upload.upload_id, limit=1 if sample else None)
        return seal_from(rows, master_keys=self._objects.encryption_enabled)

    async def upload_part_copy(
        self,
        upload: UploadInfo,
        part_number: int,
        source: ObjectInfo,
        start: int,
        end: int,
        *,
        etag: str,
    ) -> str | None:
        """A part made of bytes [start, end) of an existing object, by
        reference to its chunks, with a checksum in its upload's algorithm as
        an uploaded part has; that checksum (None without an algorithm).
        Raises ObjectNotFound if the source changed, ContentUnavailable if
        the bytes to checksum cannot be read now."""
        checksum = None
        if upload.checksum_algorithm is not None:
            # Before the part is recorded: a copy whose checksum cannot be
            # had leaves no part without one behind.
            checksum = await range_checksum(
                self._objects, source, start, end, upload.checksum_algorithm
            )
        if source.inline_data is not None:
            # Small objects live in the database; a part must be in chunks.
            await self.upload_part_from_bytes(
                upload, part_number, source.inline_data[start:end], etag, checksum=checksum
            )
            return checksum
        changed = ObjectNotFound(f"{source.bucket}/{source.key} changed while being copied")

        async def put_part(session: AsyncSession) -> None:
            pieces = await ObjectRepository(session).piece_specs(source.id, start, end)
            copy_of = None
            if pieces is None and not self._wait_for_telegram:
                # A pending source: the part is a copy of its bytes, resolved
                # when they are flushed (app.db.pending).
                source_upload = await PendingRepository(session).lock_source(source.id)
                if source_upload is not None:
                    pieces, copy_of = [], (source_upload, start)
            if pieces is None:
                raise changed
            await MultipartRepository(session).put_part(
                upload.upload_id,
                part_number,
                size=end - start,
                etag=etag,
                pieces=pieces,
                bucket=upload.bucket,
                key=upload.key,
                checksum=checksum,
                copy_of=copy_of,
            )

        for attempt in range(2):
            try:
                await in_transaction(self._sessionmaker, put_part)
                break
            except ChunksMissing:
                # Released between reading the source's pieces and locking them.
                raise changed from None
            except ObjectNotFound:
                # A pending source has no pieces until its flush: wait for it once.
                if attempt or not await self._objects.wait_settled(source):
                    raise
        return checksum

    async def upload_part_from_bytes(
        self,
        upload: UploadInfo,
        part_number: int,
        data: bytes,
        etag: str,
        *,
        checksum: str | None = None,
    ) -> None:
        """A part from bytes in hand (a copy of an inline object): spooled
        when it can be, else stored in Telegram now."""
        spool = self._spool
        if spool is not None and data and not customer_key_given() and spool.reserve(len(data)):
            try:
                await self._spool_part(
                    spool,
                    upload,
                    part_number,
                    _single(data),
                    max_size=len(data),
                    size=len(data),
                    etag=etag,
                    checksum=lambda: checksum,
                )
                return
            except SpoolFull:
                pass  # the whole part is still in `data`
        content = await self._objects.write_content(_single(data), allow_inline=False)
        try:
            await self._put_part(
                upload, part_number, len(data), etag, content.pieces, checksum=checksum
            )
        except BaseException:
            await self._objects.discard(content)
            raise

    async def _put_part(
        self,
        upload: UploadInfo,
        part_number: int,
        size: int,
        etag: str,
        pieces: Sequence[PieceSpec],
        *,
        checksum: str | None = None,
    ) -> None:
        async with session_scope(self._sessionmaker) as session:
            await MultipartRepository(session).put_part(
                upload.upload_id,
                part_number,
                size=size,
                etag=etag,
                pieces=pieces,
                bucket=upload.bucket,
                key=upload.key,
                checksum=checksum,
            )

    async def list_parts(
        self, upload_id: str, *, bucket: str, key: str, after: int, limit: int
    ) -> list[PartInfo]:
        """Raises UploadMissing."""
        async with session_scope(self._sessionmaker) as session:
            rows = await MultipartRepository(session).list_parts(
                upload_id, bucket=bucket, key=key, after=after, limit=limit
            )
            return [PartInfo.from_row(row) for row in rows]

    async def abort(self, upload: UploadInfo) -> bool:
        spooled = await self._spooled_paths(upload)
        async with session_scope(self._sessionmaker) as session:
            aborted = await MultipartRepository(session).abort(
                upload.upload_id, bucket=upload.bucket, key=upload.key
            )
        await self._forget_spooled(spooled)
        self._objects.wake_gc()
        return aborted

    async def complete(
        self,
        upload: UploadInfo,
        parts: Sequence[tuple[int, str]],
        *,
        name: str,
        check: WriteCheck | None = None,
    ) -> ObjectInfo:
        """Raises UploadMissing, InvalidPartOrder, InvalidPart, PartTooSmall
        (a part but the last under `min_part_size`), what `check` raises,
        and, waiting for Telegram, FlushFailed when listed parts are in the
        spool and cannot reach Telegram now.

        Parts still in the spool make the object pending (app.db.pending),
        answered at once, unless COMPLETE_WAITS_FOR=telegram."""
        numbers = [number for number, _ in parts]
        pending = self._flusher is not None and not self._wait_for_telegram
        while True:
            if self._flusher is not None and not pending:
                await self._flusher.flushed(upload.upload_id, numbers)
            spooled = await self._spooled_paths(upload)
            try:
                async with session_scope(self._sessionmaker) as session:
                    row = await MultipartRepository(session).complete(
                        upload.upload_id,
                        parts,
                        name=name,
                        bucket=upload.bucket,
                        key=upload.key,
                        min_part_size=self._min_part_size,
                        check=check,
                        allow_spooled=pending,
                    )
                    info = ObjectInfo.from_row(row, with_content=False)
            except PartsNotStored:
                if self._flusher is None:
                    raise
                # A listed part was uploaded again meanwhile, or (the setting
                # changed since) is a copy of bytes still on their way.
                await asyncio.sleep(RECHECK_PAUSE)
                continue
            break
        await self._forget_spooled(spooled)
        if spooled and self._flusher is not None:
            # The upload's tail goes now, not after the idle wait.
            self._flusher.seal(upload.upload_id)
        self._objects.wake_gc()
        return info

    async def completed_object(
        self, bucket: str, key: str, parts: Sequence[tuple[int, str]]
    ) -> ObjectInfo | None:
        """The object at bucket/key if it is what completing an upload with
        exactly these (part number, ETag) parts made: its multipart ETag is
        derived from the parts' ETags, in order. None otherwise (never
        completed, or replaced since)."""
        info = await self._objects.get(bucket, key)
        if info is None:
            return None
        expected = multipart_etag([etag for _, etag in parts])
        return info if unquote_etag(info.etag) == unquote_etag(expected) else None

    async def _spooled_paths(self, upload: UploadInfo) -> list[str]:
        if self._spool is None:
            return []
        async with session_scope(self._sessionmaker) as session:
            return await SpoolRepository(session).paths_of_upload(upload.upload_id)

    async def _forget_spooled(self, paths: list[str]) -> None:
        """Delete the spool files of parts whose rows are gone (left out of a
        completion, or aborted); the flusher skips such parts."""
        if self._spool is None or not paths:
            return
        async with session_scope(self._sessionmaker) as session:
            still = await SpoolRepository(session).all_paths()
        await self._spool.delete(path for path in paths if path not in still)


async def _single(data: bytes) -> AsyncIterator[bytes]:
    yield data
