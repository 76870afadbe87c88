"""When each snapshot manifest was pinned.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07

`snapshot_messages.pinned_at`: set on a snapshot's manifests once the pin
stands in every chat. The journal chains its batches onto the newest
*pinned* snapshot only: a snapshot recorded and then cut off before its pin
(a kill at a stop) is one a restore never finds, and batches chained onto
it were shipped where nobody looks.

The manifests recorded before this revision are taken as pinned (taken_at):
a failed snapshot's rows were forgotten, so a manifest still recorded was
pinned, but for a kill in the window this revision closes.

Additive: the previous release neither reads nor writes the column.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    # Plain ADD COLUMN, not a batch: SQLite's batch mode rebuilds the table.
    op.add_column("snapshot_messages", sa.Column("pinned_at", TIMESTAMP, nullable=True))
    op.execute("UPDATE snapshot_messages SET pinned_at = taken_at WHERE kind = 'manifest'")


def downgrade() -> None:
    # DROP COLUMN in place (SQLite 3.35+), as 0028 does.
    op.execute("ALTER TABLE snapshot_messages DROP COLUMN pinned_at")
