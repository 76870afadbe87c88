"""API keys, the web page's sign-in sessions made with them, and the
failed key checks counted against clients."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base, in_list
from app.db.types import BigIntPK, UtcDateTime, utcnow

# What an API key may do, each scope including the ones before it: `read`
# lists and (with REQUIRE_KEY_FOR_DOWNLOADS) downloads, `write` also uploads
# and deletes or replaces what it uploaded, `admin` does everything.
KeyScope = Literal["read", "write", "admin"]

KEY_SCOPES: tuple[KeyScope, ...] = get_args(KeyScope)


class ApiKey(Base):
    """An API key. Only its SHA-256 is stored; the key itself is shown once."""

    __tablename__ = "api_keys"
    __table_args__ = (CheckConstraint(in_list("scope", KEY_SCOPES), name="scope"), NEVER_REUSE_IDS)

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


class KeyCheckFailure(Base):
    """Failed key checks of one client, with one credential or with any
    (app/store/key_failures.py): how many since `started_at`, the first of
    them; the count starts again once the window after it has passed. Only
    failures write here, never a key that passes."""

    __tablename__ = "key_check_failures"
    __table_args__ = (Index(None, "started_at"),)

    # The client's address (an IPv6 one by its /64).
    client: Mapped[str] = mapped_column(String(64), primary_key=True)
    # A hash of the credential's start ("" for the client's failures with
    # any): no character of a key is stored, not even of a wrong one.
    credential: Mapped[str] = mapped_column(String(64), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    failures: Mapped[int] = mapped_column(Integer)
