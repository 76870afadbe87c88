"""SQLAlchemy's aiosqlite adapter, one hop per statement and safe to cancel.

The adapter ran a statement in two hops to aiosqlite's thread: execute, then
fetch the rows. A task cancelled between the two (a request cut off by the
shutdown grace, a lease round stopped, a timeout) left the statement active;
SQLAlchemy then closes the connection, which SQLite can only do once every
statement is finished, so the connection lingered with its transaction open,
and a transaction that had written kept the database's one write lock: every
other writer of the process failed with "database is locked" until the
garbage collector happened to free it (seen in CI, and after one in a few
dozen cancellations in a loop).

Here the statement and the fetch of its rows are one function run in the
thread. A cancelled task stops waiting for it, but the thread runs it to its
end before anything queued after it (SQLAlchemy's rollback or close), so the
connection is never closed with a statement half done. One hop instead of two
also halves the thread round trips of every SELECT and RETURNING statement.
"""

from __future__ import annotations

import collections
import sqlite3
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_


class _Cursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        # aiosqlite's cursor over the driver's own (`_cursor` of each), and
        # the connection that queues work on its thread.
        cursor: aiosqlite.Cursor = self._cursor  # type: ignore[assignment]
        raw: sqlite3.Cursor = cursor._cursor
        fetch = not self.server_side

        def execute_and_fetch() -> list[Any] | None:
            if parameters is None:
                raw.execute(operation)
            else:
                raw.execute(operation, parameters)
            return raw.fetchall() if fetch and raw.description else None

        async with self._adapt_connection._execute_mutex:
            rows = await cursor._conn._execute(execute_and_fetch)  # type: ignore[no-untyped-call]
            if rows is not None:
                self._rows = collections.deque(rows)
            return cursor


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ()

    _cursor_cls = _Cursor


class OneHopAiosqlite(AsyncAdapt_aiosqlite_dbapi):
    """The DB-API module for `create_async_engine(..., module=...)`."""

    def __init__(self) -> None:
        super().__init__(aiosqlite, sqlite3)

    def connect(self, *arg: Any, **kw: Any) -> _Connection:
        connection = aiosqlite.connect(*arg, **kw)
        # As SQLAlchemy's own adapter does: the thread must not keep the
        # process alive at exit.
        connection._thread.daemon = True
        # aiosqlite's types do not spell SQLAlchemy's protocol for it; its
        # own adapter passes the same object.
        return _Connection(self, await_(connection))  # type: ignore[arg-type]
