"""chat_watermarks.deleted_above: how many of the service's own messages
above the watermark it has deleted, so that `teleuploader check` can tell the
ids it used from posts it did not make once their rows are gone.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chat_watermarks") as batch:
        batch.add_column(
            sa.Column("deleted_above", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("chat_watermarks") as batch:
        batch.drop_column("deleted_above")
