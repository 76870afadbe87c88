"""bot_leases: which instance may use a bot token; instances.backlog.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "bot_leases",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("bot_id", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("cooldown_until", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_bot_leases")),
    )
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("backlog", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("backlog")
    op.drop_table("bot_leases")
