"""Which digest a chunk's block hashes are, and which ones each instance reads.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06

New chunks get BLAKE3 block digests instead of SHA-256 ones (a quarter of
the CPU per byte; bench/README.md, ingest_bench.py). `chunks.block_digest`
says which a chunk has: NULL, SHA-256, for every chunk stored so far and for
every row of a snapshot taken so far. `instances.block_digests` lists what
each running instance can check; an instance of the previous release has
no such column, and its row gets the default, "sha256". The writer uses
BLAKE3 only while every live instance lists it, so during a rolling upgrade
no instance meets a chunk it would take for corrupt. Additive. Downgrade
only while no chunk has BLAKE3 digests (the previous release cannot check
them): the downgrade refuses otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN, not a batch: SQLite's batch mode rebuilds the table,
    # and the rebuilt one would lack the journal's triggers (0019).
    op.add_column("chunks", sa.Column("block_digest", sa.String(16), nullable=True))
    op.add_column(
        "instances",
        sa.Column("block_digests", sa.String(64), nullable=False, server_default="sha256"),
    )


def downgrade() -> None:
    newer = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM chunks WHERE block_digest IS NOT NULL")
    )
    if newer:
        raise RuntimeError(
            f"{newer} chunks have block digests the previous release cannot check: "
            "downgrading would make them unreadable"
        )
    # DROP COLUMN in place (SQLite 3.35+), for the same reason as above.
    op.execute("ALTER TABLE instances DROP COLUMN block_digests")
    op.execute("ALTER TABLE chunks DROP COLUMN block_digest")
