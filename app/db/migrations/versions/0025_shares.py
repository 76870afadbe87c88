"""Share links (issue 52): `shares`, their download sessions and wrong passwords.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07

`shares` is journaled like every table a restore loads (the triggers of
0019, spelt out again here for this table): a restore keeps the links that
were handed out, their limits and their counts. `share_sessions` and
`share_failures` are the live state of downloads and password attempts,
kept in the database so that every instance sees them, and left out of
snapshots and the journal (a restored service starts them afresh).
Additive: the previous release ignores the tables; downgrade drops them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def key_string(length: int) -> sa.types.TypeEngine[str]:
    # Byte-order ("C") comparison on Postgres, as objects.key.
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "shares",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("owner_key_id", sa.BigInteger(), nullable=False),
        sa.Column("bucket", key_string(255), nullable=False),
        sa.Column("public_id", sa.String(64), nullable=True),
        sa.Column("prefix", key_string(1024), nullable=True),
        sa.Column("disposition", sa.String(16), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
        sa.Column("max_downloads", sa.BigInteger(), nullable=True),
        sa.Column("downloads", sa.BigInteger(), nullable=False),
        sa.Column("last_download_at", TIMESTAMP, nullable=True),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shares")),
        sa.ForeignKeyConstraint(
            ["owner_key_id"],
            ["api_keys.id"],
            name=op.f("fk_shares_owner_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("token", name=op.f("uq_shares_token")),
        sa.CheckConstraint(
            "disposition IN ('attachment', 'inline')", name=op.f("ck_shares_disposition")
        ),
        sa.CheckConstraint(
            "(public_id IS NULL) != (prefix IS NULL)", name=op.f("ck_shares_one_target")
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_shares_owner_key_id"), "shares", ["owner_key_id"])
    op.create_table(
        "share_sessions",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("share_id", sa.BigInteger(), nullable=False),
        sa.Column("opened_at", TIMESTAMP, nullable=True),
        sa.Column("last_at", TIMESTAMP, nullable=False),
        sa.Column("bytes_sent", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_share_sessions")),
        sa.ForeignKeyConstraint(
            ["share_id"],
            ["shares.id"],
            name=op.f("fk_share_sessions_share_id_shares"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("key_hash", name=op.f("uq_share_sessions_key_hash")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_share_sessions_last_at"), "share_sessions", ["last_at"])
    op.create_index(op.f("ix_share_sessions_share_id"), "share_sessions", ["share_id"])
    op.create_table(
        "share_failures",
        sa.Column("id", BIG_PK, primary_key=True, autoincrement=True),
        sa.Column("share_id", sa.BigInteger(), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("failed_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_share_failures")),
        sa.ForeignKeyConstraint(
            ["share_id"],
            ["shares.id"],
            name=op.f("fk_share_failures_share_id_shares"),
            ondelete="CASCADE",
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_share_failures_share_id_failed_at"), "share_failures", ["share_id", "failed_at"]
    )
    op.create_index(
        op.f("ix_share_failures_address_failed_at"), "share_failures", ["address", "failed_at"]
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in _postgres_triggers() if postgres else _sqlite_triggers():
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS journal_shares ON shares")
        op.execute("DROP FUNCTION IF EXISTS journal_shares()")
    else:
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS journal_shares_{event}")
    # Pending journal rows of the table go with it: a restore of the older
    # schema has no table to put them in.
    op.execute("DELETE FROM journal WHERE table_name = 'shares'")
    op.drop_table("share_failures")
    op.drop_table("share_sessions")
    op.drop_table("shares")


# The journal's triggers (0019) for `shares`, keyed by its id.
def _sqlite_triggers() -> list[str]:
    insert = "INSERT INTO journal (table_name, row_key) VALUES ('shares', json_array({row}.id))"
    return [
        "CREATE TRIGGER journal_shares_insert AFTER INSERT ON shares "
        f"BEGIN {insert.format(row='NEW')}; END",
        "CREATE TRIGGER journal_shares_delete AFTER DELETE ON shares "
        f"BEGIN {insert.format(row='OLD')}; END",
        "CREATE TRIGGER journal_shares_update AFTER UPDATE ON shares "
        f"BEGIN {insert.format(row='NEW')}; "
        "INSERT INTO journal (table_name, row_key) SELECT 'shares', json_array(OLD.id) "
        "WHERE OLD.id IS NOT NEW.id; END",
    ]


def _postgres_triggers() -> list[str]:
    insert = "INSERT INTO journal (table_name, row_key) VALUES"
    return [
        f"""CREATE FUNCTION journal_shares() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        {insert} ('shares', json_build_array(OLD.id)::text);
        RETURN NULL;
    END IF;
    {insert} ('shares', json_build_array(NEW.id)::text);
    IF TG_OP = 'UPDATE' AND OLD.id IS DISTINCT FROM NEW.id THEN
        {insert} ('shares', json_build_array(OLD.id)::text);
    END IF;
    RETURN NULL;
END
$$""",
        "CREATE TRIGGER journal_shares AFTER INSERT OR UPDATE OR DELETE ON shares "
        "FOR EACH ROW EXECUTE FUNCTION journal_shares()",
    ]
