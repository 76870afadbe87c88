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

Each writing statement first takes the process's turn at the database's
write lock (app.db.sqlite_write_turns), and the turn is handed on when its
transaction ends, so writers queue in order instead of racing in SQLite's
busy handler.
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
from sqlalchemy.util.concurrency import await_, in_greenlet

from app.db.sqlite_write_turns import WriteTurns, is_write


class _Cursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        # aiosqlite's cursor over the driver's own (`_cursor` of each), and
        # the connection that queues work on its thread.
        cursor: aiosqlite.Cursor = self._cursor  # type: ignore[assignment]
        raw: sqlite3.Cursor = cursor._cursor
        fetch = not self.server_side

        connection: _Connection = self._adapt_connection  # type: ignore[assignment]
        if is_write(operation):
            await connection.turns.take(connection)

        def execute_and_fetch() -> tuple[list[Any] | None, bool]:
            if parameters is None:
                raw.execute(operation)
            else:
                raw.execute(operation, parameters)
            rows = raw.fetchall() if fetch and raw.description else None
            return rows, raw.connection.in_transaction

        async with connection._execute_mutex:
            rows, in_transaction = await cursor._conn._execute(execute_and_fetch)  # type: ignore[no-untyped-call]
            if rows is not None:
                self._rows = collections.deque(rows)
        if not in_transaction:
            # A write outside a transaction is over once it ran.
            connection.turns.release(connection)
        return cursor

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        connection: _Connection = self._adapt_connection  # type: ignore[assignment]
        await connection.turns.take(connection)
        return await super()._executemany_async(operation, seq_of_parameters)


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ("__weakref__", "turns")

    _cursor_cls = _Cursor
    turns: WriteTurns

    # The turn is handed on once the transaction has ended, whichever way.
    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.turns.release(self)

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.turns.release(self)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.turns.release(self)

    def terminate(self) -> None:
        try:
            super().terminate()
        finally:
            # Outside a greenlet this is the garbage collector, maybe on
            # another thread: the turns' weak reference frees the turn then.
            if in_greenlet():
                self.turns.release(self)


class OneHopAiosqlite(AsyncAdapt_aiosqlite_dbapi):
    """The DB-API module for `create_async_engine(..., module=...)`."""

    def __init__(self) -> None:
        super().__init__(aiosqlite, sqlite3)
        # One engine, one database file: its connections take turns.
        self.turns = WriteTurns()

    def connect(self, *arg: Any, **kw: Any) -> _Connection:
        connection = aiosqlite.connect(*arg, **kw)
        # As SQLAlchemy's own adapter does: the thread must not keep the
        # process alive at exit.
        connection._thread.daemon = True
        # aiosqlite's types do not spell SQLAlchemy's protocol for it; its
        # own adapter passes the same object.
        adapted = _Connection(self, await_(connection))  # type: ignore[arg-type]
        adapted.turns = self.turns
        return adapted
