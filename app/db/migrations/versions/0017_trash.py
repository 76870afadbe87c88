"""The trash: deleted and replaced objects kept restorable (TRASH_RETENTION_SECONDS).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

A new table, `trash`: one row per object in the trash, naming where it was
(bucket, key), why it went (deleted or replaced) and until when it may come
back. The trashed object keeps its `objects` row, moved to the bucket
`_trash`. Additive: the previous release neither reads nor writes it.

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def key_string(length: int) -> sa.types.TypeEngine[str]:
    # Byte-order ("C") comparison on Postgres, as objects.key.
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "trash",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("object_id", sa.BigInteger(), nullable=False),
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("key", key_string(1024), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("trashed_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trash")),
        sa.ForeignKeyConstraint(
            ["object_id"],
            ["objects.id"],
            name=op.f("fk_trash_object_id_objects"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("object_id", name=op.f("uq_trash_object_id")),
        sa.CheckConstraint("reason IN ('deleted', 'replaced')", name=op.f("ck_trash_reason")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_trash_expires_at"), "trash", ["expires_at"])


def downgrade() -> None:
    # The trashed objects go for good, and the chunks only they used go to
    # the GC ledger: their rows would otherwise hold those chunks forever
    # under a bucket nothing reads.
    op.execute(
        "CREATE TABLE trash_downgrade_chunks AS SELECT DISTINCT p.chunk_id AS id "
        "FROM pieces AS p JOIN trash AS t ON t.object_id = p.object_id "
        "WHERE p.chunk_id NOT IN (SELECT q.chunk_id FROM pieces AS q "
        "WHERE q.object_id NOT IN (SELECT object_id FROM trash)) "
        "AND p.chunk_id NOT IN (SELECT chunk_id FROM part_pieces)"
    )
    op.execute(
        "INSERT INTO gc_ledger (bot_id, chat_id, message_id, file_unique_id, reason, "
        "enqueued_at, attempts, next_attempt_at) SELECT bot_id, chat_id, message_id, "
        "file_unique_id, 'deleted', CURRENT_TIMESTAMP, 0, CURRENT_TIMESTAMP "
        "FROM chunk_copies WHERE chunk_id IN (SELECT id FROM trash_downgrade_chunks)"
    )
    op.execute("DELETE FROM pieces WHERE object_id IN (SELECT object_id FROM trash)")
    op.execute("DELETE FROM objects WHERE id IN (SELECT object_id FROM trash)")
    op.execute("DELETE FROM chunk_copies WHERE chunk_id IN (SELECT id FROM trash_downgrade_chunks)")
    op.execute("DELETE FROM chunks WHERE id IN (SELECT id FROM trash_downgrade_chunks)")
    op.drop_table("trash_downgrade_chunks")
    op.drop_index(op.f("ix_trash_expires_at"), "trash")
    op.drop_table("trash")
