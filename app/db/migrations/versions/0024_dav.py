"""WebDAV: folders, dead properties and locks.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07

`folders` keeps a folder that no object's key lies under (MKCOL, or the
folder a file left); `dav_properties` the properties clients set with
PROPPATCH, per resource key; `dav_locks` the WebDAV locks, shared by every
instance. Additive: the previous release ignores the three tables, and a
downgrade drops them (empty folders, dead properties and locks go; the
files stay).

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def key_string(length: int) -> sa.types.TypeEngine[str]:
    # Keys compare byte by byte ("C") on Postgres, as objects.key.
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "folders",
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("key", key_string(1024), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("bucket", "key", name=op.f("pk_folders")),
    )
    op.create_table(
        "dav_properties",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("key", key_string(1024), nullable=False),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dav_properties")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_dav_properties_bucket_key"), "dav_properties", ["bucket", "key"], unique=False
    )
    op.create_table(
        "dav_locks",
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("key", key_string(1024), nullable=False),
        sa.Column("infinite", sa.Boolean(), nullable=False),
        sa.Column("exclusive", sa.Boolean(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("api_key_id", sa.BigInteger(), nullable=False),
        sa.Column("timeout_seconds", sa.Integer(), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("token", name=op.f("pk_dav_locks")),
    )
    op.create_index(op.f("ix_dav_locks_bucket_key"), "dav_locks", ["bucket", "key"], unique=False)
    op.create_index(op.f("ix_dav_locks_expires_at"), "dav_locks", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_dav_locks_expires_at"), table_name="dav_locks")
    op.drop_index(op.f("ix_dav_locks_bucket_key"), table_name="dav_locks")
    op.drop_table("dav_locks")
    op.drop_index(op.f("ix_dav_properties_bucket_key"), table_name="dav_properties")
    op.drop_table("dav_properties")
    op.drop_table("folders")
