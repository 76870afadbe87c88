"""Resumable (tus) uploads: tus_uploads.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def key_string(length: int) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tus_uploads",
        sa.Column("id", key_string(64), nullable=False),
        sa.Column("api_key_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=True),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("parts", sa.Integer(), nullable=False),
        sa.Column("upload_metadata", sa.Text(), nullable=False),
        sa.Column("concat", sa.Text(), nullable=True),
        sa.Column("public_id", sa.String(64), nullable=True),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tus_uploads")),
        sa.CheckConstraint(
            "kind IN ('single', 'partial', 'final')", name=op.f("ck_tus_uploads_kind")
        ),
        sa.CheckConstraint('"offset" >= 0 AND parts >= 0', name=op.f("ck_tus_uploads_offset")),
        sa.CheckConstraint(
            'length IS NULL OR "offset" <= length', name=op.f("ck_tus_uploads_length")
        ),
    )
    op.create_index(op.f("ix_tus_uploads_expires_at"), "tus_uploads", ["expires_at"])


def downgrade() -> None:
    # Unfinished uploads leave their multipart uploads (bucket "_native",
    # keys "tus/...") behind: abort them (or let them finish) before
    # downgrading, or their parts' chunks stay referenced.
    op.drop_index(op.f("ix_tus_uploads_expires_at"), "tus_uploads")
    op.drop_table("tus_uploads")
