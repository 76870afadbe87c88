"""The journal: every committed change to the tables a restore loads, between
snapshots (JOURNAL_SECONDS).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06

A table `journal` (which row of which table changed) filled by triggers on
INSERT, UPDATE and DELETE of every table a snapshot carries for a restore:
every instance's writes land in it, and no code path can forget to. The
shipper (app/store/journal.py) reads it, ships the rows' current state to
the storage chats and deletes what it shipped. A trigger row holds the
table's name and its primary key as a JSON array: nothing else, so that a
write costs one small insert more.

`snapshot_messages.detail`: what a restore needs to find a journal batch
again (its file id, sha256, sequence number), as JSON text.

SQLite and Postgres spell triggers differently (SQLite: one trigger per
event with the statement inline; Postgres: a function per table), hence the
branch on the dialect. Additive: the previous release ignores the table,
which then only grows until it is downgraded (downgrade drops the triggers
first, then the table).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)

# Table -> its primary key columns, as of this revision (spelled out: a
# migration keeps meaning what it meant when it was written).
JOURNALED: dict[str, tuple[str, ...]] = {
    "buckets": ("name",),
    "api_keys": ("id",),
    "chunks": ("id",),
    "chunk_copies": ("id",),
    "objects": ("id",),
    "pieces": ("object_id", "seq"),
    "trash": ("id",),
}


# Updates that only keep books are not journaled (a restore does without
# them, and the scrub checks copies around the clock: journaling each check
# would ship a batch every round on an idle service). An UPDATE trigger
# then names the columns that are journaled: a later migration adding a
# column to these tables re-creates their triggers.
BOOKKEEPING: dict[str, tuple[str, ...]] = {
    "chunk_copies": ("checked_at", "verified_at"),
    "api_keys": ("last_used_at",),
}
COLUMNS: dict[str, tuple[str, ...]] = {
    "chunk_copies": (
        "id",
        "chunk_id",
        "bot_id",
        "file_id",
        "file_unique_id",
        "chat_id",
        "message_id",
        "state",
        "created_at",
        "checked_at",
        "verified_at",
        "seal_salt",
    ),
    "api_keys": (
        "id",
        "name",
        "prefix",
        "key_hash",
        "scope",
        "created_at",
        "revoked_at",
        "last_used_at",
    ),
}


def _update_event(table: str) -> str:
    """`UPDATE`, or `UPDATE OF` the columns that are journaled."""
    skipped = BOOKKEEPING.get(table)
    if not skipped:
        return "UPDATE"
    kept = [c for c in COLUMNS[table] if c not in skipped]
    return f"UPDATE OF {', '.join(_quoted(c) for c in kept)}"


def upgrade() -> None:
    op.create_table(
        "journal",
        # No AUTOINCREMENT on SQLite: the shipper deletes the ids it read, so
        # a reused id names a new change, never a shipped one.
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("table_name", sa.String(32), nullable=False),
        sa.Column("row_key", sa.Text(), nullable=False),
        sa.Column(
            "created_at", TIMESTAMP, nullable=False, server_default=sa.text("CURRENT_TIMESTAMP")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_journal")),
    )
    op.add_column("snapshot_messages", sa.Column("detail", sa.Text(), nullable=True))
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, key in JOURNALED.items():
        for statement in (
            _postgres_triggers(table, key) if postgres else _sqlite_triggers(table, key)
        ):
            op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in JOURNALED:
        if postgres:
            op.execute(f"DROP TRIGGER IF EXISTS journal_{table} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS journal_{table}()")
        else:
            for event in ("insert", "update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS journal_{table}_{event}")
    with op.batch_alter_table("snapshot_messages") as batch:
        batch.drop_column("detail")
    op.drop_table("journal")


def _columns(row: str, key: tuple[str, ...], array: str) -> str:
    return f"{array}({', '.join(f'{row}.{_quoted(c)}' for c in key)})"


def _quoted(column: str) -> str:
    return f'"{column}"'


def _sqlite_triggers(table: str, key: tuple[str, ...]) -> list[str]:
    insert = "INSERT INTO journal (table_name, row_key) VALUES ('{table}', {value})"
    new = insert.format(table=table, value=_columns("NEW", key, "json_array"))
    old = insert.format(table=table, value=_columns("OLD", key, "json_array"))
    changed = " OR ".join(f"OLD.{_quoted(c)} IS NOT NEW.{_quoted(c)}" for c in key)
    return [
        f"CREATE TRIGGER journal_{table}_insert AFTER INSERT ON {table} BEGIN {new}; END",
        f"CREATE TRIGGER journal_{table}_delete AFTER DELETE ON {table} BEGIN {old}; END",
        # A key that changed leaves its old row behind in a restore: both go.
        f"CREATE TRIGGER journal_{table}_update AFTER {_update_event(table)} ON {table} "
        f"BEGIN {new}; "
        f"INSERT INTO journal (table_name, row_key) SELECT '{table}', "
        f"{_columns('OLD', key, 'json_array')} WHERE {changed}; END",
    ]


def _postgres_triggers(table: str, key: tuple[str, ...]) -> list[str]:
    new = _columns("NEW", key, "json_build_array")
    old = _columns("OLD", key, "json_build_array")
    changed = " OR ".join(f"OLD.{_quoted(c)} IS DISTINCT FROM NEW.{_quoted(c)}" for c in key)
    insert = "INSERT INTO journal (table_name, row_key) VALUES"
    return [
        f"""CREATE FUNCTION journal_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        {insert} ('{table}', {old}::text);
        RETURN NULL;
    END IF;
    {insert} ('{table}', {new}::text);
    IF TG_OP = 'UPDATE' THEN
        IF {changed} THEN
            {insert} ('{table}', {old}::text);
        END IF;
    END IF;
    RETURN NULL;
END
$$""",
        f"CREATE TRIGGER journal_{table} AFTER INSERT OR {_update_event(table)} OR DELETE "
        f"ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION journal_{table}()",
    ]
