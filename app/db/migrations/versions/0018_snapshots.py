"""Snapshots of the metadata in the storage chats (SNAPSHOT_INTERVAL_SECONDS).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

Two new tables: `snapshot_messages`, one row per Telegram message of a
snapshot (reconciliation counts them as the service's; old snapshots are
pruned through them), and `snapshot_lease`, one row saying which instance
writes snapshots now. Additive: the previous release neither reads nor
writes them (its reconciliation would take a snapshot's messages for
orphans: downgrade drops the tables and the snapshots go with them).

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "snapshot_messages",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("taken_at", TIMESTAMP, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("file_unique_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshot_messages")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_snapshot_messages_chat_id_message_id"),
        "snapshot_messages",
        ["chat_id", "message_id"],
    )
    op.create_index(op.f("ix_snapshot_messages_taken_at"), "snapshot_messages", ["taken_at"])
    op.create_table(
        "snapshot_lease",
        sa.Column("name", sa.String(16), nullable=False),
        sa.Column("holder", sa.String(32), nullable=True),
        sa.Column("until", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_snapshot_lease")),
    )
    op.execute("INSERT INTO snapshot_lease (name) VALUES ('snapshot')")


def downgrade() -> None:
    op.drop_table("snapshot_lease")
    op.drop_index(op.f("ix_snapshot_messages_taken_at"), "snapshot_messages")
    op.drop_index(op.f("ix_snapshot_messages_chat_id_message_id"), "snapshot_messages")
    op.drop_table("snapshot_messages")
