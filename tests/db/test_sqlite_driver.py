"""The SQLite engine's driver adapter (app/db/sqlite_driver.py): a task
cancelled in the middle of a transaction that wrote never leaves the
database's write lock behind, and a statement is one hop to SQLite's thread."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine, create_sessionmaker
from app.db.session import session_scope
from tests.running_service import eventually


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'cancel.db'}")
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)"))
        await connection.execute(text("INSERT INTO counter VALUES (1, 0)"))
    yield engine
    await engine.dispose()


async def test_a_transaction_cancelled_anywhere_leaves_the_database_writable(
    engine: AsyncEngine,
) -> None:
    """Before the adapter, a cancellation between a SELECT and the fetch of
    its rows left the closed connection's transaction, and its write lock,
    alive: the next writer failed with "database is locked" (within the
    first few dozen rounds here)."""
    sessionmaker = create_sessionmaker(engine)
    rng = random.Random(7)

    async def write_then_read_forever() -> None:
        while True:
            async with session_scope(sessionmaker) as session:
                await session.execute(text("UPDATE counter SET n = n + 1"))
                await session.execute(text("SELECT * FROM counter"))
                await session.execute(text("SELECT count(*) FROM counter"))

    for _ in range(200):
        task = asyncio.create_task(write_then_read_forever())
        await asyncio.sleep(rng.uniform(0, 0.005))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        async with session_scope(sessionmaker) as session:
            await session.execute(text("PRAGMA busy_timeout=500"))  # not the app's 5 s
            await session.execute(text("UPDATE counter SET n = 0"))

    async with session_scope(sessionmaker) as session:
        assert await session.scalar(text("SELECT n FROM counter")) == 0
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_cancelled_read_still_raises_its_cancellation(engine: AsyncEngine) -> None:
    """The statement finishes, but the task that was cancelled sees the
    cancellation, not the statement's result."""
    sessionmaker = create_sessionmaker(engine)
    # SQLite's progress handler, on its thread: the statement is running, and
    # it waits there until the test has cancelled the task.
    running, cancelled = threading.Event(), threading.Event()

    def progress() -> int:
        running.set()
        cancelled.wait(10)
        return 0  # go on

    async def slow_read() -> None:
        async with session_scope(sessionmaker) as session:
            raw = await (await session.connection()).get_raw_connection()
            await raw.driver_connection.set_progress_handler(progress, 100_000)  # type: ignore[union-attr]
            # A statement that keeps SQLite's thread busy for a while.
            await session.execute(
                text(
                    "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r"
                    " WHERE i < 300000) SELECT count(*) FROM r"
                )
            )
        raise AssertionError("the read went on after its cancellation")

    task = asyncio.create_task(slow_read())
    await eventually(running.is_set)
    task.cancel()  # while SQLite runs the statement
    cancelled.set()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_statement_and_its_rows_are_one_hop_to_sqlites_thread(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLAlchemy's adapter sent the fetch as a second hop to aiosqlite's
    thread; here it goes with the statement, and the rows are the same."""
    hops = 0
    execute = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await execute(self, fn, *args, **kwargs)

    async with engine.connect() as connection:
        await connection.execute(text("INSERT INTO counter VALUES (2, 5), (3, 7)"))
        monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
        rows = (await connection.execute(text("SELECT id, n FROM counter ORDER BY id"))).all()
        monkeypatch.undo()
        await connection.rollback()
    assert [tuple(row) for row in rows] == [(1, 0), (2, 5), (3, 7)]
    # Opening the cursor, the statement with its rows, closing the cursor
    # (SQLAlchemy's own adapter: 4, the rows in a hop of their own).
    assert hops == 3
