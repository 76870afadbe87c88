"""A key's `prefix` keeps no character of its secret.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

`prefix` held a key's first 8 characters: `tu_` and 5 characters of the
random secret, stored in the clear beside the hash. New keys store `tu_`
only; this cuts the stored prefixes to it (and empties any of another form).
No column changes. The secret characters cannot be restored: downgrading
leaves the prefixes as they are, which earlier code shows in `keys list` and
otherwise ignores.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "UPDATE api_keys SET prefix = CASE WHEN substr(prefix, 1, 3) = 'tu_' THEN 'tu_' ELSE '' END"
    )


def downgrade() -> None:
    pass
