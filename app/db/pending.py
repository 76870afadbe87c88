"""Pending objects: completed while some of their parts were still spooled.

With COMPLETE_WAITS_FOR=spool, CompleteMultipartUpload writes the object's
row at once (size, ETag, metadata: it lists and reads as any object) but no
pieces: its upload stays, completed (`completed_at`, `completed_object_id`
naming the object), with its parts: in Telegram (part pieces), still on disk
(spool rows), or copies of another such upload's bytes (`PendingCopy`). A
completed upload is hidden from the multipart API.

Copies stay metadata only: a copy (CopyObject, UploadPartCopy) of a pending
object is a part whose bytes are a range of the source's upload, a
`PendingCopy` row (a CopyObject makes the new object pending with a
completed upload of that one part). A registry moves every finished blob
that way (copy, then delete the source): the move costs nothing, and the
bytes go to Telegram once. A tus final upload is made so too: its upload's
parts are copies of its partials' uploads, which stay completed without an
object until their flush (app.db.resumable).

`finalise` runs in the transaction of the flusher's commit of an upload's
last spooled part (and again for each upload whose copies it resolves):
once none of its parts is spooled or a copy, its object gets the pieces of
its parts, in order; each copy of its bytes gets its part pieces (then the
copy's upload may finalise in turn); and the upload goes. A crash between
two commits leaves spool rows the restarted flusher resumes.

Deleting, replacing or trashing a pending object: the upload goes with the
row (ON DELETE CASCADE), so every path that deletes an object row releases
the chunks of its parts too (`detach_sources`), and the chunkless
one-statement paths leave pending objects to the session (`pending_object`).
An upload whose bytes copies still need is detached instead: it stays,
without object, until its finalising resolves the copies and releases what
no one uses. A trashed pending object keeps its row, so it is finalised in
the trash like any other.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.chunks import ChunkRepository
from app.db.copies import ChunkRow, CopyRepository
from app.db.locking import batches
from app.db.models import (
    MultipartUpload,
    PartPiece,
    PendingCopy,
    Piece,
    SpooledPart,
    UploadPart,
)
from app.db.multipart_etag import unquote_etag
from app.db.object_rows import PieceSpec, merge_adjacent, piece_rows
from app.db.pending_filter import pending_object
from app.db.types import utcnow
from app.db.upload_ids import new_upload_id

__all__ = ["CopySource", "PendingPart", "PendingRepository", "SpooledFile", "pending_object"]


@dataclass(frozen=True, slots=True)
class SpooledFile:
    """Where a pending part's bytes are: a spool file of instance `owner`."""

    path: str
    owner: str
    md5: str  # hex


@dataclass(frozen=True, slots=True)
class CopySource:
    """A part that is a copy: `source_start` on in upload `upload_id`'s bytes."""

    upload_id: str
    source_start: int


@dataclass(frozen=True, slots=True)
class PendingPart:
    """One part of a completed upload: its bytes start at `start` in the
    upload's (its object's) bytes. At most one of `spooled` and `copy_of`:
    neither, the part is in Telegram (its part pieces)."""

    upload_id: str
    part_number: int
    start: int
    size: int
    spooled: SpooledFile | None = None
    copy_of: CopySource | None = None


class PendingRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    # --- reading --------------------------------------------------------------

    async def source_upload(self, object_id: int) -> str | None:
        """The completed upload the pending object's bytes come from; None
        when it is not pending (finalised, deleted, or it never was)."""
        upload_id: str | None = await self._session.scalar(
            select(MultipartUpload.id).where(MultipartUpload.completed_object_id == object_id)
        )
        return upload_id

    async def source(self, object_id: int) -> builtins.list[PendingPart] | None:
        """The parts of the pending object, in order; None when it is not pending."""
        upload_id = await self.source_upload(object_id)
        return None if upload_id is None else await self.parts_of(upload_id)

    async def parts_of(self, upload_id: str) -> builtins.list[PendingPart] | None:
        """The parts of a completed upload, in order; None when it is gone
        (finalised meanwhile)."""
        rows = (
            await self._session.execute(
                select(
                    UploadPart.part_number,
                    UploadPart.size,
                    UploadPart.etag,
                    SpooledPart.path,
                    SpooledPart.owner,
                    SpooledPart.md5,
                    PendingCopy.source_upload_id,
                    PendingCopy.source_start,
                )
                .outerjoin(
                    SpooledPart,
                    (SpooledPart.upload_id == UploadPart.upload_id)
                    & (SpooledPart.part_number == UploadPart.part_number),
                )
                .outerjoin(
                    PendingCopy,
                    (PendingCopy.target_upload_id == UploadPart.upload_id)
                    & (PendingCopy.target_part_number == UploadPart.part_number),
                )
                .where(UploadPart.upload_id == upload_id)
                .order_by(UploadPart.part_number)
            )
        ).all()
        if not rows:
            exists = await self._session.scalar(
                select(MultipartUpload.id).where(MultipartUpload.id == upload_id)
            )
            return [] if exists is not None else None
        parts: builtins.list[PendingPart] = []
        start = 0
        for number, size, etag, path, owner, md5, source_id, source_start in rows:
            spooled = SpooledFile(path, owner, md5 or _md5_of_etag(etag)) if path else None
            copy_of = CopySource(source_id, source_start) if source_id is not None else None
            parts.append(PendingPart(upload_id, number, start, size, spooled, copy_of))
            start += size
        return parts

    async def part_chunks(
        self, upload_id: str, part_number: int, start: int, end: int
    ) -> builtins.list[tuple[PieceSpec, ChunkRow]] | None:
        """Bytes [start, end) of a part in Telegram, as trimmed pieces with
        their chunks; None when the part has none (yet, or any more: its
        upload was finalised or deleted meanwhile)."""
        rows = await self._session.execute(
            select(PartPiece.chunk_id, PartPiece.offset, PartPiece.length)
            .where(PartPiece.upload_id == upload_id, PartPiece.part_number == part_number)
            .order_by(PartPiece.seq)
        )
        flat: builtins.list[tuple[int, PieceSpec]] = []
        at = 0
        for chunk_id, offset, length in rows:
            flat.append((at, PieceSpec(chunk_id, offset, length)))
            at += length
        trimmed = _trim(flat, start, end)
        if trimmed is None:
            return None
        chunks = await CopyRepository(self._session).chunks(p.chunk_id for p in trimmed)
        return [(piece, chunks[piece.chunk_id]) for piece in trimmed]

    async def completed(self, upload_ids: Iterable[str]) -> set[str]:
        """Which of these uploads are completed (pending objects' sources)."""
        found: set[str] = set()
        for batch in batches(sorted(set(upload_ids))):
            found.update(
                await self._session.scalars(
                    select(MultipartUpload.id).where(
                        MultipartUpload.id.in_(batch), MultipartUpload.completed_at.is_not(None)
                    )
                )
            )
        return found

    async def lag(self, owner: str | None = None) -> tuple[int, datetime | None]:
        """Bytes in the spool of `owner` (None: of every instance) not yet in
        Telegram, and when the oldest of them was spooled."""
        query = select(
            func.coalesce(func.sum(SpooledPart.size), 0), func.min(SpooledPart.created_at)
        )
        if owner is not None:
            query = query.where(SpooledPart.owner == owner)
        size, oldest = (await self._session.execute(query)).one()
        return int(size), oldest

    # --- copies ---------------------------------------------------------------

    async def lock_source(self, object_id: int) -> str | None:
        """The pending object's upload, locked FOR SHARE until commit (its
        finalising waits, then resolves the copy made meanwhile); None when
        the object is not pending."""
        upload_id: str | None = await self._session.scalar(
            select(MultipartUpload.id)
            .where(MultipartUpload.completed_object_id == object_id)
            .with_for_update(read=True)
        )
        return upload_id

    async def add_copy(
        self, source_upload_id: str, source_start: int, length: int, target: tuple[str, int]
    ) -> None:
        """Record part `target` (upload id, part number; written, with no
        pieces) as bytes [source_start, +length) of the source upload."""
        await self._session.execute(
            insert(PendingCopy).values(
                source_upload_id=source_upload_id,
                source_start=source_start,
                length=length,
                target_upload_id=target[0],
                target_part_number=target[1],
            )
        )

    async def copy_object(
        self,
        source_upload_id: str,
        source_start: int,
        *,
        bucket: str,
        key: str,
        size: int,
        etag: str,
    ) -> str:
        """The bytes [source_start, +size) of the source upload as a
        completed upload of one part that is that copy; its id, for
        `attach` once the object is written. Before the object: written over
        its own source (a copy onto its key), the source then sees the copy
        and stays (`detach_sources`)."""
        now = utcnow()
        upload = MultipartUpload(
            id=new_upload_id(),
            bucket=bucket,
            key=key,
            content_type="",
            user_metadata={},
            created_at=now,
            completed_at=now,
        )
        self._session.add(upload)
        await self._session.flush()
        await self._session.execute(
            insert(UploadPart).values(
                upload_id=upload.id, part_number=1, size=size, etag=etag, created_at=now
            )
        )
        await self.add_copy(source_upload_id, source_start, size, (upload.id, 1))
        return upload.id

    async def attach(self, upload_id: str, object_id: int) -> None:
        """Make the completed upload the source of the pending object's bytes."""
        await self._session.execute(
            update(MultipartUpload)
            .where(MultipartUpload.id == upload_id)
            .values(completed_object_id=object_id)
            .execution_options(synchronize_session=False)
        )

    # --- finalising and deleting -------------------------------------------------

    async def finalise(self, upload: MultipartUpload) -> bool:
        """If `upload` (locked by the caller) is completed and none of its
        parts is spooled or a copy any more: give its object the parts'
        pieces, and each copy of its bytes its part pieces (finalising the
        copies' uploads in turn), then delete it; whether it did."""
        if upload.completed_at is None:
            return False
        waiting = await self._session.scalar(
            select(SpooledPart.id).where(SpooledPart.upload_id == upload.id).limit(1)
        )
        if waiting is None:
            waiting = await self._session.scalar(
                select(PendingCopy.id).where(PendingCopy.target_upload_id == upload.id).limit(1)
            )
        if waiting is not None:
            return False
        flat = await self._flat_pieces(upload.id)
        if upload.completed_object_id is not None:
            await self._insert_object_pieces(
                upload.completed_object_id, merge_adjacent(p for _, p in flat)
            )
        targets = await self._resolve_copies(upload.id, flat)
        # Its parts and part pieces go with it; the object and the copies hold
        # the chunks they use now, and the rest (a detached upload's) go.
        await self._session.execute(
            delete(MultipartUpload)
            .where(MultipartUpload.id == upload.id)
            .execution_options(synchronize_session=False)
        )
        await ChunkRepository(self._session).release({p.chunk_id for _, p in flat}, "deleted")
        for target_id in sorted(targets):
            target = await self._session.scalar(
                select(MultipartUpload)
                .where(MultipartUpload.id == target_id)
                .with_for_update()
                .execution_options(populate_existing=True)
            )
            if target is not None:
                await self.finalise(target)
        return True

    async def detach_sources(self, object_ids: Iterable[int]) -> set[int]:
        """Before these pending objects' rows are deleted: the chunks their
        uploads hold, to release after the delete (the uploads go with the
        rows). An upload whose bytes copies still need is detached instead:
        it stays, and its finalising releases what no one uses."""
        found: set[int] = set()
        for batch in batches(sorted(set(object_ids))):
            uploads = (
                await self._session.execute(
                    select(MultipartUpload.id)
                    .where(MultipartUpload.completed_object_id.in_(batch))
                    .with_for_update()
                )
            ).all()
            for (upload_id,) in uploads:
                copied = await self._session.scalar(
                    select(PendingCopy.id).where(PendingCopy.source_upload_id == upload_id).limit(1)
                )
                if copied is not None:
                    await self._session.execute(
                        update(MultipartUpload)
                        .where(MultipartUpload.id == upload_id)
                        .values(completed_object_id=None)
                        .execution_options(synchronize_session=False)
                    )
                    continue
                found.update(
                    await self._session.scalars(
                        select(PartPiece.chunk_id)
                        .where(PartPiece.upload_id == upload_id)
                        .distinct()
                    )
                )
        return found

    async def _flat_pieces(self, upload_id: str) -> builtins.list[tuple[int, PieceSpec]]:
        """The upload's part pieces in order, each with where it starts in
        the upload's bytes."""
        rows = await self._session.execute(
            select(PartPiece.chunk_id, PartPiece.offset, PartPiece.length)
            .where(PartPiece.upload_id == upload_id)
            .order_by(PartPiece.part_number, PartPiece.seq)
        )
        flat: builtins.list[tuple[int, PieceSpec]] = []
        at = 0
        for chunk_id, offset, length in rows:
            flat.append((at, PieceSpec(chunk_id, offset, length)))
            at += length
        return flat

    async def _insert_object_pieces(self, object_id: int, pieces: Sequence[PieceSpec]) -> None:
        if pieces:
            await self._session.execute(insert(Piece), piece_rows(object_id, pieces))

    async def _resolve_copies(
        self, upload_id: str, flat: Sequence[tuple[int, PieceSpec]]
    ) -> set[str]:
        """Give every copy of the upload's bytes its part pieces and drop its
        link; the uploads the copies belong to."""
        links = (
            await self._session.scalars(
                select(PendingCopy)
                .where(PendingCopy.source_upload_id == upload_id)
                .order_by(PendingCopy.id)
            )
        ).all()
        targets: set[str] = set()
        for link in links:
            pieces = _trim(flat, link.source_start, link.source_start + link.length)
            if pieces is None:
                raise ValueError(f"{link!r} reaches past its source's bytes")
            await self._session.execute(
                insert(PartPiece),
                [
                    {
                        "upload_id": link.target_upload_id,
                        "part_number": link.target_part_number,
                        "seq": seq,
                        "chunk_id": piece.chunk_id,
                        "offset": piece.offset,
                        "length": piece.length,
                    }
                    for seq, piece in enumerate(pieces)
                ],
            )
            targets.add(link.target_upload_id)
        if links:
            await self._session.execute(
                delete(PendingCopy).where(PendingCopy.source_upload_id == upload_id)
            )
        return targets


def _trim(
    flat: Sequence[tuple[int, PieceSpec]], start: int, end: int
) -> builtins.list[PieceSpec] | None:
    """Bytes [start, end) of pieces laid end to end (each with its start);
    None when they do not cover the range."""
    trimmed: builtins.list[PieceSpec] = []
    for at, piece in flat:
        first, last = max(start, at), min(end, at + piece.length)
        if first < last:
            trimmed.append(PieceSpec(piece.chunk_id, piece.offset + first - at, last - first))
    if sum(piece.length for piece in trimmed) != end - start:
        return None
    return trimmed


def _md5_of_etag(etag: str) -> str:
    """A row spooled before spool rows kept their MD5: the part's ETag is its
    MD5 (a spooled copy's might not be; its read then fails the check)."""
    return unquote_etag(etag).lower()
