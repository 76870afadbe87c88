"""API key scopes (read, write, admin) and the key that uploaded each object.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

Every existing key becomes `admin`: before scopes, any key could do
everything, so nothing that worked stops working. Existing objects get no
owner; only admin keys may delete or replace them.

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable first, filled, then NOT NULL: no server default stays behind,
    # so a key inserted without a scope fails instead of becoming admin.
    op.add_column("api_keys", sa.Column("scope", sa.String(16), nullable=True))
    op.execute("UPDATE api_keys SET scope = 'admin'")
    with op.batch_alter_table("api_keys") as batch:
        batch.alter_column("scope", existing_type=sa.String(16), nullable=False)
        batch.create_check_constraint(
            op.f("ck_api_keys_scope"), "scope IN ('read', 'write', 'admin')"
        )
    # A plain ADD COLUMN on both backends: SQLite does not rebuild the table.
    op.add_column("objects", sa.Column("owner_key_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("objects") as batch:
        batch.drop_column("owner_key_id")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_constraint(op.f("ck_api_keys_scope"), type_="check")
        batch.drop_column("scope")
