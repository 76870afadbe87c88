"""copy_failures: reads and checks Telegram could not serve, per copy.

Revision ID: 0027
Revises: 0025
Create Date: 2026-12-07

getFile's "wrong file_id or the file is temporarily unavailable" is what the
Bot API server says of any server-side download that failed, its data
centre's 5xx and 429 included (telegram-bot-api Client.cpp, on_update_file):
a copy is taken for missing only once such failures spread over time
(app/store/copy_failures.py). The count lives here so that restarts and
every instance agree. Additive; the rows go with their copy (ON DELETE
CASCADE). Types are spelled out rather than imported from app.db: a
migration must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "copy_failures",
        sa.Column("copy_id", sa.BigInteger(), nullable=False),
        sa.Column("first_at", TIMESTAMP, nullable=False),
        sa.Column("last_at", TIMESTAMP, nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["copy_id"],
            ["chunk_copies.id"],
            name=op.f("fk_copy_failures_copy_id_chunk_copies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("copy_id", name=op.f("pk_copy_failures")),
    )


def downgrade() -> None:
    op.drop_table("copy_failures")
