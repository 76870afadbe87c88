"""Through pgbouncer in transaction pooling mode, as production runs.

The pool behind pgbouncer is smaller than the number of client connections
(scripts/pgbouncer-test.sh sets 5), so consecutive transactions of one client
land on different server connections and one server connection serves many
clients: exactly where asyncpg's default prepared statements break.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from sqlalchemy import literal, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_sessionmaker
from app.db.repositories import ApiKeyRepository, GcRepository, ObjectRepository
from app.db.session import session_scope
from tests.db.helpers import spec

pytestmark = pytest.mark.postgres

CLIENTS = 12
ROUNDS = 25


async def test_many_distinct_statements_from_many_clients(pgbouncer_engine: AsyncEngine) -> None:
    async def client(n: int) -> int:
        total = 0
        for round_ in range(ROUNDS):
            async with pgbouncer_engine.connect() as connection:
                # A different statement text every time (a new prepared statement),
                # and a parameterised one that repeats.
                total += await connection.scalar(text(f"SELECT {n * 1000 + round_} + 0")) or 0
                total += await connection.scalar(select(literal(1) + literal(n))) or 0
                await connection.commit()
        return total

    results = await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    assert results == [
        sum(n * 1000 + r for r in range(ROUNDS)) + ROUNDS * (1 + n) for n in range(CLIENTS)
    ]


async def test_repository_work_from_many_sessions(pgbouncer_engine: AsyncEngine) -> None:
    """ORM statements, savepoints, JSON, bytea and executemany, all interleaved."""
    sessionmaker = create_sessionmaker(pgbouncer_engine)

    async def client(n: int) -> None:
        for round_ in range(5):
            async with session_scope(sessionmaker) as session:
                objects = ObjectRepository(session)
                await objects.put(spec(f"c{n}/{round_}", inline_data=b"x" * n))
                await objects.list("bucket", prefix=f"c{n}/")
                await ApiKeyRepository(session).create(f"key-{n}-{round_}", scope="write")
                await GcRepository(session).backlog()

    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    async with session_scope(sessionmaker) as session:
        listed = await ObjectRepository(session).list("bucket", limit=1000)
        assert len(listed) == CLIENTS * 5
        assert len(await ApiKeyRepository(session).list()) == CLIENTS * 5
        assert await GcRepository(session).backlog() == 0


async def test_the_pgbouncer_under_test_really_pools_transactions(
    pgbouncer_engine: AsyncEngine,
) -> None:
    """Otherwise every other test in this file would pass without proving anything."""
    backend_pid = text("SELECT pg_backend_pid()")
    async with pgbouncer_engine.connect() as first:
        first_pid = await first.scalar(backend_pid)
        await first.commit()
        # `first` stays connected. In session mode it would keep its server
        # connection; in transaction mode that connection is free again, and
        # pgbouncer reuses the most recently freed one.
        async with pgbouncer_engine.connect() as second:
            second_pid = await second.scalar(backend_pid)
    assert second_pid == first_pid, "pgbouncer does not pool by transaction"


_INSTANCE = """
import asyncio, sys
from sqlalchemy import text
from app.db.engine import create_engine

async def main(url: str, instance: int) -> None:
    engine = create_engine(url)
    async def client(n: int) -> None:
        for round_ in range(40):
            expected = instance * 10**6 + n * 1000 + round_
            async with engine.begin() as connection:
                assert await connection.scalar(text(f"SELECT {expected}")) == expected
    try:
        await asyncio.gather(*(client(n) for n in range(8)))
    finally:
        await engine.dispose()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def test_several_app_processes_share_the_server_connections(
    pgbouncer_engine: AsyncEngine,
) -> None:
    """Like several app instances: asyncpg's statement names restart in every process."""
    url = pgbouncer_engine.url.render_as_string(hide_password=False)
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _INSTANCE,
            url,
            str(instance),
            stderr=asyncio.subprocess.PIPE,
        )
        for instance in range(3)
    ]
    for process in processes:
        _, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()[-2000:]
