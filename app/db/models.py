"""The database schema, as SQLAlchemy models.

A stored file is an `StoredObject` whose bytes are either inline (small objects)
or the concatenation of its `Piece`s. A piece is a byte range of a `Chunk`, one
Telegram document. Pieces, not whole chunks, make copies metadata-only: a copy
of a range points into existing chunks, so one chunk may back several objects
and is deleted from Telegram only when the last piece referencing it goes.

Every Telegram message that must be deleted is written to `gc_ledger` in the
same transaction that stops needing it, so a crash never forgets one.

Multipart uploads (S3) collect `UploadPart`s whose bytes are `PartPiece`s, the
same kind of chunk ranges; completing an upload turns the listed parts' pieces
into the new object's pieces. A chunk is referenced while any piece or part
piece points at it.

The migration in migrations/versions must match this file; a test compares them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.db.types import BigIntPK, JsonDict, UtcDateTime, key_string, utcnow

ChunkState = Literal["pending", "live"]
GcReason = Literal["failed_upload", "aborted", "overwritten", "deleted", "orphaned"]
# What an API key may do, each scope including the ones before it: `read`
# lists and (with REQUIRE_KEY_FOR_DOWNLOADS) downloads, `write` also uploads
# and deletes or replaces what it uploaded, `admin` does everything.
KeyScope = Literal["read", "write", "admin"]
TusKind = Literal["single", "partial", "final"]

CHUNK_STATES: tuple[str, ...] = get_args(ChunkState)
GC_REASONS: tuple[str, ...] = get_args(GcReason)
KEY_SCOPES: tuple[KeyScope, ...] = get_args(KeyScope)
TUS_KINDS: tuple[str, ...] = get_args(TusKind)

MAX_KEY_LENGTH = 1024  # S3's limit, in bytes of UTF-8; we check characters.
MAX_BUCKET_NAME_LENGTH = 63
MAX_NAME_LENGTH = 1024  # an object's file name, in characters
MAX_CONTENT_TYPE_LENGTH = 255  # in characters
MAX_PART_NUMBER = 10_000
UPLOAD_ID_LENGTH = 64


# Without AUTOINCREMENT, SQLite hands the id of a deleted last row to the next
# insert. An id must name one thing forever: a reader holding the id of a
# replaced object must find nothing, not the pieces of its successor.
# (Postgres sequences never go back.)
NEVER_REUSE_IDS = {"sqlite_autoincrement": True}


def _in_list(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    # Named constraints: Alembic (and SQLite's batch mode) can only alter or
    # drop a constraint it can name.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Chunk(Base):
    """One Telegram document holding up to 19 MiB of some object(s)."""

    __tablename__ = "chunks"
    __table_args__ = (
        CheckConstraint(_in_list("state", CHUNK_STATES), name="state"),
        CheckConstraint("size >= 0", name="size"),
        # collect_pending_orphans scans pending chunks by age.
        Index(None, "state", "created_at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    # file_id only works with the bot that uploaded the document.
    bot_id: Mapped[int] = mapped_column(BigInteger)
    file_id: Mapped[str] = mapped_column(Text)
    file_unique_id: Mapped[str] = mapped_column(Text)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    message_id: Mapped[int] = mapped_column(BigInteger)
    # 'pending' from the end of its upload until an object references it;
    # pending chunks left by a crash are collected once their owner is gone.
    state: Mapped[str] = mapped_column(String(16), default="pending")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # The instance whose upload made it (None: before instances existed).
    owner: Mapped[str | None] = mapped_column(String(32), nullable=True, default=None)

    def __repr__(self) -> str:
        return f"Chunk(id={self.id}, size={self.size}, state={self.state!r})"


class StoredObject(Base):
    """One object (file) under (bucket, key)."""

    __tablename__ = "objects"
    __table_args__ = (
        # Also the index for listing: range scans on key within a bucket.
        UniqueConstraint("bucket", "key"),
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
    parts: Mapped[list[Any] | None] = mapped_column(JsonDict, default=None, deferred=True)
    # S3 object tags ({key: value}) of this version; None: no tags.
    tags: Mapped[dict[str, str] | None] = mapped_column(JsonDict, nullable=True, default=None)

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


class ApiKey(Base):
    """An API key. Only its SHA-256 is stored; the key itself is shown once."""

    __tablename__ = "api_keys"
    __table_args__ = (CheckConstraint(_in_list("scope", KEY_SCOPES), name="scope"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def allows(self, scope: KeyScope) -> bool:
        """Whether this key's scope includes `scope`."""
        return KEY_SCOPES.index(self.scope) >= KEY_SCOPES.index(scope)

    def __repr__(self) -> str:
        return (
            f"ApiKey(name={self.name!r}, prefix={self.prefix!r}, scope={self.scope!r}, "
            f"revoked={self.revoked})"
        )


