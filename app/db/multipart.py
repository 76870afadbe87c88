"""S3 multipart uploads: parts as lists of chunk ranges, completed into an object.

Locks, per upload: `put_part` holds the upload row FOR SHARE (parts of one
upload are written in parallel) plus a lock on its part number (two writers
of one number queue, the last to commit wins); `complete` and `abort` hold it
FOR UPDATE, so they wait for running part writes, and whichever of them goes
second finds the upload gone. On SQLite every writer takes the database write
lock first (app.db.locking).

Chunk references: a part's pieces reference chunks exactly as an object's
pieces do (ChunkRepository.release keeps a chunk either kind still uses).
Completing copies the listed parts' pieces into the object (joining pieces
that continue each other in one chunk), drops the upload, and releases the
chunks of the parts left out.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select

from app.db.locking import lock_upload_part
from app.db.models import (
    MAX_KEY_LENGTH,
    MultipartUpload,
    PartPiece,
    PendingCopy,
    UploadPart,
)
from app.db.multipart_complete import UploadCompletion
from app.db.multipart_errors import (
    UploadMissing,
)
from app.db.multipart_rows import check_part_number, check_pieces
from app.db.object_rows import PieceSpec
from app.db.pending import PendingRepository
from app.db.types import utcnow
from app.db.upload_ids import new_upload_id


class MultipartRepository(UploadCompletion):
    """Uploads and their parts (this module), completion (multipart_complete),
    over the locked rows of multipart_rows."""

    # --- uploads --------------------------------------------------------------

    async def create(
        self,
        *,
        bucket: str,
        key: str,
        content_type: str,
        user_metadata: Mapping[str, Any],
        checksum_algorithm: str | None = None,
        checksum_type: str | None = None,
        tags: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> MultipartUpload:
        if not bucket or not key:
            raise ValueError("bucket and key must not be empty")
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"key is longer than {MAX_KEY_LENGTH} characters")
        upload = MultipartUpload(
            id=new_upload_id(),
            bucket=bucket,
            key=key,
            content_type=content_type,
            user_metadata=dict(user_metadata),
            checksum_algorithm=checksum_algorithm,
            checksum_type=checksum_type,
            tags=dict(tags) if tags else None,
            created_at=now or utcnow(),
        )
        self._session.add(upload)
        await self._session.flush()
        return upload

    async def get(
        self, upload_id: str, *, bucket: str | None = None, key: str | None = None
    ) -> MultipartUpload | None:
        """The upload, or None if missing or (when given) not in `bucket` under `key`."""
        upload = await self._session.scalar(
            select(MultipartUpload).where(MultipartUpload.id == upload_id)
        )
        return upload if self._matches(upload, bucket, key) else None

    async def abort(
        self, upload_id: str, *, bucket: str | None = None, key: str | None = None
    ) -> bool:
        """Delete the upload and its parts, releasing their chunks ('aborted').

        False if there is no such upload (or, when given, not in that bucket/key).
        """
        upload = await self._lock_upload(upload_id, bucket, key, exclusive=True)
        if upload is None:
            return False
        chunk_ids = await self._chunk_ids_of(upload_id)
        await self._delete_upload(upload)
        await self._chunks.release(chunk_ids, "aborted")
        return True

    # --- parts ----------------------------------------------------------------

    async def put_part(
        self,
        upload_id: str,
        part_number: int,
        *,
        size: int,
        etag: str,
        pieces: Sequence[PieceSpec],
        bucket: str | None = None,
        key: str | None = None,
        checksum: str | None = None,
        now: datetime | None = None,
        copy_of: tuple[str, int] | None = None,
    ) -> UploadPart:
        """Record part `part_number`, replacing any earlier upload of that number.

        `copy_of` (source upload id, start): the part is a copy of a pending
        object's bytes (app.db.pending), with no pieces until they are flushed.

        The pieces' chunks become live (they may be new, or shared with
        objects by UploadPartCopy); a replaced part's chunks are released
        ('overwritten') unless still referenced. All in the caller's
        transaction. Raises UploadMissing if the upload is gone (or, when
        given, not in that bucket/key), ChunksMissing if a chunk is gone;
        nothing is written then, and the caller must release its new chunks.
        """
        check_part_number(part_number)
        if copy_of is None:
            check_pieces(size, pieces)
        elif pieces or size <= 0:
            raise ValueError("a pending copy has a size and no pieces yet")
        now = now or utcnow()
        if await self._lock_upload(upload_id, bucket, key, exclusive=False) is None:
            raise UploadMissing(upload_id)
        await lock_upload_part(self._session, upload_id, part_number)
        # Before any change, so a chunk released meanwhile fails the put cleanly.
        await self._chunks.mark_live(piece.chunk_id for piece in pieces)

        part = await self._session.scalar(
            select(UploadPart)
            .where(UploadPart.upload_id == upload_id, UploadPart.part_number == part_number)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        old_chunk_ids: builtins.list[int] = []
        if part is None:
            part = UploadPart(
                upload_id=upload_id,
                part_number=part_number,
                size=size,
                etag=etag,
                checksum=checksum,
                created_at=now,
            )
            self._session.add(part)
        else:
            old_chunk_ids = await self._chunk_ids_of(upload_id, part_number)
            await self._session.execute(
                delete(PartPiece)
                .where(PartPiece.upload_id == upload_id, PartPiece.part_number == part_number)
                .execution_options(synchronize_session=False)
            )
            part.size, part.etag, part.checksum, part.created_at = size, etag, checksum, now
            await self._session.execute(
                delete(PendingCopy).where(
                    PendingCopy.target_upload_id == upload_id,
                    PendingCopy.target_part_number == part_number,
                )
            )
        await self._session.flush()
        if copy_of is not None:
            await PendingRepository(self._session).add_copy(
                copy_of[0], copy_of[1], size, (upload_id, part_number)
            )
        if pieces:
            await self._session.execute(
                insert(PartPiece),
                [
                    {
                        "upload_id": upload_id,
                        "part_number": part_number,
                        "seq": seq,
                        "chunk_id": piece.chunk_id,
                        "offset": piece.offset,
                        "length": piece.length,
                    }
                    for seq, piece in enumerate(pieces)
                ],
            )
        # After the new pieces exist. A chunk the new pieces use is kept
        # anyway; not even asking spares locking it FOR UPDATE while this
        # transaction holds it FOR SHARE (mark_live), which could deadlock
        # with another part of the same copy source doing the same.
        new_chunk_ids = {piece.chunk_id for piece in pieces}
        await self._chunks.release(
            [c for c in old_chunk_ids if c not in new_chunk_ids], "overwritten"
        )
        return part

    async def list_parts(
        self,
        upload_id: str,
        *,
        after: int = 0,
        limit: int = 1000,
        bucket: str | None = None,
        key: str | None = None,
    ) -> builtins.list[UploadPart]:
        """Parts numbered above `after`, by part number.

        Raises UploadMissing if there is no such upload (or, when given, not
        in that bucket/key).
        """
        if await self.get(upload_id, bucket=bucket, key=key) is None:
            raise UploadMissing(upload_id)
        if limit <= 0:
            return []
        return builtins.list(
            await self._session.scalars(
                select(UploadPart)
                .where(UploadPart.upload_id == upload_id, UploadPart.part_number > after)
                .order_by(UploadPart.part_number)
                .limit(limit)
            )
        )
