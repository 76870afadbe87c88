"""What the multipart repository's operations share: the upload row, found
and locked as app/db/multipart.py describes, and its deletion; the checks of
a part's number and pieces."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.chunks import ChunkRepository
from app.db.locking import lock_database_for_write
from app.db.models import (
    MAX_PART_NUMBER,
    MultipartUpload,
    PartPiece,
    UploadPart,
)
from app.db.object_rows import PieceSpec


class UploadRows:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._chunks = ChunkRepository(session)

    @staticmethod
    def _matches(upload: MultipartUpload | None, bucket: str | None, key: str | None) -> bool:
        # A completed upload that is a pending object's source is no upload
        # any more to the multipart API (app.db.pending).
        return (
            upload is not None
            and upload.completed_at is None
            and (bucket is None or upload.bucket == bucket)
            and (key is None or upload.key == key)
        )

    async def _lock_upload(
        self, upload_id: str, bucket: str | None, key: str | None, *, exclusive: bool
    ) -> MultipartUpload | None:
        """The upload row, locked FOR UPDATE (`exclusive`) or FOR SHARE until commit.

        A waiter for a row that its holder deletes gets no row: it sees the
        upload as missing. SQLite: the database write lock, taken first.
        """
        await lock_database_for_write(self._session)
        upload = await self._session.scalar(
            select(MultipartUpload)
            .where(MultipartUpload.id == upload_id)
            .with_for_update(read=not exclusive)
            .execution_options(populate_existing=True)
        )
        return upload if self._matches(upload, bucket, key) else None

    async def _chunk_ids_of(
        self, upload_id: str, part_number: int | None = None
    ) -> builtins.list[int]:
        query = select(PartPiece.chunk_id).where(PartPiece.upload_id == upload_id)
        if part_number is not None:
            query = query.where(PartPiece.part_number == part_number)
        return builtins.list(await self._session.scalars(query.distinct()))

    async def _delete_upload(self, upload: MultipartUpload) -> None:
        # Its parts and their pieces go with it (ON DELETE CASCADE).
        await self._session.execute(
            delete(MultipartUpload)
            .where(MultipartUpload.id == upload.id)
            .execution_options(synchronize_session=False)
        )
        for instance in builtins.list(self._session):
            if isinstance(instance, UploadPart) and instance.upload_id == upload.id:
                self._session.expunge(instance)
        self._session.expunge(upload)


def check_part_number(part_number: int) -> None:
    if not 1 <= part_number <= MAX_PART_NUMBER:
        raise ValueError(f"part number must be 1 to {MAX_PART_NUMBER}, not {part_number}")


def check_pieces(size: int, pieces: Sequence[PieceSpec]) -> None:
    if size < 0:
        raise ValueError("size must not be negative")
    for piece in pieces:
        if piece.length <= 0 or piece.offset < 0:
            raise ValueError(f"invalid piece {piece}")
    total = sum(piece.length for piece in pieces)
    if total != size:
        raise ValueError(f"pieces add up to {total} bytes, size is {size}")
