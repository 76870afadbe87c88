"""Stored objects, their pieces, and S3 buckets.

A stored file is a `StoredObject` whose bytes are either inline (small objects)
or the concatenation of its `Piece`s. A piece is a byte range of a `Chunk`
(app.db.models.chunks), one Telegram document. Pieces, not whole chunks, make
copies metadata-only: a copy of a range points into existing chunks, so one
chunk may back several objects and is deleted from Telegram only when the last
piece referencing it goes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base
from app.db.types import BigIntPK, JsonDict, NullableJson, UtcDateTime, key_string, utcnow

MAX_KEY_LENGTH = 1024  # S3's limit, in bytes of UTF-8; we check characters.
MAX_BUCKET_NAME_LENGTH = 63
MAX_NAME_LENGTH = 1024  # an object's file name, in characters
MAX_CONTENT_TYPE_LENGTH = 255  # in characters


class StoredObject(Base):
    """One object (file) under (bucket, key)."""

    __tablename__ = "objects"
    __table_args__ = (
        # Also the index for listing: range scans on key within a bucket.
        UniqueConstraint("bucket", "key"),
        # Listings newest or oldest first: a bucket's rows in id order.
        Index(None, "bucket", "id"),
        CheckConstraint("size >= 0", name="size"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    bucket: Mapped[str] = mapped_column(key_string(255))
    key: Mapped[str] = mapped_column(key_string(MAX_KEY_LENGTH))
    # The unguessable id of public download links (/f/<public_id>).
    public_id: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME_LENGTH))
    content_type: Mapped[str] = mapped_column(String(MAX_CONTENT_TYPE_LENGTH))
    size: Mapped[int] = mapped_column(BigInteger)
    # S3 ETag as sent to clients, quotes included: "<md5>" or "<md5>-<parts>".
    etag: Mapped[str] = mapped_column(String(80))
    md5: Mapped[str | None] = mapped_column(String(32))
    sha256: Mapped[str | None] = mapped_column(String(64))
    user_metadata: Mapped[dict[str, Any]] = mapped_column(JsonDict, default=dict)
    # Objects up to Settings.inline_threshold bytes live here, with no pieces.
    inline_data: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # The API key (api_keys.id) that uploaded this version through the native
    # API; None for S3 objects and files from before keys had owners. No
    # foreign key: keys are never deleted (a revoked key keeps its row), and
    # adding one would make SQLite rebuild this, the largest table.
    owner_key_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    # S3 flexible checksum: the algorithm (crc32, crc32c, crc64nvme, sha1,
    # sha256), its base64 value ("<base64>-<parts>" when COMPOSITE), and the
    # type (COMPOSITE or FULL_OBJECT). None when no checksum was given.
    checksum_algorithm: Mapped[str | None] = mapped_column(String(16), default=None)
    checksum: Mapped[str | None] = mapped_column(String(80), default=None)
    checksum_type: Mapped[str | None] = mapped_column(String(16), default=None)
    # An object made by CompleteMultipartUpload: [[size, checksum or null], ...]
    # per part, in order. Deferred: up to 10,000 entries, read only by
    # partNumber requests and GetObjectAttributes (ObjectRepository.parts_of).
    parts: Mapped[list[Any] | None] = mapped_column(NullableJson, default=None, deferred=True)
    # S3 object tags ({key: value}) of this version; None: no tags.
    tags: Mapped[dict[str, str] | None] = mapped_column(NullableJson, nullable=True, default=None)

    def __repr__(self) -> str:
        return f"StoredObject(id={self.id}, bucket={self.bucket!r}, key={self.key!r})"


class Piece(Base):
    """Bytes [start, start + length) of an object are chunk bytes [offset, offset + length).

    `start` is redundant (the sum of the lengths of earlier pieces) but stored:
    it turns "pieces overlapping a byte range" into one indexed query instead
    of reading every piece of a multi-GB object to add up lengths.
    """

    __tablename__ = "pieces"
    __table_args__ = (
        CheckConstraint("length > 0", name="length"),
        CheckConstraint('start >= 0 AND "offset" >= 0', name="offsets"),
        # Range lookups by object-level offset; also guarantees no two pieces
        # of one object start at the same byte.
        UniqueConstraint("object_id", "start"),
        # Reference counting: is this chunk still used by any piece?
        Index(None, "chunk_id"),
    )

    object_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("objects.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    # RESTRICT (the default): a chunk row cannot vanish under a piece.
    chunk_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("chunks.id"))
    start: Mapped[int] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(BigInteger)
    length: Mapped[int] = mapped_column(BigInteger)

    @property
    def end(self) -> int:
        return self.start + self.length

    def __repr__(self) -> str:
        return (
            f"Piece(object_id={self.object_id}, seq={self.seq}, chunk_id={self.chunk_id}, "
            f"start={self.start}, offset={self.offset}, length={self.length})"
        )


class Bucket(Base):
    """An S3 bucket. Objects do not reference it: the native API's bucket has no row."""

    __tablename__ = "buckets"

    # Byte order, the order ListBuckets returns.
    name: Mapped[str] = mapped_column(key_string(MAX_BUCKET_NAME_LENGTH), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"Bucket(name={self.name!r})"
