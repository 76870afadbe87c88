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
from itertools import pairwise
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.chunks import ChunkRepository
from app.db.locking import lock_database_for_write, lock_upload_part
from app.db.models import (
    MAX_KEY_LENGTH,
    MAX_PART_NUMBER,
    MultipartUpload,
    PartPiece,
    PendingCopy,
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
from app.db.object_rows import ObjectRow, ObjectSpec, PieceSpec, StoredChecksum, merge_adjacent
from app.db.objects import ObjectRepository, WriteCheck
from app.db.pending import PendingRepository
from app.db.types import utcnow
from app.db.upload_ids import new_upload_id
from app.kit.checksums import COMPOSITE, FULL_OBJECT, object_checksum


class MultipartRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._chunks = ChunkRepository(session)

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
        _check_part_number(part_number)
        if copy_of is None:
            _check_pieces(size, pieces)
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

    # --- completion -----------------------------------------------------------

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

    # --- helpers --------------------------------------------------------------

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


def _check_part_number(part_number: int) -> None:
    if not 1 <= part_number <= MAX_PART_NUMBER:
        raise ValueError(f"part number must be 1 to {MAX_PART_NUMBER}, not {part_number}")


def _check_pieces(size: int, pieces: Sequence[PieceSpec]) -> None:
    if size < 0:
        raise ValueError("size must not be negative")
    for piece in pieces:
        if piece.length <= 0 or piece.offset < 0:
            raise ValueError(f"invalid piece {piece}")
    total = sum(piece.length for piece in pieces)
    if total != size:
        raise ValueError(f"pieces add up to {total} bytes, size is {size}")


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
