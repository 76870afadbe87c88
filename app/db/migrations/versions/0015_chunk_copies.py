"""Replicas and verified reads: chunk_copies, chunks.block_hashes, copies_ok, lost_at.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

A chunk's Telegram documents move to `chunk_copies`, one row per copy (every
existing chunk becomes a chunk with one copy, its own document). `chunks`
keeps what the bytes are: their size, their hash and, for chunks stored from
now on, a hash per 64 KiB block (`block_hashes`; None for the older ones,
until the scrub has read them whole), how many copies are intact
(`copies_ok`), and when none was left (`lost_at`). The GC ledger takes a new
reason, 'damaged': the message of a copy found missing or corrupt.

Not additive: the location columns leave `chunks`, which the previous
release reads. Stop every instance, migrate, then start the new release
(deploy/README.md, "Upgrade").

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)
LOCATION = ("bot_id", "file_id", "file_unique_id", "chat_id", "message_id")
REASONS_BEFORE = "'failed_upload', 'aborted', 'overwritten', 'deleted', 'orphaned'"


def upgrade() -> None:
    op.create_table(
        "chunk_copies",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("file_id", sa.Text(), nullable=False),
        sa.Column("file_unique_id", sa.Text(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("checked_at", TIMESTAMP, nullable=True),
        sa.Column("verified_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunk_copies")),
        sa.ForeignKeyConstraint(
            ["chunk_id"],
            ["chunks.id"],
            name=op.f("fk_chunk_copies_chunk_id_chunks"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "state IN ('ok', 'missing', 'corrupt')", name=op.f("ck_chunk_copies_state")
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_chunk_copies_chunk_id"), "chunk_copies", ["chunk_id"])
    op.create_index(
        op.f("ix_chunk_copies_chat_id_message_id"), "chunk_copies", ["chat_id", "message_id"]
    )
    op.create_index(op.f("ix_chunk_copies_checked_at"), "chunk_copies", ["checked_at"])
    op.execute(
        "INSERT INTO chunk_copies (chunk_id, bot_id, file_id, file_unique_id, chat_id, "
        "message_id, state, created_at) SELECT id, bot_id, file_id, file_unique_id, chat_id, "
        "message_id, 'ok', created_at FROM chunks ORDER BY id"
    )
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("block_hashes", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("copies_ok", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("lost_at", TIMESTAMP, nullable=True))
        for column in LOCATION:
            batch.drop_column(column)
        batch.create_check_constraint(op.f("ck_chunks_copies_ok"), "copies_ok >= 0")
    # New chunks count their copies as they record them.
    with op.batch_alter_table("chunks") as batch:
        batch.alter_column("copies_ok", server_default="0")
    op.create_index(op.f("ix_chunks_copies_ok"), "chunks", ["copies_ok"])
    with op.batch_alter_table("gc_ledger") as batch:
        batch.drop_constraint(op.f("ck_gc_ledger_reason"), type_="check")
        batch.create_check_constraint(
            op.f("ck_gc_ledger_reason"), f"reason IN ({REASONS_BEFORE}, 'damaged')"
        )


def downgrade() -> None:
    # Back to one document per chunk: each keeps its first intact copy (or
    # its first, if none is), the others go to the GC ledger.
    op.execute("UPDATE gc_ledger SET reason = 'orphaned' WHERE reason = 'damaged'")
    with op.batch_alter_table("gc_ledger") as batch:
        batch.drop_constraint(op.f("ck_gc_ledger_reason"), type_="check")
        batch.create_check_constraint(op.f("ck_gc_ledger_reason"), f"reason IN ({REASONS_BEFORE})")
    op.drop_index(op.f("ix_chunks_copies_ok"), "chunks")
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("bot_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("file_id", sa.Text(), nullable=True))
        batch.add_column(sa.Column("file_unique_id", sa.Text(), nullable=True))
        batch.add_column(sa.Column("chat_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("message_id", sa.BigInteger(), nullable=True))
    kept = (
        "SELECT id FROM chunk_copies AS c WHERE c.chunk_id = chunks.id "
        "ORDER BY (c.state = 'ok') DESC, c.id LIMIT 1"
    )
    for column in LOCATION:
        op.execute(
            f"UPDATE chunks SET {column} = (SELECT {column} FROM chunk_copies "
            f"WHERE chunk_copies.id = ({kept}))"
        )
    op.execute(
        "INSERT INTO gc_ledger (bot_id, chat_id, message_id, file_unique_id, reason, "
        "enqueued_at, attempts, next_attempt_at) SELECT bot_id, chat_id, message_id, "
        "file_unique_id, 'orphaned', CURRENT_TIMESTAMP, 0, CURRENT_TIMESTAMP "
        "FROM chunk_copies AS c WHERE c.id NOT IN (SELECT "
        "(SELECT k.id FROM chunk_copies AS k WHERE k.chunk_id = c.chunk_id "
        "ORDER BY (k.state = 'ok') DESC, k.id LIMIT 1))"
    )
    with op.batch_alter_table("chunks") as batch:
        for column in LOCATION:
            batch.alter_column(column, nullable=False)
        batch.drop_constraint(op.f("ck_chunks_copies_ok"), type_="check")
        batch.drop_column("lost_at")
        batch.drop_column("copies_ok")
        batch.drop_column("block_hashes")
    op.drop_index(op.f("ix_chunk_copies_checked_at"), "chunk_copies")
    op.drop_index(op.f("ix_chunk_copies_chat_id_message_id"), "chunk_copies")
    op.drop_index(op.f("ix_chunk_copies_chunk_id"), "chunk_copies")
    op.drop_table("chunk_copies")
