"""Pending objects: completed while some of their parts were still spooled.

With COMPLETE_WAITS_FOR=spool, CompleteMultipartUpload writes the object's
row at once (size, ETag, metadata: it lists and reads as any object) but no
pieces: its upload stays, its `completed_object_id` naming the object, with
its parts, their part pieces (parts already in Telegram) and spool rows
(parts still on disk). That upload is hidden from the multipart API. When
the flusher commits the upload's last spooled part, `finalise`, in that same
transaction, gives the object the pieces of its parts, in order, and deletes
the upload: an ordinary object. A crash between the two leaves spool rows the
restarted flusher resumes, and the last commit finalises.

Deleting, replacing or trashing the object: the upload goes with the row (ON
DELETE CASCADE), so every path that deletes an object row releases the
chunks of its pending parts too (`chunk_ids_of_pending`), and the chunkless
one-statement paths leave pending objects to the session
(`pending_object`). A trashed pending object keeps its row, so it is
finalised in the trash like any other.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.copies import ChunkRow, CopyRepository
from app.db.locking import batches
from app.db.models import MultipartUpload, PartPiece, Piece, SpooledPart, UploadPart
from app.db.object_rows import PieceSpec, merge_adjacent
from app.db.pending_filter import pending_object

__all__ = ["PendingPart", "PendingRepository", "SpooledFile", "pending_object"]


@dataclass(frozen=True, slots=True)
class SpooledFile:
    """Where a pending part's bytes are: a spool file of instance `owner`."""

    path: str
    owner: str
    md5: str  # hex


@dataclass(frozen=True, slots=True)
class PendingPart:
    """One part of a pending object: its bytes start at `start` in the object."""

    upload_id: str
    part_number: int
    start: int
    size: int
    #: None: the part is in Telegram (its part pieces).
    spooled: SpooledFile | None


class PendingRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def source(self, object_id: int) -> builtins.list[PendingPart] | None:
        """The parts of the pending object, in order; None when it is not
        pending (finalised, deleted, or it never was)."""
        upload_id = await self._session.scalar(
            select(MultipartUpload.id).where(MultipartUpload.completed_object_id == object_id)
        )
        if upload_id is None:
            return None
        rows = await self._session.execute(
            select(
                UploadPart.part_number,
                UploadPart.size,
                UploadPart.etag,
                SpooledPart.path,
                SpooledPart.owner,
                SpooledPart.md5,
            )
            .outerjoin(
                SpooledPart,
                (SpooledPart.upload_id == UploadPart.upload_id)
                & (SpooledPart.part_number == UploadPart.part_number),
            )
            .where(UploadPart.upload_id == upload_id)
            .order_by(UploadPart.part_number)
        )
        parts: builtins.list[PendingPart] = []
        start = 0
        for number, size, etag, path, owner, md5 in rows:
            spooled = None
            if path is not None:
                spooled = SpooledFile(path, owner, md5 or _md5_of_etag(etag))
            parts.append(PendingPart(upload_id, number, start, size, spooled))
            start += size
        return parts

    async def part_chunks(
        self, upload_id: str, part_number: int, start: int, end: int
    ) -> builtins.list[tuple[PieceSpec, ChunkRow]] | None:
        """Bytes [start, end) of a part in Telegram, as trimmed pieces with
        their chunks; None when the part has none any more (its upload was
        finalised or deleted meanwhile)."""
        rows = await self._session.execute(
            select(PartPiece.chunk_id, PartPiece.offset, PartPiece.length)
            .where(PartPiece.upload_id == upload_id, PartPiece.part_number == part_number)
            .order_by(PartPiece.seq)
        )
        trimmed: builtins.list[PieceSpec] = []
        at = 0
        for chunk_id, offset, length in rows:
            first, last = max(start, at), min(end, at + length)
            if first < last:
                trimmed.append(PieceSpec(chunk_id, offset + first - at, last - first))
            at += length
        if sum(piece.length for piece in trimmed) != end - start:
            return None
        chunks = await CopyRepository(self._session).chunks(p.chunk_id for p in trimmed)
        return [(piece, chunks[piece.chunk_id]) for piece in trimmed]

    async def finalise(self, upload: MultipartUpload) -> bool:
        """If `upload` (locked by the caller) is the source of a pending
        object and none of its parts is spooled any more, give the object its
        parts' pieces and delete the upload; whether it did."""
        object_id = upload.completed_object_id
        if object_id is None:
            return False
        still = await self._session.scalar(
            select(SpooledPart.id).where(SpooledPart.upload_id == upload.id).limit(1)
        )
        if still is not None:
            return False
        rows = await self._session.execute(
            select(PartPiece.chunk_id, PartPiece.offset, PartPiece.length)
            .where(PartPiece.upload_id == upload.id)
            .order_by(PartPiece.part_number, PartPiece.seq)
        )
        pieces = merge_adjacent(PieceSpec(*row) for row in rows)
        values = []
        start = 0
        for seq, piece in enumerate(pieces):
            values.append(
                {
                    "object_id": object_id,
                    "seq": seq,
                    "chunk_id": piece.chunk_id,
                    "start": start,
                    "offset": piece.offset,
                    "length": piece.length,
                }
            )
            start += piece.length
        if values:
            await self._session.execute(insert(Piece), values)
        # Its parts and part pieces go with it; the chunks are the object's now.
        await self._session.execute(
            delete(MultipartUpload)
            .where(MultipartUpload.id == upload.id)
            .execution_options(synchronize_session=False)
        )
        return True

    async def completed(self, upload_ids: Iterable[str]) -> set[str]:
        """Which of these uploads are pending objects' sources."""
        found: set[str] = set()
        for batch in batches(sorted(set(upload_ids))):
            found.update(
                await self._session.scalars(
                    select(MultipartUpload.id).where(
                        MultipartUpload.id.in_(batch),
                        MultipartUpload.completed_object_id.is_not(None),
                    )
                )
            )
        return found

    async def chunk_ids_of_pending(self, object_ids: Iterable[int]) -> set[int]:
        """The chunks the parts of these pending objects hold (parts already
        in Telegram), to release when the objects' rows are deleted."""
        found: set[int] = set()
        for batch in batches(sorted(set(object_ids))):
            found.update(
                await self._session.scalars(
                    select(PartPiece.chunk_id)
                    .join(MultipartUpload, MultipartUpload.id == PartPiece.upload_id)
                    .where(MultipartUpload.completed_object_id.in_(batch))
                    .distinct()
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


def _md5_of_etag(etag: str) -> str:
    """A row spooled before spool rows kept their MD5: the part's ETag is its
    MD5 (a spooled copy's might not be; its read then fails the check)."""
    return etag.strip().strip('"').lower()
