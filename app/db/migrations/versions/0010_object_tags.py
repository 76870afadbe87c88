"""objects.tags, multipart_uploads.tags: S3 object tagging.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

A tag set belongs to one version of an object, like its metadata: a put
writes a new row with the tags it was given (none clears them), and an
upload keeps the tags of its CreateMultipartUpload until Complete writes
them on the object. NULL is no tags; the column is only read with its row.

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_DICT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Nullable without a default: adding the column rewrites no row.
    op.add_column("objects", sa.Column("tags", JSON_DICT, nullable=True))
    op.add_column("multipart_uploads", sa.Column("tags", JSON_DICT, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("multipart_uploads") as batch:
        batch.drop_column("tags")
    with op.batch_alter_table("objects") as batch:
        batch.drop_column("tags")
