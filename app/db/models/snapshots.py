"""Snapshots of the metadata, written into the storage chats (app/store/snapshot.py).

Each message of a snapshot (its pieces, and its manifest in every storage
chat) has a row: reconciliation takes them for the service's own messages
(not orphans), and the pruning of old snapshots finds them to ledger. One
`SnapshotLease` row says which instance writes snapshots now (and ships the
journal). `JournalEntry` rows, written by triggers (migration 0019), name the
rows changed since the journal last shipped.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base
from app.db.types import BigIntPK, UtcDateTime


class SnapshotMessage(Base):
    """One Telegram message of the snapshot taken at `taken_at`."""

    __tablename__ = "snapshot_messages"
    __table_args__ = (
        Index(None, "chat_id", "message_id"),
        Index(None, "taken_at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    taken_at: Mapped[datetime] = mapped_column(UtcDateTime)
    kind: Mapped[str] = mapped_column(String(16))  # "piece" or "manifest"
    bot_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    message_id: Mapped[int] = mapped_column(BigInteger)
    file_unique_id: Mapped[str] = mapped_column(Text)
    # A journal batch's: where a restore finds it again (JSON; app/store/journal.py).
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    # When Telegram posted it, at the latest (the service's clock as it was
    # recorded), for the 48 h delete window; None: recorded before 0028.
    posted_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)
    # A manifest's, once its snapshot's pin stands in every chat: the journal
    # chains only onto a pinned snapshot (a restore finds no other).
    pinned_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)


class SnapshotLease(Base):
    """Who writes snapshots, until when: one row, named "snapshot"."""

    __tablename__ = "snapshot_lease"

    name: Mapped[str] = mapped_column(String(16), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(32), nullable=True)
    until: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


class JournalEntry(Base):
    """A row of `table_name` (its primary key, a JSON array) changed and is
    not shipped yet. Database triggers write these; the shipper deletes them."""

    __tablename__ = "journal"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    table_name: Mapped[str] = mapped_column(String(32))
    row_key: Mapped[str] = mapped_column(Text)
    # Written by the database (SQLite's CURRENT_TIMESTAMP is naive text).
    created_at: Mapped[datetime] = mapped_column(
        UtcDateTime, server_default=text("CURRENT_TIMESTAMP")
    )