class GcEntry(Base):
    """A Telegram message that must be deleted; the row goes once it is."""

    __tablename__ = "gc_ledger"
    __table_args__ = (
        CheckConstraint(_in_list("reason", GC_REASONS), name="reason"),
        Index(None, "next_attempt_at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    bot_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    message_id: Mapped[int] = mapped_column(BigInteger)
    file_unique_id: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(String(32))
    enqueued_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return (
            f"GcEntry(id={self.id}, chat_id={self.chat_id}, message_id={self.message_id}, "
            f"reason={self.reason!r}, attempts={self.attempts})"
        )


class Bucket(Base):
    """An S3 bucket. Objects do not reference it: the native API's bucket has no row."""

    __tablename__ = "buckets"

    # Byte order, the order ListBuckets returns.
    name: Mapped[str] = mapped_column(key_string(MAX_BUCKET_NAME_LENGTH), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"Bucket(name={self.name!r})"


class MultipartUpload(Base):
    """An S3 multipart upload in progress; `id` is the UploadId clients carry."""

    __tablename__ = "multipart_uploads"
    __table_args__ = (
        # ListMultipartUploads: a range scan in (key, upload id) order.
        Index(None, "bucket", "key", "id"),
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
    tags: Mapped[dict[str, str] | None] = mapped_column(JsonDict, nullable=True, default=None)

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


class Instance(Base):
    """A running service process, alive while its heartbeat is fresh.

    Rows it owns (spooled parts) are taken over by another instance only once
    its heartbeat is stale, so two processes on one database never retire each
    other's work.
    """

    __tablename__ = "instances"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Jobs waiting in its dispatcher at its last lease round: bots go where
    # the work is (app/telegram/leases.py).
    backlog: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    def __repr__(self) -> str:
        return f"Instance(id={self.id!r}, host={self.host!r}, pid={self.pid})"


class BotLease(Base):
    """Which instance may call Telegram with a bot token, until when.

    One call per token holds across the fleet because only the lease holder
    runs a worker for the bot. Keyed by a hash of the token (the token itself
    is a secret and never stored). A 429 cooldown is kept here so the next
    holder honours it.
    """

    __tablename__ = "bot_leases"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    bot_id: Mapped[int] = mapped_column(BigInteger)
    owner: Mapped[str] = mapped_column(String(32))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    cooldown_until: Mapped[datetime] = mapped_column(UtcDateTime)

    def __repr__(self) -> str:
        return f"BotLease(bot_id={self.bot_id}, owner={self.owner!r})"


class SharedFilePath(Base):
    """A file_path one instance asked for a chunk whose bot another instance
    holds, and the holder's answer (app/store/shared_paths.py).

    Downloading a file's bytes needs no lease (it is no Bot API method call),
    but getFile does: only the bot's holder may ask Telegram for the path.
    """

    __tablename__ = "shared_file_paths"

    bot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    file_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime)
    file_path: Mapped[str | None] = mapped_column(String(255), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


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

    def __repr__(self) -> str:
        return (
            f"SpooledPart(id={self.id}, upload_id={self.upload_id!r}, "
            f"part_number={self.part_number}, size={self.size})"
        )


class TusUpload(Base):
    """A resumable (tus) upload, from creation until it expires.

    Its bytes are the parts of the multipart upload with the same id (one part
    per durable segment of a PATCH, spooled or stored like S3 parts), so the
    spool, the flusher and crash adoption carry them unchanged. `offset` is
    the sum of the committed parts' sizes: bytes durable in the spool or in
    Telegram. Once complete, the multipart upload is gone and `public_id`
    names the object; the row stays until `expires_at` so HEAD can say so.
    A partial upload is consumed (row and parts) by the final that uses it.
    """

    __tablename__ = "tus_uploads"
    __table_args__ = (
        CheckConstraint(_in_list("kind", TUS_KINDS), name="kind"),
        CheckConstraint('"offset" >= 0 AND parts >= 0', name="offset"),
        CheckConstraint('length IS NULL OR "offset" <= length', name="length"),
        # The cleanup finds expired uploads by time.
        Index(None, "expires_at"),
    )

    id: Mapped[str] = mapped_column(key_string(UPLOAD_ID_LENGTH), primary_key=True)
    # The key that created it: no other key may see or change it.
    api_key_id: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    # None until a deferred length is declared.
    length: Mapped[int | None] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    parts: Mapped[int] = mapped_column(Integer, default=0)
    # The Upload-Metadata header as the client sent it.
    upload_metadata: Mapped[str] = mapped_column(Text, default="")
    # A final upload: the Upload-Concat header's partial upload ids, space-separated.
    concat: Mapped[str | None] = mapped_column(Text)
    public_id: Mapped[str | None] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    def __repr__(self) -> str:
        return (
            f"TusUpload(id={self.id!r}, kind={self.kind!r}, offset={self.offset}, "
            f"length={self.length})"
        )


class WebSession(Base):
    """A sign-in of the web page. Its cookie holds a random token; only the
    token's SHA-256 is stored. Revoking or deleting the key ends its sessions
    (the key is checked on every use; deleting it deletes them)."""

    __tablename__ = "web_sessions"
    __table_args__ = (Index(None, "expires_at"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    api_key_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("api_keys.id", ondelete="CASCADE")
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


class SendIntent(Base):
    """A sendDocument that may be in flight: written before the call, deleted
    once its message id is in a chunk row or the send has failed.

    Reconciliation deletes unheld message ids only once every intent that
    existed when it probed the chat is gone or belongs to a dead instance, so
    a live upload's message is never taken for an orphan.
    """

    __tablename__ = "send_intents"
    __table_args__ = (Index(None, "owner"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"SendIntent(id={self.id}, owner={self.owner!r}, chat_id={self.chat_id})"


class ChatWatermark(Base):
    """The highest message id of a chat known reconciled: every id up to it is
    held by a row, deleted, or in the GC ledger. `unclean_since`: an instance
    died with sends possibly in flight; ids above the mark need a probe.
    `deleted_above`: how many of the service's messages above the mark it
    has deleted since; with the rows, they tell its ids from foreign posts."""

    __tablename__ = "chat_watermarks"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    message_id: Mapped[int] = mapped_column(BigInteger)
    unclean_since: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    deleted_above: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    def __repr__(self) -> str:
        return (
            f"ChatWatermark(chat_id={self.chat_id}, message_id={self.message_id}, "
            f"unclean_since={self.unclean_since})"
        )
