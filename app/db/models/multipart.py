"""S3 multipart uploads, their parts, and parts waiting in the local spool.

Multipart uploads collect `UploadPart`s whose bytes are `PartPiece`s, the same
kind of chunk ranges as an object's pieces; completing an upload turns the
listed parts' pieces into the new object's pieces. A chunk is referenced while
any piece or part piece points at it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base
from app.db.models.objects import MAX_CONTENT_TYPE_LENGTH, MAX_KEY_LENGTH
from app.db.types import BigIntPK, JsonDict, NullableJson, UtcDateTime, key_string, utcnow

MAX_PART_NUMBER = 10_000
UPLOAD_ID_LENGTH = 64


class MultipartUpload(Base):
    """An S3 multipart upload in progress; `id` is the UploadId clients carry."""

    __tablename__ = "multipart_uploads"
    __table_args__ = (
        # ListMultipartUploads: a range scan in (key, upload id) order.
        Index(None, "bucket", "key", "id"),
        # Deleting an object finds its pending source (a cascade's lookup).
        Index(None, "completed_object_id"),
    )

    # Byte order ("C" on Postgres) so listings page the same on both backends.
    id: Mapped[str] = mapped_column(key_string(UPLOAD_ID_LENGTH), primary_key=True)
    bucket: Mapped[str] = mapped_column(key_string(255))
    key: Mapped[str] = mapped_column(key_string(MAX_KEY_LENGTH))
    content_type: Mapped[str] = mapped_column(String(MAX_CONTENT_TYPE_LENGTH))
    user_metadata: Mapped[dict[str, Any]] = mapped_column(JsonDict, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # ChecksumAlgorithm and ChecksumType asked for at creation (None: none).
    checksum_algorithm: Mapped[str | None] = mapped_column(String(16), default=None)
    checksum_type: Mapped[str | None] = mapped_column(String(16), default=None)
    # The tags CreateMultipartUpload was given, for the object Complete writes.
    tags: Mapped[dict[str, str] | None] = mapped_column(NullableJson, nullable=True, default=None)
    # Completed while parts were still in the spool: the upload stays, hidden
    # from the multipart API, as the source of this object's bytes until the
    # flusher commits its last part (app.db.pending). The object's deletion
    # takes it along.
    completed_object_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("objects.id", ondelete="CASCADE"), nullable=True, default=None
    )
    # Set by that completion; the upload stays completed (hidden) when its
    # object goes while copies still need its bytes (completed_object_id NULL).
    completed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)

    def __repr__(self) -> str:
        return f"MultipartUpload(id={self.id!r}, bucket={self.bucket!r}, key={self.key!r})"


class UploadPart(Base):
    """One part of a multipart upload; a re-upload of its number replaces it."""

    __tablename__ = "upload_parts"
    __table_args__ = (
        CheckConstraint(f"part_number BETWEEN 1 AND {MAX_PART_NUMBER}", name="part_number"),
        CheckConstraint("size >= 0", name="size"),
    )

    upload_id: Mapped[str] = mapped_column(
        key_string(UPLOAD_ID_LENGTH),
        ForeignKey("multipart_uploads.id", ondelete="CASCADE"),
        primary_key=True,
    )
    part_number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    size: Mapped[int] = mapped_column(BigInteger)
    # As sent to the client, quotes included: "<md5>" (copies may differ).
    etag: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Base64 checksum of the part in its upload's algorithm (None: no algorithm).
    checksum: Mapped[str | None] = mapped_column(String(64), default=None)

    def __repr__(self) -> str:
        return (
            f"UploadPart(upload_id={self.upload_id!r}, part_number={self.part_number}, "
            f"size={self.size}, etag={self.etag!r})"
        )


class PartPiece(Base):
    """Bytes of a part, in `seq` order: chunk bytes [offset, offset + length)."""

    __tablename__ = "part_pieces"
    __table_args__ = (
        ForeignKeyConstraint(
            ["upload_id", "part_number"],
            ["upload_parts.upload_id", "upload_parts.part_number"],
            ondelete="CASCADE",
        ),
        CheckConstraint("length > 0", name="length"),
        CheckConstraint('"offset" >= 0', name="offset"),
        # Reference counting: is this chunk still used by any part?
        Index(None, "chunk_id"),
    )

    upload_id: Mapped[str] = mapped_column(key_string(UPLOAD_ID_LENGTH), primary_key=True)
    part_number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # RESTRICT (the default): a chunk row cannot vanish under a part piece.
    chunk_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("chunks.id"))
    offset: Mapped[int] = mapped_column(BigInteger)
    length: Mapped[int] = mapped_column(BigInteger)

    def __repr__(self) -> str:
        return (
            f"PartPiece(upload_id={self.upload_id!r}, part_number={self.part_number}, "
            f"seq={self.seq}, chunk_id={self.chunk_id}, offset={self.offset}, "
            f"length={self.length})"
        )


class SpooledPart(Base):
    """A multipart part acknowledged from the local staging spool, not yet in
    Telegram: its bytes are the file `path` (relative to SPOOL_DIR).

    Its `UploadPart` row exists (size, ETag) with no pieces; once the flusher
    has stored the bytes, the pieces are written and this row goes in one
    transaction. Replacing or aborting the part deletes this row with it.
    """

    __tablename__ = "spooled_parts"
    __table_args__ = (
        ForeignKeyConstraint(
            ["upload_id", "part_number"],
            ["upload_parts.upload_id", "upload_parts.part_number"],
            ondelete="CASCADE",
        ),
        UniqueConstraint("upload_id", "part_number"),
        CheckConstraint("size > 0", name="size"),
        Index(None, "owner"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    upload_id: Mapped[str] = mapped_column(key_string(UPLOAD_ID_LENGTH))
    part_number: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    owner: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # MD5 (hex) of the file as written, checked by reads from the spool; None
    # for rows from before reads did (the part's ETag is its MD5 then).
    md5: Mapped[str | None] = mapped_column(String(32), default=None)

    def __repr__(self) -> str:
        return (
            f"SpooledPart(id={self.id}, upload_id={self.upload_id!r}, "
            f"part_number={self.part_number}, size={self.size})"
        )


class PendingCopy(Base):
    """An upload part copied, metadata only, from bytes of a completed upload
    still partly in the spool (a pending object's, app.db.pending): the part
    is `length` bytes of that upload from `source_start`. It has no pieces
    until the source upload is finalised, which gives it its pieces and
    deletes this row in one transaction.
    """

    __tablename__ = "pending_copies"
    __table_args__ = (
        ForeignKeyConstraint(
            ["target_upload_id", "target_part_number"],
            ["upload_parts.upload_id", "upload_parts.part_number"],
            ondelete="CASCADE",
        ),
        UniqueConstraint("target_upload_id", "target_part_number"),
        CheckConstraint("length > 0", name="length"),
        Index(None, "source_upload_id"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    # No ON DELETE: a source is deleted only once its copies are resolved.
    source_upload_id: Mapped[str] = mapped_column(
        key_string(UPLOAD_ID_LENGTH), ForeignKey("multipart_uploads.id")
    )
    source_start: Mapped[int] = mapped_column(BigInteger)
    length: Mapped[int] = mapped_column(BigInteger)
    target_upload_id: Mapped[str] = mapped_column(key_string(UPLOAD_ID_LENGTH))
    target_part_number: Mapped[int] = mapped_column(Integer)

    def __repr__(self) -> str:
        return (
            f"PendingCopy(id={self.id}, source={self.source_upload_id!r}+{self.source_start}, "
            f"length={self.length}, target={self.target_upload_id!r}#{self.target_part_number})"
        )
