"""S3 flexible checksums and part boundaries of multipart objects.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

objects: the checksum a client sent or asked for (`checksum_algorithm`, its
value, `checksum_type` COMPOSITE or FULL_OBJECT) and, for an object made by
CompleteMultipartUpload, its parts (size and checksum of each, in order), for
GetObject/HeadObject with partNumber and GetObjectAttributes.
multipart_uploads: the algorithm and type asked for at creation.
upload_parts: each part's checksum.

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("objects", sa.Column("checksum_algorithm", sa.String(16), nullable=True))
    op.add_column("objects", sa.Column("checksum", sa.String(80), nullable=True))
    op.add_column("objects", sa.Column("checksum_type", sa.String(16), nullable=True))
    op.add_column("objects", sa.Column("parts", JSON, nullable=True))
    op.add_column(
        "multipart_uploads", sa.Column("checksum_algorithm", sa.String(16), nullable=True)
    )
    op.add_column("multipart_uploads", sa.Column("checksum_type", sa.String(16), nullable=True))
    op.add_column("upload_parts", sa.Column("checksum", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("upload_parts") as batch:
        batch.drop_column("checksum")
    with op.batch_alter_table("multipart_uploads") as batch:
        batch.drop_column("checksum_type")
        batch.drop_column("checksum_algorithm")
    with op.batch_alter_table("objects") as batch:
        batch.drop_column("parts")
        batch.drop_column("checksum_type")
        batch.drop_column("checksum")
        batch.drop_column("checksum_algorithm")
