"""When each message was posted, the messages left in the channel for good,
and how full each storage chat is.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07

Bots may delete a channel post for 48 hours from its *posting* (td's
MessagesManager.cpp), so the GC needs every message's posting time:
`gc_ledger.posted_at` and `snapshot_messages.posted_at` (chunk copies have
theirs, `created_at`). NULL, for the rows written before this revision: the
GC then counts from `enqueued_at`, as it did.

`left_messages`: what the GC could not delete (the 48 hours ran out, or
Telegram refused): it stays in the channel, and the row keeps it counted.

`chat_fill`: the newest message id seen in each storage chat, which is how
many messages the chat holds (CHAT_MESSAGE_LIMIT), seeded here from the ids
the database already knows.

Additive: the previous release neither reads nor writes the new columns and
tables (a message it leaves behind is not counted; its posts do not raise a
chat's fill until this release runs again).

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)

# The tables whose rows name messages of the storage chats, as of this revision.
_NAMING_MESSAGES = ("chunk_copies", "snapshot_messages", "gc_ledger", "chat_watermarks")


def upgrade() -> None:
    # Plain ADD COLUMN, not a batch: SQLite's batch mode rebuilds the table.
    op.add_column("gc_ledger", sa.Column("posted_at", TIMESTAMP, nullable=True))
    op.add_column("snapshot_messages", sa.Column("posted_at", TIMESTAMP, nullable=True))
    op.create_table(
        "left_messages",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("file_unique_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("why", sa.String(16), nullable=False),
        sa.Column("posted_at", TIMESTAMP, nullable=True),
        sa.Column("left_at", TIMESTAMP, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_left_messages")),
        sa.CheckConstraint("why IN ('past_window', 'refused')", name=op.f("ck_left_messages_why")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_left_messages_chat_id_message_id"), "left_messages", ["chat_id", "message_id"]
    )
    op.create_table(
        "chat_fill",
        sa.Column("chat_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("newest_message_id", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("chat_id", name=op.f("pk_chat_fill")),
    )
    known = " UNION ALL ".join(
        f"SELECT chat_id, message_id FROM {table}" for table in _NAMING_MESSAGES
    )
    op.execute(
        "INSERT INTO chat_fill (chat_id, newest_message_id, updated_at) "
        f"SELECT chat_id, max(message_id), CURRENT_TIMESTAMP FROM ({known}) AS known "
        "GROUP BY chat_id"
    )


def downgrade() -> None:
    op.drop_table("chat_fill")
    op.drop_index(op.f("ix_left_messages_chat_id_message_id"), "left_messages")
    op.drop_table("left_messages")
    # DROP COLUMN in place (SQLite 3.35+), for the reason above.
    op.execute("ALTER TABLE snapshot_messages DROP COLUMN posted_at")
    op.execute("ALTER TABLE gc_ledger DROP COLUMN posted_at")
