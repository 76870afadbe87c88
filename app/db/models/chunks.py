"""Chunks (Telegram documents) and what keeps their messages accounted for.

Every Telegram message that must be deleted is written to `gc_ledger` in the
same transaction that stops needing it, so a crash never forgets one. Send
intents and chat watermarks let reconciliation find the messages no row ever
learnt of (a crash between a post and its commit).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base, in_list
from app.db.types import BigIntPK, UtcDateTime, utcnow

ChunkState = Literal["pending", "live"]
GcReason = Literal["failed_upload", "aborted", "overwritten", "deleted", "orphaned", "damaged"]
# A copy is 'ok' until a read or the scrub finds it gone from Telegram
# ('missing') or its bytes wrong ('corrupt'); a bad copy stays a row until a
# repair replaced it, so that the last evidence of a chunk is never dropped.
CopyState = Literal["ok", "missing", "corrupt"]

# Why a message stays in the channel for good: Telegram's 48 hours since its
# posting ran out before it could go ('past_window': no call was made), or
# Telegram refused its deletion for good ('refused').
LeftWhy = Literal["past_window", "refused"]

CHUNK_STATES: tuple[str, ...] = get_args(ChunkState)
GC_REASONS: tuple[str, ...] = get_args(GcReason)
COPY_STATES: tuple[str, ...] = get_args(CopyState)
LEFT_WHYS: tuple[str, ...] = get_args(LeftWhy)


class Chunk(Base):
    """Up to 19 MiB of some object(s), stored as one or more copies
    (`ChunkCopy`): each an independent Telegram document."""

    __tablename__ = "chunks"
    __table_args__ = (
        CheckConstraint(in_list("state", CHUNK_STATES), name="state"),
        CheckConstraint("size >= 0", name="size"),
        CheckConstraint("copies_ok >= 0", name="copies_ok"),
        # collect_pending_orphans scans pending chunks by age.
        Index(None, "state", "created_at"),
        # The scrub's repairs: chunks with fewer good copies than REPLICAS.
        Index(None, "copies_ok"),
        # `teleuploader encryption status` and `rotate`: chunks per master key.
        Index(None, "seal_key_id"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    size: Mapped[int] = mapped_column(BigInteger)
    # With `block_hashes`: the SHA-256 of those digests, one after another
    # (what the scrub checks a whole copy against); without (chunks stored
    # before verified reads): the SHA-256 of the bytes themselves.
    sha256: Mapped[str] = mapped_column(String(64))
    # The first 16 bytes of the digest of each 64 KiB block, in order: a
    # read checks every block before it sends a byte of it. None for chunks
    # stored before verified reads, until the scrub has read one whole.
    block_hashes: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, default=None)
    # Which digest `block_hashes` are (app/store/blocks.py): None for SHA-256,
    # as every chunk before 0022 (and every snapshot row of one) has.
    block_digest: Mapped[str | None] = mapped_column(String(16), nullable=True, default=None)
    # 'pending' from the end of its upload until an object references it;
    # pending chunks left by a crash are collected once their owner is gone.
    state: Mapped[str] = mapped_column(String(16), default="pending")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # The instance whose upload made it (None: before instances existed).
    owner: Mapped[str | None] = mapped_column(String(32), nullable=True, default=None)
    # How many of its copies are 'ok', kept in step with chunk_copies by
    # every write that changes one.
    copies_ok: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When a read or the scrub found no intact copy left: its objects are
    # lost (answered as damaged, never served, counted). Cleared if a copy
    # turns out intact after all.
    lost_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)
    # Sealed chunks (docs/encryption.md): the master key that wrapped the
    # chunk's data key, and that key wrapped. None: stored as plaintext.
    # A sealed chunk keeps no plaintext hashes (`sha256` is empty,
    # `block_hashes` None): each frame's tag is its check.
    seal_key_id: Mapped[str | None] = mapped_column(String(32), nullable=True, default=None)
    sealed_data_key: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, default=None)

    def __repr__(self) -> str:
        return f"Chunk(id={self.id}, size={self.size}, state={self.state!r})"


class ChunkCopy(Base):
    """One Telegram document holding a chunk's bytes: an upload of its own
    (a forward would share the file on Telegram's side, and a takedown would
    take both). A chunk's copies live in distinct storage chats, and are
    sent by distinct bots, where the pool allows."""

    __tablename__ = "chunk_copies"
    __table_args__ = (
        CheckConstraint(in_list("state", COPY_STATES), name="state"),
        Index(None, "chunk_id"),
        # Reconciliation: which message ids of a chat a row holds.
        Index(None, "chat_id", "message_id"),
        # The scrub visits the copies checked longest ago first.
        Index(None, "checked_at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("chunks.id", ondelete="CASCADE"))
    # file_id only works with the bot that uploaded the document.
    bot_id: Mapped[int] = mapped_column(BigInteger)
    file_id: Mapped[str] = mapped_column(Text)
    file_unique_id: Mapped[str] = mapped_column(Text)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    message_id: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16), default="ok")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # When Telegram last said it holds the file (getFile), and when its
    # bytes were last read whole and found right; None: not yet.
    checked_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)
    verified_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)
    # A sealed chunk's copy: the salt of its own copy key (a repair seals
    # under a new one). None: the chunk is plaintext.
    seal_salt: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, default=None)

    def __repr__(self) -> str:
        return (
            f"ChunkCopy(id={self.id}, chunk_id={self.chunk_id}, chat_id={self.chat_id}, "
            f"message_id={self.message_id}, state={self.state!r})"
        )


class CopyFailure(Base):
    """Reads and checks that Telegram could not serve a copy: getFile's
    "wrong file_id or the file is temporarily unavailable", which the Bot
    API server sends for any server-side download that failed (5xx and 429
    of its data centre too: telegram-bot-api Client.cpp, on_update_file).
    A copy counts as missing only once such failures spread over time
    (app/store/copy_failures.py); a read or check that succeeds drops the row.
    Here, not in memory, so that restarts and every instance agree."""

    __tablename__ = "copy_failures"

    copy_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("chunk_copies.id", ondelete="CASCADE"), primary_key=True
    )
    # The first failure counted, the last one, and how many were counted
    # (at least the rule's spacing apart: one outage is one failure).
    first_at: Mapped[datetime] = mapped_column(UtcDateTime)
    last_at: Mapped[datetime] = mapped_column(UtcDateTime)
    failures: Mapped[int] = mapped_column(Integer)


class GcEntry(Base):
    """A Telegram message that must be deleted; the row goes once it is."""

    __tablename__ = "gc_ledger"
    __table_args__ = (
        CheckConstraint(in_list("reason", GC_REASONS), name="reason"),
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
    # When Telegram posted the message, at the latest (the service's clock
    # when its reply came, or when its row was written): bots may delete it
    # for 48 hours from then. None: unknown (an orphan reconciliation found,
    # an entry from before 0028): `enqueued_at` is the latest it can be.
    posted_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True, default=None)

    def __repr__(self) -> str:
        return (
            f"GcEntry(id={self.id}, chat_id={self.chat_id}, message_id={self.message_id}, "
            f"reason={self.reason!r}, attempts={self.attempts})"
        )


class LeftMessage(Base):
    """A message the service no longer needs and can no longer delete: it
    stays in the channel for good (docs/trash.md). The row holds its id, as
    the service's, for reconciliation and the channel audit."""

    __tablename__ = "left_messages"
    __table_args__ = (
        CheckConstraint(in_list("why", LEFT_WHYS), name="why"),
        Index(None, "chat_id", "message_id"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    bot_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    message_id: Mapped[int] = mapped_column(BigInteger)
    file_unique_id: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(String(32))  # the ledger entry's: why it had to go
    why: Mapped[str] = mapped_column(String(16))
    posted_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    left_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class ChatFill(Base):
    """How many messages a storage chat holds, as the newest message id the
    service has seen there: a channel numbers its messages 1, 2, 3..., so
    that is every message ever posted in it, by anyone, deleted or not
    (CHAT_MESSAGE_LIMIT). Only ever raised; several instances raise it each
    with what their own posts were answered."""

    __tablename__ = "chat_fill"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    newest_message_id: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


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
    `deleted_above`: how many of the service's messages above the mark no
    row holds: those it has deleted since, and the service messages of its
    pins (their ids are never returned); with the rows, they tell its ids
    from foreign posts."""

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
