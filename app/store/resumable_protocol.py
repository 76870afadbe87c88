"""What the tus protocol layer (app/http/api/tus.py) needs from the storage.

The protocol layer parses headers and answers in tus's terms; everything it
does to an upload goes through `ResumableUploads`, implemented on the spool,
the flusher and the object store by app/store/resumable.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from app.db.models import MAX_PART_NUMBER, TusUpload
from app.db.multipart_errors import UploadMissing
from app.db.resumable import (
    AlreadyComplete,
    ConcatenationRefused,
    OffsetMismatch,
    TooManySegments,
    TusUploadMissing,
)
from app.store.flusher import FlushFailed

__all__ = [
    "MAX_SEGMENTS",
    "AlreadyComplete",
    "BodyTooLong",
    "ChecksumMismatch",
    "ConcatenationRefused",
    "FlushFailed",
    "OffsetMismatch",
    "ResumableUploads",
    "TooManySegments",
    "TusUploadMissing",
    "UploadMissing",
    "UploadState",
]

# The segments (multipart parts) one upload may have.
MAX_SEGMENTS = MAX_PART_NUMBER


class ChecksumMismatch(Exception):
    """A PATCH's body does not match its Upload-Checksum; none of it was kept."""


class BodyTooLong(Exception):
    """A PATCH's body goes past the end of the upload (its length, or the
    size limit while the length is deferred). The bytes up to `offset` are kept."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the body goes past the end of the upload at offset {offset}")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class UploadState:
    id: str
    api_key_id: int
    kind: str  # single, partial or final
    length: int | None
    offset: int
    metadata: str  # the Upload-Metadata header as sent
    concat: tuple[str, ...]  # a final upload's partial upload ids
    public_id: str | None  # set once complete (never for a partial)
    expires_at: datetime

    @classmethod
    def from_row(cls, row: TusUpload) -> UploadState:
        return cls(
            id=row.id,
            api_key_id=row.api_key_id,
            kind=row.kind,
            length=row.length,
            offset=row.offset,
            metadata=row.upload_metadata,
            concat=tuple((row.concat or "").split()),
            public_id=row.public_id,
            expires_at=row.expires_at,
        )

    @property
    def has_all_bytes(self) -> bool:
        return self.length is not None and self.offset == self.length


@dataclass(frozen=True, slots=True)
class Checksum:
    algorithm: str  # sha1, sha256 or md5
    digest: bytes


class ResumableUploads(Protocol):
    async def create(
        self,
        *,
        api_key_id: int,
        kind: str,
        length: int | None,
        metadata: str,
        bucket: str,
        content_type: str,
    ) -> UploadState: ...

    async def get(self, upload_id: str) -> UploadState | None: ...

    async def append(
        self,
        upload_id: str,
        at_offset: int,
        body: AsyncIterator[bytes],
        *,
        room: int,
        checksum: Checksum | None,
    ) -> UploadState:
        """Stream `body` in from `at_offset`, advancing the offset as each
        segment becomes durable; at most `room` bytes (BodyTooLong past it)."""
        ...

    async def declare_length(self, upload_id: str, length: int) -> UploadState: ...

    async def complete(self, upload_id: str, *, name: str) -> UploadState:
        """Make the object of an upload that has all its bytes (idempotent)."""
        ...

    async def concatenate(
        self,
        *,
        api_key_id: int,
        partial_ids: Sequence[str],
        metadata: str,
        bucket: str,
        name: str,
        content_type: str,
    ) -> UploadState: ...

    async def terminate(self, upload_id: str) -> None: ...

    async def remove_expired(self) -> int: ...
