"""SQLite writers of one process take turns (app/db/sqlite_write_turns.py):
they queue in the order they asked, however long the queue, instead of
racing in SQLite's busy handler and failing after busy_timeout."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

from app.db.engine import create_engine, create_sessionmaker
from app.db.session import session_scope
from app.db.sqlite_write_turns import WriteTurns, is_write

# SQLite's own wait, shortened for the test: the queue below lasts longer.
BUSY_TIMEOUT_MS = 200


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'turns.db'}")

    @event.listens_for(engine.sync_engine, "connect")
    def _short_wait(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.close()

    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE written (seq INTEGER PRIMARY KEY, n INTEGER)"))
    yield engine
    await engine.dispose()


async def test_writers_queued_past_busy_timeout_all_write(
    engine: AsyncEngine,
) -> None:
    """Twelve transactions each hold the write lock 50 ms: the last waits
    about 0.55 s, past SQLite's 0.2 s here. Without the turns, the writers
    at the back failed with "database is locked" (the CI failure was the
    same with 5 s and a loaded machine)."""
    sessionmaker = create_sessionmaker(engine)

    async def write(n: int) -> None:
        async with session_scope(sessionmaker) as session:
            await session.execute(text("INSERT INTO written (n) VALUES (:n)"), {"n": n})
            await asyncio.sleep(0.05)  # the rest of the transaction's work

    await asyncio.gather(*(write(n) for n in range(12)))

    async with session_scope(sessionmaker) as session:
        written = (await session.scalars(text("SELECT n FROM written"))).all()
    assert sorted(written) == list(range(12))


class Holder:
    """Stands for a driver connection (which can be weakly referenced)."""


async def test_the_turn_goes_to_waiters_in_the_order_they_asked() -> None:
    turns = WriteTurns()
    holders = [Holder() for _ in range(5)]
    got: list[int] = []
    await turns.take(holders[0])

    async def wait_then_write(n: int) -> None:
        await turns.take(holders[n])
        got.append(n)
        await asyncio.sleep(0)
        turns.release(holders[n])

    tasks = []
    for n in (1, 2, 3, 4):
        tasks.append(asyncio.create_task(wait_then_write(n)))
        await asyncio.sleep(0.001)  # each asks after the one before
    turns.release(holders[0])
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=1)
    assert got == [1, 2, 3, 4]


async def test_a_reader_does_not_wait_for_the_writer(engine: AsyncEngine) -> None:
    sessionmaker = create_sessionmaker(engine)
    async with session_scope(sessionmaker) as writer:
        await writer.execute(text("INSERT INTO written (n) VALUES (1)"))
        async with session_scope(sessionmaker) as reader:
            count = await asyncio.wait_for(
                reader.scalar(text("SELECT count(*) FROM written")), timeout=1
            )
        assert count == 0  # WAL: the reader sees the last commit


async def test_a_waiter_fails_as_sqlite_would_once_its_wait_is_over() -> None:
    turns = WriteTurns(wait_seconds=0.1)
    first, second, third = Holder(), Holder(), Holder()
    await turns.take(first)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        await turns.take(second)
    turns.release(first)
    await asyncio.wait_for(turns.take(third), timeout=0.1)
    assert turns.holds(third)


async def test_a_cancelled_waiter_is_skipped() -> None:
    turns = WriteTurns()
    first, cancelled, next_one = Holder(), Holder(), Holder()
    await turns.take(first)
    waiting = asyncio.create_task(turns.take(cancelled))
    queued = asyncio.create_task(turns.take(next_one))
    await asyncio.sleep(0.01)
    waiting.cancel()
    turns.release(first)
    await asyncio.wait_for(queued, timeout=1)
    assert turns.holds(next_one)
    assert waiting.cancelled()


async def test_a_holder_dropped_without_handing_on_frees_the_turn() -> None:
    """A connection the garbage collector takes mid-transaction cannot hand
    the turn on; its waiters notice within the holder check (1 s)."""
    turns = WriteTurns()
    holder, waiter = Holder(), Holder()
    await turns.take(holder)
    waiting = asyncio.create_task(turns.take(waiter))
    await asyncio.sleep(0.01)
    del holder
    gc.collect()
    await asyncio.wait_for(waiting, timeout=2)
    assert turns.holds(waiter)


@pytest.mark.parametrize(
    ("statement", "writes"),
    [
        ("INSERT INTO t VALUES (1)", True),
        ("  update t set n = 1", True),
        ("DELETE FROM t", True),
        ("BEGIN IMMEDIATE", True),
        ("BEGIN", False),
        ("SELECT * FROM t", False),
        ("WITH x AS (SELECT 1) DELETE FROM t WHERE id IN x", True),
        ("WITH x AS (SELECT 1) SELECT * FROM x", False),
        ("PRAGMA busy_timeout=5000", False),
        ("", False),
    ],
)
def test_which_statements_take_the_write_lock(statement: str, writes: bool) -> None:
    assert is_write(statement) is writes
