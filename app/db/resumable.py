"""Resumable (tus) uploads: their rows, and their bytes as multipart parts.

A tus upload is a `TusUpload` row plus the multipart upload of the same id
(bucket and key chosen by the caller). Every durable segment of a PATCH
becomes the next part, in the same transaction that advances the upload's
offset, so the offset never counts a byte that has no part behind it.

Locks: every change locks the tus row first (FOR UPDATE; on SQLite the
database write lock), then the multipart upload, as the multipart repository
does. Two PATCHes racing on one upload queue on the row; the second finds the
offset moved and is refused. A concatenation locks its partials' rows, then
their multipart uploads FOR UPDATE: the lock the flusher's commit of a
spooled part takes, so that commit either comes before it or sees its final.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.locking import lock_database_for_write
from app.db.models import (
    MAX_PART_NUMBER,
    MultipartUpload,
    PartPiece,
    SpooledPart,
    TusUpload,
    UploadPart,
)
from app.db.multipart import MultipartRepository
from app.db.multipart_errors import PartsNotStored
from app.db.multipart_etag import multipart_etag
from app.db.object_rows import ObjectRow, ObjectSpec, PieceSpec
from app.db.objects import ObjectRepository
from app.db.spool import SpoolRepository
from app.db.types import utcnow
from app.db.upload_ids import new_upload_id


class TusUploadMissing(Exception):
    """No such upload: never created, terminated, expired and cleaned, or
    (a partial) consumed by a final upload."""

    def __init__(self, upload_id: str) -> None:
        self.upload_id = upload_id
        super().__init__(f"no upload {upload_id!r}")


class OffsetMismatch(Exception):
    """The upload's offset is not where the client said it was."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        super().__init__(f"the upload's offset is {offset}")


class TooManySegments(Exception):
    """The upload already has MAX_PART_NUMBER segments."""


class AlreadyComplete(Exception):
    """The upload has all its bytes; nothing more can be appended."""


class ConcatenationRefused(Exception):
    """A final upload names partial uploads that cannot be concatenated."""


@dataclass(frozen=True, slots=True)
class Segment:
    """Durable bytes to append: a spool file (`path`) or stored chunk ranges."""

    size: int
    etag: str
    path: str | None = None
    pieces: Sequence[PieceSpec] = ()


class TusRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._multipart = MultipartRepository(session)

    async def create(
        self,
        *,
        api_key_id: int,
        kind: str,
        length: int | None,
        metadata: str,
        bucket: str,
        key: str,
        content_type: str,
        expires_at: datetime,
    ) -> TusUpload:
        """A new upload with no bytes (and the multipart upload behind it)."""
        upload = await self._multipart.create(
            bucket=bucket, key=key, content_type=content_type, user_metadata={}
        )
        row = TusUpload(
            id=upload.id,
            api_key_id=api_key_id,
            kind=kind,
            length=length,
            offset=0,
            parts=0,
            upload_metadata=metadata,
            expires_at=expires_at,
            created_at=utcnow(),
        )
        self._session.add(row)
        await self._session.flush()
        return row

    async def get(self, upload_id: str) -> TusUpload | None:
        return await self._session.scalar(
            select(TusUpload)
            .where(TusUpload.id == upload_id)
            .execution_options(populate_existing=True)
        )

    async def append(
        self,
        upload_id: str,
        at_offset: int,
        segments: Sequence[Segment],
        *,
        owner: str,
        expires_at: datetime,
    ) -> TusUpload:
        """Record segments as the next parts, from `at_offset` on, in order.

        Raises, having written nothing: TusUploadMissing, OffsetMismatch,
        AlreadyComplete, TooManySegments, and ValueError past the length.
        """
        row = await self._lock(upload_id)
        # The offset first: a PATCH that another one overtook and completed
        # is told where the upload is (409), as if it had come after it.
        if row.offset != at_offset:
            raise OffsetMismatch(row.offset)
        if row.public_id is not None:
            raise AlreadyComplete()
        added = sum(segment.size for segment in segments)
        if row.length is not None and row.offset + added > row.length:
            raise ValueError(f"{added} bytes from offset {row.offset} pass the length")
        if row.parts + len(segments) > MAX_PART_NUMBER:
            raise TooManySegments()
        upload = await self._session.get(MultipartUpload, upload_id)
        if upload is None:
            raise TusUploadMissing(upload_id)
        spool = SpoolRepository(self._session)
        for number, segment in enumerate(segments, start=row.parts + 1):
            if segment.path is not None:
                await spool.put(
                    upload_id,
                    number,
                    size=segment.size,
                    etag=segment.etag,
                    path=segment.path,
                    owner=owner,
                    bucket=upload.bucket,
                    key=upload.key,
                )
            else:
                await self._multipart.put_part(
                    upload_id,
                    number,
                    size=segment.size,
                    etag=segment.etag,
                    pieces=segment.pieces,
                    bucket=upload.bucket,
                    key=upload.key,
                )
        row.offset += added
        row.parts += len(segments)
        row.expires_at = expires_at
        await self._session.flush()
        return row

    async def declare_length(self, upload_id: str, length: int) -> TusUpload:
        """Set a deferred length once. Raises TusUploadMissing, and
        ValueError if a length is set already or the upload is longer."""
        row = await self._lock(upload_id)
        if row.length is not None:
            if row.length == length:
                return row
            raise ValueError(f"the upload's length is already {row.length}")
        if length < row.offset:
            raise ValueError(f"the upload already has {row.offset} bytes")
        row.length = length
        await self._session.flush()
        return row

    async def complete(
        self, upload_id: str, *, name: str, allow_spooled: bool = False
    ) -> tuple[TusUpload, ObjectRow]:
        """Turn all the upload's parts into the object, in one transaction.

        Raises TusUploadMissing, PartsNotStored (wait for the flusher; with
        `allow_spooled` the object is pending instead: app.db.pending), and
        ValueError when the upload does not have all its bytes."""
        row = await self._lock(upload_id)
        if row.length is None or row.offset != row.length:
            raise ValueError("the upload does not have all its bytes yet")
        parts = await self._session.execute(
            select(UploadPart.part_number, UploadPart.etag)
            .where(UploadPart.upload_id == upload_id)
            .order_by(UploadPart.part_number)
        )
        created = await self._multipart.complete(
            upload_id,
            [(number, etag) for number, etag in parts],
            name=name,
            owner_key_id=row.api_key_id,
            allow_spooled=allow_spooled,
        )
        row.public_id = created.public_id
        await self._session.flush()
        return row, created

    async def concatenate(
        self,
        *,
        api_key_id: int,
        partial_ids: Sequence[str],
        metadata: str,
        bucket: str,
        key: str,
        name: str,
        content_type: str,
        expires_at: datetime,
        allow_spooled: bool = False,
    ) -> tuple[TusUpload, ObjectRow, builtins.list[str]]:
        """A final upload: the object made of the partial uploads' parts, in
        order (metadata only). The partials are consumed. Also returns the
        partials whose bytes are still partly spooled (for the flusher).

        With every byte in Telegram the object gets its pieces at once. With
        `allow_spooled`, bytes still in the spool make it pending
        (app.db.pending): its upload has one part per partial, that partial's
        pieces, or, while some of the partial's parts are spooled, a copy of
        the partial's upload, which stays (completed, without object) until
        the flusher's commit of its last spooled part finalises it and, with
        it, resolves the copy.

        Raises ConcatenationRefused (a partial missing, another key's, not a
        partial, or not finished) and PartsNotStored (some bytes are still
        spooled, without `allow_spooled`: wait for the flusher)."""
        if len(set(partial_ids)) != len(partial_ids):
            raise ConcatenationRefused("a partial upload is named twice")
        await lock_database_for_write(self._session)
        # Locked in id order, so two finals naming the same partials in
        # different orders cannot deadlock.
        locked = {
            row.id: row
            for row in await self._session.scalars(
                select(TusUpload)
                .where(TusUpload.id.in_(builtins.list(partial_ids)))
                .order_by(TusUpload.id)
                .with_for_update()
                .execution_options(populate_existing=True)
            )
        }
        partials: list[TusUpload] = []
        for partial_id in partial_ids:
            partial = locked.get(partial_id)
            if partial is None or partial.api_key_id != api_key_id:
                raise ConcatenationRefused(f"no partial upload {partial_id!r}")
            if partial.kind != "partial":
                raise ConcatenationRefused(f"upload {partial_id!r} is not a partial upload")
            if partial.length is None or partial.offset != partial.length:
                raise ConcatenationRefused(f"partial upload {partial_id!r} is not finished")
            partials.append(partial)
        ids = [partial.id for partial in partials]
        # Their uploads too, as the flusher's commit of a spooled part locks
        # one: a part committed before is seen in Telegram here, and one
        # committed after finds its upload completed, and finalises it.
        await self._session.execute(
            select(MultipartUpload.id)
            .where(MultipartUpload.id.in_(sorted(ids)))
            .order_by(MultipartUpload.id)
            .with_for_update()
        )

        stored: dict[str, list[PieceSpec] | None] = {}
        etags: dict[str, list[str]] = {}
        for partial in partials:
            stored[partial.id] = await self._stored_pieces(partial)
            etags[partial.id] = builtins.list(
                await self._session.scalars(
                    select(UploadPart.etag)
                    .where(UploadPart.upload_id == partial.id)
                    .order_by(UploadPart.part_number)
                )
            )
        spooled = [partial.id for partial in partials if stored[partial.id] is None]
        if spooled and not allow_spooled:
            raise PartsNotStored(
                await self._session.scalars(
                    select(SpooledPart.part_number).where(SpooledPart.upload_id.in_(spooled))
                )
            )
        size = sum(partial.offset for partial in partials)
        created = await ObjectRepository(self._session).put(
            ObjectSpec(
                bucket=bucket,
                key=key,
                name=name,
                content_type=content_type,
                size=size,
                etag=multipart_etag([etag for i in ids for etag in etags[i]]),
                pieces=[] if spooled else [piece for i in ids for piece in stored[i] or ()],
                owner_key_id=api_key_id,
                pending=bool(spooled),
            )
        )
        if spooled:
            await self._pending_final(created.id, partials, stored, etags, bucket, key)
        # The partials' uploads in Telegram go; their chunks now belong to the
        # object (or the final's upload). Those still spooled stay as copies' sources.
        done = [i for i in ids if stored[i] is not None]
        await self._session.execute(delete(MultipartUpload).where(MultipartUpload.id.in_(done)))
        await self._session.execute(delete(TusUpload).where(TusUpload.id.in_(ids)))
        final = TusUpload(
            id=new_upload_id(),
            api_key_id=api_key_id,
            kind="final",
            length=size,
            offset=size,
            parts=0,
            upload_metadata=metadata,
            concat=" ".join(ids),
            public_id=created.public_id,
            expires_at=expires_at,
            created_at=utcnow(),
        )
        self._session.add(final)
        await self._session.flush()
        return final, created, spooled

    async def _pending_final(
        self,
        object_id: int,
        partials: Sequence[TusUpload],
        stored: dict[str, list[PieceSpec] | None],
        etags: dict[str, list[str]],
        bucket: str,
        key: str,
    ) -> None:
        """The completed upload the pending object `object_id` reads from:
        part n is partial n's bytes, its pieces or a copy of its upload."""
        upload = await self._multipart.create(
            bucket=bucket, key=key, content_type="", user_metadata={}
        )
        number = 0
        for partial in partials:
            if not partial.offset:
                continue  # an empty partial adds no bytes
            number += 1
            pieces = stored[partial.id]
            await self._multipart.put_part(
                upload.id,
                number,
                size=partial.offset,
                etag=multipart_etag(etags[partial.id]),
                pieces=pieces or [],
                copy_of=None if pieces is not None else (partial.id, 0),
            )
        now = utcnow()
        # Completed without an object: hidden from the multipart API, finalised
        # by the commit of its last spooled part (app.db.pending).
        await self._session.execute(
            update(MultipartUpload)
            .where(MultipartUpload.id.in_([p.id for p in partials if stored[p.id] is None]))
            .values(completed_at=now)
            .execution_options(synchronize_session=False)
        )
        upload.completed_at = now
        upload.completed_object_id = object_id
        await self._session.flush()

    async def terminate(self, upload_id: str) -> list[str]:
        """Delete the upload, its parts (chunks released, 'aborted') and its
        row; returns its spool files, to delete once this commits.
        Raises TusUploadMissing."""
        row = await self._lock(upload_id)
        paths = await SpoolRepository(self._session).paths_of_upload(upload_id)
        await self._multipart.abort(upload_id)
        await self._session.execute(delete(TusUpload).where(TusUpload.id == row.id))
        self._session.expunge(row)
        return paths

    async def expired(self, now: datetime, limit: int) -> builtins.list[str]:
        return builtins.list(
            await self._session.scalars(
                select(TusUpload.id)
                .where(TusUpload.expires_at < now)
                .order_by(TusUpload.expires_at)
                .limit(limit)
            )
        )

    async def _stored_pieces(self, partial: TusUpload) -> list[PieceSpec] | None:
        """The partial's bytes as pieces; None while some are spooled."""
        rows = (
            await self._session.execute(
                select(
                    PartPiece.part_number, PartPiece.chunk_id, PartPiece.offset, PartPiece.length
                )
                .where(PartPiece.upload_id == partial.id)
                .order_by(PartPiece.part_number, PartPiece.seq)
            )
        ).all()
        if sum(length for *_, length in rows) != partial.offset:
            return None
        return [PieceSpec(chunk_id, offset, length) for _, chunk_id, offset, length in rows]

    async def _lock(self, upload_id: str) -> TusUpload:
        await lock_database_for_write(self._session)
        row = await self._session.scalar(
            select(TusUpload)
            .where(TusUpload.id == upload_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        if row is None:
            raise TusUploadMissing(upload_id)
        return row
