"""Completing a multipart upload: the listed parts, in order, become the
object (see app/db/multipart.py for the locks)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise

from sqlalchemy import delete, select

from app.db.models import (
    MultipartUpload,
    PartPiece,
    UploadPart,
)
from app.db.multipart_errors import (
    InvalidPart,
    InvalidPartOrder,
    PartsNotStored,
    PartTooSmall,
    UploadMissing,
)
from app.db.multipart_etag import multipart_etag, unquote_etag
from app.db.multipart_rows import UploadRows
from app.db.object_rows import ObjectRow, ObjectSpec, PieceSpec, StoredChecksum, merge_adjacent
from app.db.objects import ObjectRepository, WriteCheck
from app.db.types import utcnow
from app.kit.checksums import COMPOSITE, FULL_OBJECT, object_checksum


class UploadCompletion(UploadRows):
    async def complete(
        self,
        upload_id: str,
        parts: Sequence[tuple[int, str]],
        *,
        name: str,
        keep_public_id: bool = False,
        bucket: str | None = None,
        key: str | None = None,
        owner_key_id: int | None = None,
        now: datetime | None = None,
        min_part_size: int = 0,
        check: WriteCheck | None = None,
        allow_spooled: bool = False,
    ) -> ObjectRow:
        """Turn the listed (part number, ETag) parts, in order, into the object.

        All in the caller's transaction: the object is written under the
        upload's bucket and key with ObjectRepository.put (replacing any
        object there; last writer wins), the upload and all its parts go, and
        the chunks of parts not listed are released ('aborted').

        No parts at all make an empty object (Docker's registry 2.8 completes
        an empty blob that way). Raises, having changed nothing: InvalidPartOrder;
        PartsNotStored for parts still in the spool;
        UploadMissing (also when a concurrent complete or abort got there
        first); InvalidPart for a part never uploaded or whose ETag differs
        (quotes aside); PartTooSmall for a listed part but the last under
        `min_part_size` bytes; whatever `check` raises (see ObjectRepository.put).

        `allow_spooled`: parts still in the spool do not raise PartsNotStored;
        the object is written pending (app.db.pending): no pieces yet, the
        upload kept as their source, less the parts left out.
        """
        for (previous, _), (number, _) in pairwise(parts):
            if number <= previous:
                raise InvalidPartOrder(number, previous)
        upload = await self._lock_upload(upload_id, bucket, key, exclusive=True)
        if upload is None:
            raise UploadMissing(upload_id)

        stored = {
            part.part_number: part
            for part in await self._session.scalars(
                select(UploadPart)
                .where(UploadPart.upload_id == upload_id)
                .execution_options(populate_existing=True)
            )
        }
        for number, etag in parts:
            part = stored.get(number)
            if part is None:
                raise InvalidPart(number, "was not uploaded")
            if unquote_etag(part.etag) != unquote_etag(etag):
                raise InvalidPart(number, f"ETag is {part.etag}, not {etag}")
        for number, _ in parts[:-1]:
            if stored[number].size < min_part_size:
                raise PartTooSmall(number, stored[number].size, min_part_size)

        listed = [number for number, _ in parts]
        pieces_of: dict[int, builtins.list[PieceSpec]] = {number: [] for number in listed}
        left_out_chunk_ids: set[int] = set()
        rows = await self._session.execute(
            select(PartPiece.part_number, PartPiece.chunk_id, PartPiece.offset, PartPiece.length)
            .where(PartPiece.upload_id == upload_id)
            .order_by(PartPiece.part_number, PartPiece.seq)
        )
        for number, chunk_id, offset, length in rows:
            if number in pieces_of:
                pieces_of[number].append(PieceSpec(chunk_id, offset, length))
            else:
                left_out_chunk_ids.add(chunk_id)
        spooled = [
            number
            for number in listed
            if sum(piece.length for piece in pieces_of[number]) != stored[number].size
        ]
        if spooled and not allow_spooled:
            raise PartsNotStored(spooled)
        used_chunk_ids = {piece.chunk_id for number in listed for piece in pieces_of[number]}

        spec = ObjectSpec(
            bucket=upload.bucket,
            key=upload.key,
            name=name,
            content_type=upload.content_type,
            size=sum(stored[number].size for number in listed),
            etag=multipart_etag([stored[number].etag for number in listed]),
            md5=None,
            sha256=None,
            user_metadata=dict(upload.user_metadata),
            pieces=[]
            if spooled
            else merge_adjacent(piece for number in listed for piece in pieces_of[number]),
            owner_key_id=owner_key_id,
            checksum=_object_checksum(upload, [stored[number] for number in listed]),
            parts=[(stored[number].size, stored[number].checksum) for number in listed] or None,
            tags=upload.tags,
            pending=bool(spooled),
        )
        created = await ObjectRepository(self._session).put(
            spec, keep_public_id=keep_public_id, now=now, check=check
        )
        if spooled:
            await self._session.execute(
                delete(UploadPart).where(
                    UploadPart.upload_id == upload_id, UploadPart.part_number.not_in(listed)
                )
            )
            upload.completed_object_id = created.id
            upload.completed_at = now or utcnow()
            await self._session.flush()
        else:
            await self._delete_upload(upload)
        # The parts left out: their chunks go unless something else (another
        # part listed, an object, another upload) still uses them.
        await self._chunks.release(left_out_chunk_ids - used_chunk_ids, "aborted")
        return created


def _object_checksum(upload: MultipartUpload, parts: Sequence[UploadPart]) -> StoredChecksum | None:
    """The object's checksum from its parts', as its upload asked; None if it
    asked for none, or a part has none (copied by UploadPartCopy before
    copied parts got checksums)."""
    algorithm = upload.checksum_algorithm
    if algorithm is None:
        return None
    value = object_checksum(
        algorithm, upload.checksum_type, [(part.size, part.checksum) for part in parts]
    )
    if value is None:
        return None
    kind = FULL_OBJECT if upload.checksum_type == FULL_OBJECT else COMPOSITE
    return StoredChecksum(algorithm, value, kind)
