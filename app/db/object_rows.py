"""An object's row, in the shapes the store sees: `ObjectRow`, what every
read returns, and `ObjectSpec` (with its `PieceSpec`s and `StoredChecksum`),
everything `ObjectRepository.put` writes; `row_values` turns a spec into an
objects row, and the inserts here are built once per dialect so a PUT only
binds values.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, exists, literal_column

from app.db.dialects import PerDialect, upsert_insert
from app.db.models import MAX_KEY_LENGTH, Piece, StoredObject
from app.db.pending_filter import pending_object


class ObjectRow(NamedTuple):
    """An objects row, every column but `parts`, in the table's order: the
    one shape in which the database hands an object to the store, whether a
    single statement read it or the ORM (`of`)."""

    id: int
    bucket: str
    key: str
    public_id: str
    name: str
    content_type: str
    size: int
    etag: str
    md5: str | None
    sha256: str | None
    user_metadata: dict[str, Any]
    inline_data: bytes | None
    created_at: datetime
    updated_at: datetime
    owner_key_id: int | None
    checksum_algorithm: str | None
    checksum: str | None
    checksum_type: str | None
    tags: dict[str, str] | None

    @classmethod
    def of(cls, obj: StoredObject) -> ObjectRow:
        """The row of an ORM object (its `inline_data` None when not loaded,
        as listings leave it)."""
        values: list[Any] = [
            obj.__dict__.get(name) if name == "inline_data" else getattr(obj, name)
            for name in cls._fields
        ]
        return cls(*values)


def new_public_id() -> str:
    """24 URL-safe characters, about 144 random bits, never starting with "-"
    (a command line takes such an id for an option: `trash restore -AbC...`)."""
    while True:
        public_id = secrets.token_urlsafe(18)
        if not public_id.startswith("-"):
            return public_id


@dataclass(frozen=True, slots=True)
class StoredChecksum:
    """An S3 flexible checksum of an object: `algorithm` lowercase (crc32...),
    `value` base64 (with "-<parts>" when `type` is COMPOSITE), `type`
    COMPOSITE or FULL_OBJECT."""

    algorithm: str
    value: str
    type: str


#: One part of a multipart object: its size and checksum (None if none).
PartSummary = tuple[int, str | None]


@dataclass(frozen=True, slots=True)
class PieceSpec:
    """Bytes [offset, offset + length) of a chunk; pieces follow each other in the object."""

    chunk_id: int
    offset: int
    length: int


def piece_rows(object_id: int, pieces: Sequence[PieceSpec]) -> list[dict[str, Any]]:
    """The `pieces` rows of an object made of `pieces`, in order, each with
    its object-level `start`."""
    rows = []
    start = 0
    for seq, piece in enumerate(pieces):
        rows.append(
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
    return rows


def merge_adjacent(pieces: Iterable[PieceSpec]) -> list[PieceSpec]:
    """Join pieces that continue each other within one chunk.

    Consecutive UploadPartCopy ranges of one object cut its chunks at part
    boundaries; joined again, a read fetches each stretch of a chunk once.
    """
    merged: list[PieceSpec] = []
    for piece in pieces:
        if merged:
            last = merged[-1]
            if last.chunk_id == piece.chunk_id and last.offset + last.length == piece.offset:
                merged[-1] = PieceSpec(last.chunk_id, last.offset, last.length + piece.length)
                continue
        merged.append(piece)
    return merged


@dataclass(frozen=True, slots=True)
class ObjectSpec:
    """Everything `ObjectRepository.put` writes.

    The content is either `inline_data` or `pieces` (an empty object may have
    neither); the pieces' lengths must add up to `size`.
    """

    bucket: str
    key: str
    name: str
    content_type: str
    size: int
    etag: str
    md5: str | None = None
    sha256: str | None = None
    user_metadata: Mapping[str, Any] = field(default_factory=dict)
    inline_data: bytes | None = None
    pieces: Sequence[PieceSpec] = ()
    # The API key uploading it (recorded as the object's owner), if any.
    owner_key_id: int | None = None
    checksum: StoredChecksum | None = None
    # The parts of an object made by CompleteMultipartUpload, in order.
    parts: Sequence[PartSummary] | None = None
    # S3 object tags of this version (None or empty: no tags).
    tags: Mapping[str, str] | None = None
    # Its bytes are still partly spooled: no pieces yet (app.db.pending).
    pending: bool = False

    def check(self) -> None:
        if not self.bucket or not self.key:
            raise ValueError("bucket and key must not be empty")
        if len(self.key) > MAX_KEY_LENGTH:
            raise ValueError(f"key is longer than {MAX_KEY_LENGTH} characters")
        if self.size < 0:
            raise ValueError("size must not be negative")
        if self.inline_data is not None:
            if self.pieces:
                raise ValueError("an object is inline or in pieces, not both")
            if len(self.inline_data) != self.size:
                raise ValueError(f"inline data is {len(self.inline_data)} bytes, size {self.size}")
            return
        if self.pending:
            if self.pieces:
                raise ValueError("a pending object gets its pieces when its parts are flushed")
            return
        for piece in self.pieces:
            if piece.length <= 0 or piece.offset < 0:
                raise ValueError(f"invalid piece {piece}")
        total = sum(piece.length for piece in self.pieces)
        if total != self.size:
            raise ValueError(f"pieces add up to {total} bytes, size is {self.size}")


def _object_insert(dialect_name: str, *, unless_exists: bool) -> Any:
    """The row insert, given its values at run time: building it per PUT
    (ORM DML, `.values()`) cost more CPU than running it."""
    table = StoredObject.__table__
    statement = upsert_insert(dialect_name, table)
    if unless_exists:
        statement = statement.on_conflict_do_nothing(index_elements=["bucket", "key"])
    return statement.returning(table.c.id)


#: Per dialect: insert an object's row, returning its id (the key must be free).
INSERTS = PerDialect(partial(_object_insert, unless_exists=False))
#: Per dialect: insert an object's row unless its key is taken, returning its
#: id (none if taken). On its own it is safe against every concurrent writer:
#: the unique (bucket, key) index makes it wait for one that holds the key.
INSERTS_UNLESS_EXISTS = PerDialect(partial(_object_insert, unless_exists=True))


def row_values(
    spec: ObjectSpec, public_id: str, created_at: datetime, updated_at: datetime
) -> dict[str, Any]:
    """The objects row of `spec`, but for its id."""
    return {
        "bucket": spec.bucket,
        "key": spec.key,
        "public_id": public_id,
        "name": spec.name,
        "content_type": spec.content_type,
        "size": spec.size,
        "etag": spec.etag,
        "md5": spec.md5,
        "sha256": spec.sha256,
        "user_metadata": dict(spec.user_metadata),
        "inline_data": spec.inline_data,
        "created_at": created_at,
        "updated_at": updated_at,
        "owner_key_id": spec.owner_key_id,
        "checksum_algorithm": spec.checksum.algorithm if spec.checksum else None,
        "checksum": spec.checksum.value if spec.checksum else None,
        "checksum_type": spec.checksum.type if spec.checksum else None,
        "parts": [list(part) for part in spec.parts] if spec.parts is not None else None,
        "tags": dict(spec.tags) if spec.tags else None,
    }


def _chunkless_put(dialect_name: str) -> Any:
    """The row insert that, when the key is taken by an object referencing no
    chunk, replaces that object's row in place instead."""
    table = StoredObject.__table__
    # The row in conflict, named as SQL: SQLAlchemy does not correlate a
    # subquery in an upsert's WHERE (it would scan every object instead).
    conflicting_id: ColumnElement[int] = literal_column(f"{StoredObject.__tablename__}.id")
    references_a_chunk = exists().where(
        Piece.__table__.c.object_id == conflicting_id
    ) | pending_object(conflicting_id)
    statement = upsert_insert(dialect_name, table)
    # Every column of the new version but the row id and the creation time,
    # which the key keeps (as a replacement through the session).
    new_version = {
        column.name: statement.excluded[column.name]
        for column in table.c
        if column.name not in ("id", "bucket", "key", "created_at")
    }
    return statement.on_conflict_do_update(
        index_elements=["bucket", "key"], set_=new_version, where=~references_a_chunk
    ).returning(table.c.id, table.c.created_at)


#: Per dialect: store an object that references no chunk under its key,
#: returning the row's id and creation time; none when the key's current
#: object references chunks (their release needs `ObjectRepository.put`).
#: Replacing in place, on the row's lock, is one statement: safe against every
#: concurrent writer, and readers see the old version or the new one whole.
CHUNKLESS_PUTS = PerDialect(_chunkless_put)
