"""The staging spool: instances (with heartbeats), spooled_parts, chunks.owner.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
BIG_INT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def key_string(length: int) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("heartbeat_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
    )
    op.create_table(
        "spooled_parts",
        sa.Column("id", BIG_INT_PK, autoincrement=True, nullable=False),
        sa.Column("upload_id", key_string(64), nullable=False),
        sa.Column("part_number", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_spooled_parts")),
        sa.ForeignKeyConstraint(
            ["upload_id", "part_number"],
            ["upload_parts.upload_id", "upload_parts.part_number"],
            name=op.f("fk_spooled_parts_upload_id_upload_parts"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "upload_id", "part_number", name=op.f("uq_spooled_parts_upload_id_part_number")
        ),
        sa.CheckConstraint("size > 0", name=op.f("ck_spooled_parts_size")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_spooled_parts_owner"), "spooled_parts", ["owner"])
    op.add_column("chunks", sa.Column("owner", sa.String(32), nullable=True))


def downgrade() -> None:
    # A spooled part has no bytes in Telegram: without its row the part would
    # be an empty shell. Dropping the parts with it makes the client upload
    # them again (Complete answers InvalidPart), which loses nothing stored.
    op.execute(
        "DELETE FROM upload_parts WHERE (upload_id, part_number) IN "
        "(SELECT upload_id, part_number FROM spooled_parts)"
    )
    op.drop_table("spooled_parts")
    op.drop_table("instances")
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("owner")
