"""Share links: a file or a folder handed to someone, for a while, under
limits its owner sets (docs/http-api.md, "Share links").

A `Share` names what it shares, not the bytes: a file by its public id (a
native file keeps it when replaced; a trashed one leaves its bucket, so the
share stops until it is restored), a folder by its key prefix. Its token is
the capability in the link; only the owner's listing shows it again.

`ShareSession` rows are the download sessions that make the many requests
of one player or download manager count once; `ShareFailure` rows are
wrong passwords, limited per share and per client address. Both are kept
in the database so that every instance sees them; neither goes into
snapshots (a restored service starts them afresh, as it does sign-ins).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base, in_list
from app.db.models.objects import MAX_KEY_LENGTH
from app.db.types import BigIntPK, UtcDateTime, key_string

Disposition = Literal["attachment", "inline"]
DISPOSITIONS: tuple[Disposition, ...] = get_args(Disposition)
#: Characters of a share's token (secrets.token_urlsafe(32): 256 random bits).
SHARE_TOKEN_LENGTH = 43


class Share(Base):
    """A share link: exactly one of `public_id` (a file) and `prefix` (a folder)."""

    __tablename__ = "shares"
    __table_args__ = (
        CheckConstraint(in_list("disposition", DISPOSITIONS), name="disposition"),
        CheckConstraint("(public_id IS NULL) != (prefix IS NULL)", name="one_target"),
        Index(None, "owner_key_id"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    token: Mapped[str] = mapped_column(String(64), unique=True)
    # Revoking or deleting the key that made it ends the share.
    owner_key_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("api_keys.id", ondelete="CASCADE")
    )
    bucket: Mapped[str] = mapped_column(key_string(255))
    public_id: Mapped[str | None] = mapped_column(String(64))
    prefix: Mapped[str | None] = mapped_column(key_string(MAX_KEY_LENGTH))
    disposition: Mapped[str] = mapped_column(String(16))
    # An argon2id hash (its parameters and salt in the text); NULL: no password.
    password_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    max_downloads: Mapped[int | None] = mapped_column(BigInteger)
    downloads: Mapped[int] = mapped_column(BigInteger, default=0)
    last_download_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    def __repr__(self) -> str:
        # Never the token: it is the capability.
        return f"Share(id={self.id}, bucket={self.bucket!r}, downloads={self.downloads})"


class ShareSession(Base):
    """One download of a share's file (or of its folder's zip): the requests
    that carry the same session key while it lasts count as one download."""

    __tablename__ = "share_sessions"
    __table_args__ = (Index(None, "last_at"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    # SHA-256 of (share, item, browser cookie or client address and agent).
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    share_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("shares.id", ondelete="CASCADE"), index=True
    )
    # NULL until the session counted (the row is made first, then locked).
    opened_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_at: Mapped[datetime] = mapped_column(UtcDateTime)
    bytes_sent: Mapped[int] = mapped_column(BigInteger, default=0)


class ShareFailure(Base):
    """A wrong password given for a share, from a client address."""

    __tablename__ = "share_failures"
    __table_args__ = (
        Index(None, "share_id", "failed_at"),
        Index(None, "address", "failed_at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    share_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("shares.id", ondelete="CASCADE"))
    address: Mapped[str] = mapped_column(String(64))
    failed_at: Mapped[datetime] = mapped_column(UtcDateTime)


__all__ = [
    "DISPOSITIONS",
    "SHARE_TOKEN_LENGTH",
    "Disposition",
    "Share",
    "ShareFailure",
    "ShareSession",
]
