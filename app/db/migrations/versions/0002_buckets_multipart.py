"""S3 buckets and multipart uploads: buckets, multipart_uploads, upload_parts, part_pieces.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
JSON_DICT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def key_string(length: int) -> sa.types.TypeEngine[str]:
    # Byte-order ("C") comparison on Postgres, as S3 lists; SQLite's default
    # BINARY collation already is.
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "buckets",
        sa.Column("name", key_string(63), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_buckets")),
    )

    op.create_table(
        "multipart_uploads",
        sa.Column("id", key_string(64), nullable=False),
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("key", key_string(1024), nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("user_metadata", JSON_DICT, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_multipart_uploads")),
    )
    op.create_index(
        op.f("ix_multipart_uploads_bucket_key_id"), "multipart_uploads", ["bucket", "key", "id"]
    )

    op.create_table(
        "upload_parts",
        sa.Column("upload_id", key_string(64), nullable=False),
        sa.Column("part_number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("etag", sa.String(80), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("upload_id", "part_number", name=op.f("pk_upload_parts")),
        sa.ForeignKeyConstraint(
            ["upload_id"],
            ["multipart_uploads.id"],
            name=op.f("fk_upload_parts_upload_id_multipart_uploads"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "part_number BETWEEN 1 AND 10000", name=op.f("ck_upload_parts_part_number")
        ),
        sa.CheckConstraint("size >= 0", name=op.f("ck_upload_parts_size")),
    )

    op.create_table(
        "part_pieces",
        sa.Column("upload_id", key_string(64), nullable=False),
        sa.Column("part_number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("upload_id", "part_number", "seq", name=op.f("pk_part_pieces")),
        sa.ForeignKeyConstraint(
            ["upload_id", "part_number"],
            ["upload_parts.upload_id", "upload_parts.part_number"],
            name=op.f("fk_part_pieces_upload_id_upload_parts"),
            ondelete="CASCADE",
        ),
        # RESTRICT: a chunk row cannot vanish under a part piece.
        sa.ForeignKeyConstraint(
            ["chunk_id"], ["chunks.id"], name=op.f("fk_part_pieces_chunk_id_chunks")
        ),
        sa.CheckConstraint("length > 0", name=op.f("ck_part_pieces_length")),
        sa.CheckConstraint('"offset" >= 0', name=op.f("ck_part_pieces_offset")),
    )
    op.create_index(op.f("ix_part_pieces_chunk_id"), "part_pieces", ["chunk_id"])


def downgrade() -> None:
    # Chunks that only unfinished uploads use would be referenced by nothing
    # once part_pieces is gone, and never deleted from Telegram: move them to
    # the GC ledger first, as ChunkRepository.release would.
    postgres = op.get_context().dialect.name == "postgresql"
    # UtcDateTime's storage: timestamptz on Postgres, naive UTC text on SQLite.
    now = "CURRENT_TIMESTAMP" if postgres else "strftime('%Y-%m-%d %H:%M:%f000', 'now')"
    only_in_parts = (
        "id IN (SELECT chunk_id FROM part_pieces) "
        "AND NOT EXISTS (SELECT 1 FROM pieces WHERE pieces.chunk_id = chunks.id)"
    )
    op.execute(
        "INSERT INTO gc_ledger (bot_id, chat_id, message_id, file_unique_id, reason, "
        "enqueued_at, attempts, next_attempt_at) "
        f"SELECT bot_id, chat_id, message_id, file_unique_id, 'aborted', {now}, 0, {now} "
        f"FROM chunks WHERE {only_in_parts} ORDER BY id"
    )
    if postgres:
        # (Migrations run on SQLite without foreign-key enforcement.)
        op.drop_constraint(
            op.f("fk_part_pieces_chunk_id_chunks"), "part_pieces", type_="foreignkey"
        )
    op.execute(f"DELETE FROM chunks WHERE {only_in_parts}")
    op.drop_table("part_pieces")
    op.drop_table("upload_parts")
    op.drop_table("multipart_uploads")
    op.drop_table("buckets")
