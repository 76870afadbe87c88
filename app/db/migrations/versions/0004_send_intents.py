"""Send intents and per-chat high-water marks, for reconciling orphaned messages.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

A send intent is written before every sendDocument and deleted once the
message id is in a chunk row (or the send has failed). A chat's watermark is
the highest message id known reconciled: every id up to it is held by a row,
deleted, or waiting in the GC ledger. `unclean_since` is set when an instance
died with sends possibly in flight, until a reconciliation covers it.

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
BIG_INT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "send_intents",
        sa.Column("id", BIG_INT_PK, autoincrement=True, nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_send_intents")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_send_intents_owner"), "send_intents", ["owner"])
    op.create_table(
        "chat_watermarks",
        sa.Column("chat_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("unclean_since", TIMESTAMP, nullable=True),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("chat_id", name=op.f("pk_chat_watermarks")),
    )


def downgrade() -> None:
    op.drop_table("chat_watermarks")
    op.drop_index(op.f("ix_send_intents_owner"), table_name="send_intents")
    op.drop_table("send_intents")
