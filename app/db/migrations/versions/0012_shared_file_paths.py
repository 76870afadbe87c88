"""shared_file_paths: file_paths one instance got for another (several instances).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "shared_file_paths",
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("file_id", sa.String(255), nullable=False),
        sa.Column("requested_at", TIMESTAMP, nullable=False),
        sa.Column("file_path", sa.String(255), nullable=True),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("bot_id", "file_id", name=op.f("pk_shared_file_paths")),
    )


def downgrade() -> None:
    op.drop_table("shared_file_paths")
