"""Complete answers at spool durability: objects whose bytes are partly spooled.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06

`multipart_uploads.completed_at` / `completed_object_id`: a completed upload
whose parts are still partly in the spool stays, hidden from the multipart
API, as the source of the object's bytes until the flusher commits its last
part (then the object gets its pieces and the upload goes). Deleting the
object deletes it (ON DELETE CASCADE) unless copies still need it.
`pending_copies`: an upload part copied (metadata only) from such an upload's
bytes, resolved into part pieces when that upload is finalised.
`spooled_parts.md5`: the MD5 of the spooled file as written, which a read
from the spool checks (a copy's ETag is not its MD5).

A trigger journals a pending object (0019's journal) when it settles, that
is when its upload row goes: snapshots and journal batches leave pending
objects out, and settling changes no row of `objects` or `trash` itself, so
without it the object's pieces would ship and the object never would.

Additive: the previous release ignores both columns, but a pending object
would look to it like an object without pieces: downgrade first lets the
flusher finish (the spool empty), then drops the columns.

Types are spelled out here rather than imported from app.db: a migration
must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only INTEGER PRIMARY KEY.
BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)
# Upload ids compare byte by byte ("C") on Postgres, as multipart_uploads.id.
KEY_STRING = sa.String(64).with_variant(sa.String(64, collation="C"), "postgresql")


def upgrade() -> None:
    # Batch: SQLite adds a foreign key only by rebuilding the (small) table.
    with op.batch_alter_table("multipart_uploads") as batch:
        batch.add_column(sa.Column("completed_object_id", sa.BigInteger(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_multipart_uploads_completed_object_id_objects"),
            "objects",
            ["completed_object_id"],
            ["id"],
            ondelete="CASCADE",
        )
        batch.create_index(
            op.f("ix_multipart_uploads_completed_object_id"), ["completed_object_id"]
        )
    op.add_column("multipart_uploads", sa.Column("completed_at", TIMESTAMP, nullable=True))
    op.add_column("spooled_parts", sa.Column("md5", sa.String(32), nullable=True))
    op.create_table(
        "pending_copies",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("source_upload_id", KEY_STRING, nullable=False),
        sa.Column("source_start", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("target_upload_id", KEY_STRING, nullable=False),
        sa.Column("target_part_number", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_copies")),
        sa.ForeignKeyConstraint(
            ["source_upload_id"],
            ["multipart_uploads.id"],
            name=op.f("fk_pending_copies_source_upload_id_multipart_uploads"),
        ),
        sa.ForeignKeyConstraint(
            ["target_upload_id", "target_part_number"],
            ["upload_parts.upload_id", "upload_parts.part_number"],
            name=op.f("fk_pending_copies_target_upload_id_upload_parts"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "target_upload_id",
            "target_part_number",
            name=op.f("uq_pending_copies_target_upload_id_target_part_number"),
        ),
        sa.CheckConstraint("length > 0", name=op.f("ck_pending_copies_length")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_pending_copies_source_upload_id"), "pending_copies", ["source_upload_id"]
    )
    # After the batch above: SQLite's table rebuild would drop the trigger.
    for statement in (
        _POSTGRES_SETTLED if op.get_bind().dialect.name == "postgresql" else _SQLITE_SETTLED
    ):
        op.execute(statement)


# The row keys as 0019's triggers write them: a JSON array of the key.
_SQLITE_SETTLED = [
    "CREATE TRIGGER journal_settled_object AFTER DELETE ON multipart_uploads "
    "WHEN OLD.completed_object_id IS NOT NULL BEGIN "
    "INSERT INTO journal (table_name, row_key) "
    "VALUES ('objects', json_array(OLD.completed_object_id)); "
    "INSERT INTO journal (table_name, row_key) "
    "SELECT 'trash', json_array(id) FROM trash WHERE object_id = OLD.completed_object_id; "
    "END"
]
_POSTGRES_SETTLED = [
    """CREATE FUNCTION journal_settled_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.completed_object_id IS NOT NULL THEN
        INSERT INTO journal (table_name, row_key)
            VALUES ('objects', json_build_array(OLD.completed_object_id)::text);
        INSERT INTO journal (table_name, row_key)
            SELECT 'trash', json_build_array(id)::text FROM trash
            WHERE object_id = OLD.completed_object_id;
    END IF;
    RETURN NULL;
END
$$""",
    "CREATE TRIGGER journal_settled_object AFTER DELETE ON multipart_uploads "
    "FOR EACH ROW EXECUTE FUNCTION journal_settled_object()",
]


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS journal_settled_object ON multipart_uploads")
        op.execute("DROP FUNCTION IF EXISTS journal_settled_object()")
    else:
        op.execute("DROP TRIGGER IF EXISTS journal_settled_object")
    op.drop_index(op.f("ix_pending_copies_source_upload_id"), table_name="pending_copies")
    op.drop_table("pending_copies")
    with op.batch_alter_table("spooled_parts") as batch:
        batch.drop_column("md5")
    with op.batch_alter_table("multipart_uploads") as batch:
        batch.drop_column("completed_at")
        batch.drop_index(op.f("ix_multipart_uploads_completed_object_id"))
        batch.drop_constraint(
            op.f("fk_multipart_uploads_completed_object_id_objects"), type_="foreignkey"
        )
        batch.drop_column("completed_object_id")
