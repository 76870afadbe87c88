"""Absent tags and part lists are SQL NULL, not JSON null.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

Until now an object or multipart upload without tags, and an object without
a part list, stored the JSON value null (SQLAlchemy's JSON type writes None
that way unless told otherwise). The application read both as None; a query
filtering on IS NULL would have missed them. The models now write SQL NULL;
this turns the JSON nulls already stored into SQL NULL. No column changes.
During a rolling deploy, instances still on the older code go on writing
JSON null until they restart; every version reads both as None.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (("objects", "tags"), ("objects", "parts"), ("multipart_uploads", "tags"))


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, column in COLUMNS:
        # JSONB on Postgres, JSON text on SQLite.
        is_json_null = f"jsonb_typeof({column}) = 'null'" if postgres else f"{column} = 'null'"
        op.execute(f"UPDATE {table} SET {column} = NULL WHERE {is_json_null}")


def downgrade() -> None:
    # Earlier code reads SQL NULL as None too: nothing to undo.
    pass
