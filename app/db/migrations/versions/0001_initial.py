"""Initial schema: chunks, objects, pieces, api_keys, gc_ledger.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)
JSON_DICT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def key_string(length: int) -> sa.types.TypeEngine[str]:
    # Byte-order ("C") comparison on Postgres, as S3 lists keys; SQLite's
    # default BINARY collation already is.
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "chunks",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("file_id", sa.Text(), nullable=False),
        sa.Column("file_unique_id", sa.Text(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
        sa.CheckConstraint("state IN ('pending', 'live')", name=op.f("ck_chunks_state")),
        sa.CheckConstraint("size >= 0", name=op.f("ck_chunks_size")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_chunks_state_created_at"), "chunks", ["state", "created_at"])

    op.create_table(
        "objects",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("key", key_string(1024), nullable=False),
        sa.Column("public_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("etag", sa.String(80), nullable=False),
        sa.Column("md5", sa.String(32), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=True),
        sa.Column("user_metadata", JSON_DICT, nullable=False),
        sa.Column("inline_data", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_objects")),
        sa.UniqueConstraint("bucket", "key", name=op.f("uq_objects_bucket_key")),
        sa.UniqueConstraint("public_id", name=op.f("uq_objects_public_id")),
        sa.CheckConstraint("size >= 0", name=op.f("ck_objects_size")),
        sqlite_autoincrement=True,
    )

    op.create_table(
        "pieces",
        sa.Column("object_id", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("object_id", "seq", name=op.f("pk_pieces")),
        sa.ForeignKeyConstraint(
            ["object_id"],
            ["objects.id"],
            name=op.f("fk_pieces_object_id_objects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["chunk_id"], ["chunks.id"], name=op.f("fk_pieces_chunk_id_chunks")
        ),
        sa.UniqueConstraint("object_id", "start", name=op.f("uq_pieces_object_id_start")),
        sa.CheckConstraint("length > 0", name=op.f("ck_pieces_length")),
        sa.CheckConstraint('start >= 0 AND "offset" >= 0', name=op.f("ck_pieces_offsets")),
    )
    op.create_index(op.f("ix_pieces_chunk_id"), "pieces", ["chunk_id"])

    op.create_table(
        "api_keys",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("name", name=op.f("uq_api_keys_name")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
        sqlite_autoincrement=True,
    )

    op.create_table(
        "gc_ledger",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("file_unique_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("enqueued_at", TIMESTAMP, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TIMESTAMP, nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gc_ledger")),
        sa.CheckConstraint(
            "reason IN ('failed_upload', 'aborted', 'overwritten', 'deleted', 'orphaned')",
            name=op.f("ck_gc_ledger_reason"),
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_gc_ledger_next_attempt_at"), "gc_ledger", ["next_attempt_at"])


def downgrade() -> None:
    op.drop_table("gc_ledger")
    op.drop_table("api_keys")
    op.drop_table("pieces")
    op.drop_table("objects")
    op.drop_table("chunks")
