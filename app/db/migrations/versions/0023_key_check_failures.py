"""key_check_failures: failed key checks counted per client, shared by every
instance (app/store/key_failures.py, docs/security.md).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

A row per client and credential (a hash of its start; "" for any), and the
count of its failures since the first in the current window. Only failures
write here. Additive: the previous release neither reads nor writes it, and
the rows live a minute each.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "key_check_failures",
        sa.Column("client", sa.String(64), nullable=False),
        sa.Column("credential", sa.String(64), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("client", "credential", name=op.f("pk_key_check_failures")),
    )
    op.create_index(op.f("ix_key_check_failures_started_at"), "key_check_failures", ["started_at"])


def downgrade() -> None:
    op.drop_table("key_check_failures")
