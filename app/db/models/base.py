"""The declarative base every model shares, and the table options they reuse."""

from __future__ import annotations

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

# Without AUTOINCREMENT, SQLite hands the id of a deleted last row to the next
# insert. An id must name one thing forever: a reader holding the id of a
# replaced object must find nothing, not the pieces of its successor.
# (Postgres sequences never go back.)
NEVER_REUSE_IDS = {"sqlite_autoincrement": True}


def in_list(column: str, values: tuple[str, ...]) -> str:
    """A CHECK constraint's text: `column` holds one of `values`."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    # Named constraints: Alembic (and SQLite's batch mode) can only alter or
    # drop a constraint it can name.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
