"""Single statements outside the ORM: reading one object row (GET, HEAD) and
inserting a small object under a new key (PUT)."""

from __future__ import annotations

import asyncio

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.engine import create_engine, create_sessionmaker
from app.db.objects import ObjectRepository, ObjectSpec, new_public_id, row_values
from app.db.session import session_scope
from app.db.single_statements import (
    AsyncStatements,
    SqliteThreadStatements,
    single_statements_for,
)
from app.db.types import utcnow
from tests.conftest import Database

Sessions = async_sessionmaker[AsyncSession]


def spec(key: str, data: bytes) -> ObjectSpec:
    return ObjectSpec(
        bucket="b",
        key=key,
        name=key,
        content_type="text/plain",
        size=len(data),
        etag='"e"',
        user_metadata={"x-amz-meta-a": "1"},
        inline_data=data,
    )


async def put(sessionmaker: Sessions, key: str, data: bytes) -> str:
    async with session_scope(sessionmaker) as session:
        row = await ObjectRepository(session).put(spec(key, data))
        return row.public_id


async def test_reads_what_was_committed_and_nothing_else(
    engine: AsyncEngine, sessionmaker: Sessions, database: Database
) -> None:
    reads = single_statements_for(engine)
    try:
        if database.backend == "sqlite":
            assert isinstance(reads, SqliteThreadStatements)
        assert await reads.object("b", "k") is None
        public_id = await put(sessionmaker, "k", b"one")
        row = await reads.object("b", "k")
        assert row is not None
        assert (row.key, row.inline_data, row.size) == ("k", b"one", 3)
        assert row.user_metadata == {"x-amz-meta-a": "1"}
        assert row.updated_at.tzinfo is not None
        by_id = await reads.object_by_public_id(public_id)
        assert by_id is not None and by_id.id == row.id
        assert await reads.object_by_public_id("nope") is None

        # A write that has not committed yet is not seen; once committed, it is.
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("k", b"two"))
            seen = await reads.object("b", "k")
            assert seen is not None and seen.inline_data == b"one"
        seen = await reads.object("b", "k")
        assert seen is not None and seen.inline_data == b"two"
    finally:
        await reads.close()


async def test_sqlite_reads_refuse_to_write(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("reads") / "r.db"
    engine = create_engine(f"sqlite:///{path}")
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE t (x)"))
    reads = SqliteThreadStatements(str(path))
    try:
        with reads._reads.connect() as connection, pytest.raises(Exception, match="readonly"):
            connection.exec_driver_sql("INSERT INTO t VALUES (1)")
    finally:
        await reads.close()
        await engine.dispose()


@pytest.mark.postgres
async def test_postgres_read_survives_a_dead_pooled_connection(
    postgres_database: Database,
) -> None:
    """Without pre-ping, a pooled connection the server closed is found out by
    the read itself: it is retried once on a new connection, not failed."""
    direct = create_engine(postgres_database.migration_url)
    reads = AsyncStatements(create_engine(postgres_database.migration_url, pre_ping=False), direct)
    try:
        sessionmaker = create_sessionmaker(direct)
        await put(sessionmaker, "dead-conn", b"x")
        assert await reads.object("b", "dead-conn") is not None  # pools a connection
        dsn = postgres_database.migration_url.replace("postgresql+asyncpg", "postgresql")
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        row = await reads.object("b", "dead-conn")
        assert row is not None and row.inline_data == b"x"
    finally:
        await reads._reads.dispose()
        await direct.dispose()


async def test_insert_unless_exists_commits_a_new_key_and_leaves_a_taken_one(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    statements = single_statements_for(engine)
    try:
        now = utcnow()
        values = row_values(spec("new", b"abc"), new_public_id(), now, now)
        new_id = await statements.insert_object_unless_exists(values)
        assert new_id is not None
        # Committed: a session of the app's own engine sees it.
        async with session_scope(sessionmaker) as session:
            row = await ObjectRepository(session).get("b", "new")
            assert row is not None and (row.id, row.inline_data) == (new_id, b"abc")

        again = row_values(spec("new", b"other"), new_public_id(), now, now)
        assert await statements.insert_object_unless_exists(again) is None
        row = await statements.object("b", "new")
        assert row is not None and row.inline_data == b"abc"
    finally:
        await statements.close()


async def test_sqlite_insert_waits_for_a_writer_holding_the_lock(
    engine: AsyncEngine, sessionmaker: Sessions, database: Database
) -> None:
    if database.backend != "sqlite":
        pytest.skip("SQLite's database write lock")
    statements = single_statements_for(engine)
    try:
        now = utcnow()
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("held", b"1"))  # holds the write lock
            waiting = asyncio.ensure_future(
                statements.insert_object_unless_exists(
                    row_values(spec("after", b"2"), new_public_id(), now, now)
                )
            )
            await asyncio.sleep(0.2)
            assert not waiting.done()
        assert await waiting is not None
        assert await statements.object("b", "after") is not None
    finally:
        await statements.close()
