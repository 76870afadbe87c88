"""Encryption at rest: a chunk's wrapped data key, a copy's salt.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

A sealed chunk (docs/encryption.md) records the id of the master key that
wrapped its data key (`chunks.seal_key_id`) and the wrapped key
(`chunks.sealed_data_key`); each of its copies records the salt its copy key
was derived with (`chunk_copies.seal_salt`). NULL everywhere means
plaintext: every chunk stored before stays as it is, and readable.

Additive: the previous release ignores the new columns (but cannot read the
chunks sealed meanwhile).

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("seal_key_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("sealed_data_key", sa.LargeBinary(), nullable=True))
    op.create_index(op.f("ix_chunks_seal_key_id"), "chunks", ["seal_key_id"])
    with op.batch_alter_table("chunk_copies") as batch:
        batch.add_column(sa.Column("seal_salt", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chunk_copies") as batch:
        batch.drop_column("seal_salt")
    op.drop_index(op.f("ix_chunks_seal_key_id"), "chunks")
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("sealed_data_key")
        batch.drop_column("seal_key_id")
