"""SQLAlchemy's aiosqlite adapter, made safe to cancel.

The adapter runs a statement in two hops to aiosqlite's thread: execute,
then fetch the rows. A task cancelled between the two (a request cut off by
the shutdown grace, a lease round stopped, a timeout) left the statement
active; SQLAlchemy then closes the connection, which SQLite can only do once
every statement is finished, so the connection lingered with its
transaction open, and a transaction that had written kept the database's
one write lock: every other writer of the process failed with "database is
locked" until the garbage collector happened to free it (seen in CI, and
after one in a few dozen cancellations in a loop).

Here a statement, with its rows, always runs to its end before the
cancellation goes on. A statement takes milliseconds, so the cancelled task
waits that long at most; the connection is then closed or rolled back with
nothing left running, and the lock is released with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

T = TypeVar("T")


async def _to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """Await `work`; if the caller is cancelled meanwhile, let `work` finish
    first, then raise the cancellation."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller sees
        raise


class _Cursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        return await _to_the_end(super()._execute_async(operation, parameters))

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        return await _to_the_end(super()._executemany_async(operation, seq_of_parameters))


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ()

    _cursor_cls = _Cursor


class CancelSafeAiosqlite(AsyncAdapt_aiosqlite_dbapi):
    """The DB-API module for `create_async_engine(..., module=...)`."""

    def __init__(self) -> None:
        import sqlite3

        super().__init__(aiosqlite, sqlite3)

    def connect(self, *arg: Any, **kw: Any) -> _Connection:
        connection = aiosqlite.connect(*arg, **kw)
        # As SQLAlchemy's own adapter does: the thread must not keep the
        # process alive at exit.
        connection._thread.daemon = True
        # aiosqlite's types do not spell SQLAlchemy's protocol for it; its
        # own adapter passes the same object.
        return _Connection(self, await_(connection))  # type: ignore[arg-type]
