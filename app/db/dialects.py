"""Each backend's own INSERT (its ON CONFLICT clauses), with the dialect's
module imported on first use.

A server on SQLite then never loads SQLAlchemy's Postgres dialect: about
5 MiB of an idle server's memory (bench/README.md, `idle_rss_bench.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

    UpsertInsert = postgresql.Insert | sqlite.Insert

T = TypeVar("T")


def upsert_insert(dialect_name: str, table: Any) -> UpsertInsert:
    """`INSERT INTO table` in the dialect's own form, which has
    `on_conflict_do_nothing` / `on_conflict_do_update` and `excluded`."""
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


class PerDialect(Generic[T]):
    """A statement built for a dialect the first time it is asked for, then
    kept: built per call it cost more CPU than running it."""

    def __init__(self, build: Callable[[str], T]) -> None:
        self._build = build
        self._built: dict[str, T] = {}

    def __getitem__(self, dialect_name: str) -> T:
        built = self._built.get(dialect_name)
        if built is None:
            built = self._built[dialect_name] = self._build(dialect_name)
        return built
