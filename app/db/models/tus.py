"""Resumable (tus) uploads."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import BigInteger, CheckConstraint, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import Base, in_list
from app.db.models.multipart import UPLOAD_ID_LENGTH
from app.db.types import UtcDateTime, key_string, utcnow

TusKind = Literal["single", "partial", "final"]

TUS_KINDS: tuple[str, ...] = get_args(TusKind)


class TusUpload(Base):
    """A resumable (tus) upload, from creation until it expires.

    Its bytes are the parts of the multipart upload with the same id (one part
    per durable segment of a PATCH, spooled or stored like S3 parts), so the
    spool, the flusher and crash adoption carry them unchanged. `offset` is
    the sum of the committed parts' sizes: bytes durable in the spool or in
    Telegram. Once complete, the multipart upload is gone and `public_id`
    names the object; the row stays until `expires_at` so HEAD can say so.
    A partial upload is consumed by the final that uses it: its row at once,
    its parts too once in Telegram (while some are spooled, its multipart
    upload stays as the source of the final's copy: app.db.pending).
    """

    __tablename__ = "tus_uploads"
    __table_args__ = (
        CheckConstraint(in_list("kind", TUS_KINDS), name="kind"),
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
