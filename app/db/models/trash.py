"""The trash: objects deleted or replaced, kept restorable for a while.

A trashed object keeps its `objects` row and its pieces (so its chunks stay
referenced and the GC leaves their messages alone), moved out of every live
namespace into the bucket `_trash` under its row id; a `TrashEntry` remembers
where it was and until when it may come back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base, in_list
from app.db.models.objects import MAX_KEY_LENGTH
from app.db.types import BigIntPK, UtcDateTime, key_string

TrashReason = Literal["deleted", "replaced"]
TRASH_REASONS: tuple[str, ...] = get_args(TrashReason)


class TrashEntry(Base):
    """An object in the trash: its old (bucket, key), why and when it went."""

    __tablename__ = "trash"
    __table_args__ = (
        CheckConstraint(in_list("reason", TRASH_REASONS), name="reason"),
        NEVER_REUSE_IDS,
    )

    # In the order objects went to the trash: the listing's order and cursor.
    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    # The entry goes with its object's row (expiry deletes the row).
    object_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("objects.id", ondelete="CASCADE"), unique=True
    )
    bucket: Mapped[str] = mapped_column(key_string(255))
    key: Mapped[str] = mapped_column(key_string(MAX_KEY_LENGTH))
    reason: Mapped[str] = mapped_column(String(16))
    trashed_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # The expiry's scan: entries due first.
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)

    def __repr__(self) -> str:
        return f"TrashEntry(id={self.id}, object_id={self.object_id}, key={self.key!r})"
