"""Single statements outside the ORM: reading one object row (GET, HEAD),
inserting a small object under a new key and putting one over a small object
(PUT)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, NamedTuple

import asyncpg  # type: ignore[import-untyped]
import pytest
from asyncpg.prepared_stmt import PreparedStatement  # type: ignore[import-untyped]
from sqlalchemy import bindparam, column, select, table, text
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from app.db.engine import create_engine, create_sessionmaker
from app.db.listing import CommonPrefix, ListedObject, ListingRepository
from app.db.models import StoredObject
from app.db.object_rows import ObjectSpec, StoredChecksum, new_public_id, row_values
from app.db.objects import ObjectRepository
from app.db.session import session_scope
from app.db.single_statement_sql import (
    BY_KEY,
    COLUMNS,
    INSERT_KEYS,
    ObjectRow,
    TrashMove,
    inserted_row,
)
from app.db.single_statements import KEPT_CONNECTIONS, AsyncStatements, single_statements_for
from app.db.sqlite_statements import SqliteThreadStatements
from app.db.trash import TrashRepository
from app.db.types import utcnow
from tests.conftest import Database
from tests.db.helpers import add_chunks, whole_chunks
from tests.running_service import eventually

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


async def put_chunked(sessionmaker: Sessions, key: str) -> StoredObject:
    """An object of one (pending, then live) chunk under `key`."""
    chunks = await add_chunks(sessionmaker, [5])
    async with session_scope(sessionmaker) as session:
        return await ObjectRepository(session).put(
            ObjectSpec(
                bucket="b",
                key=key,
                name=key,
                content_type="text/plain",
                size=5,
                etag='"c"',
                pieces=whole_chunks(chunks),
            )
        )


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


async def test_sqlite_reads_run_in_the_loop_and_wait_in_a_thread_only_when_refused(
    engine: AsyncEngine, sessionmaker: Sessions, database: Database
) -> None:
    """A read runs right in the event loop, with no hop to a thread, and
    never waits for SQLite's lock there. When SQLite refuses it (SQLITE_BUSY:
    in WAL mode only while the log is reset or recovered, which is simulated
    here), the read runs again in a thread, which may wait, and gets its row."""
    if database.backend != "sqlite":
        pytest.skip("SQLite's locks")
    await put(sessionmaker, "k", b"one")
    reads = single_statements_for(engine)
    assert isinstance(reads, SqliteThreadStatements)
    run_on = reads._run_on
    where: list[str] = []
    refuse = False

    def recording(connection: Any, statement: Any, values: Any) -> Any:
        in_loop = threading.current_thread() is threading.main_thread()
        where.append("loop" if in_loop else "thread")
        if in_loop and refuse:
            busy = sqlite3.OperationalError("database is locked")
            busy.sqlite_errorcode = 5  # type: ignore[attr-defined]
            raise statement.error(busy, None)
        return run_on(connection, statement, values)

    reads._run_on = recording  # type: ignore[method-assign]
    try:
        row = await reads.object("b", "k")
        assert row is not None and where == ["loop"]

        refuse = True
        where.clear()
        row = await reads.object("b", "k")
        assert row is not None and row.inline_data == b"one"
        assert where == ["loop", "thread"]
    finally:
        await reads.close()


async def terminate_other_backends(database: Database) -> None:
    """What a Postgres restart does to every pooled connection."""
    dsn = database.migration_url.replace("postgresql+asyncpg", "postgresql")
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()


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
        await terminate_other_backends(postgres_database)
        row = await reads.object("b", "dead-conn")
        assert row is not None and row.inline_data == b"x"
    finally:
        await reads._reads.dispose()
        await direct.dispose()


@pytest.mark.postgres
async def test_postgres_listing_survives_dead_connections(postgres_database: Database) -> None:
    """A listing's page runs on the driver's kept connections and, when the
    server has closed them, is run again through SQLAlchemy on a new one."""
    direct = create_engine(postgres_database.migration_url)
    reads = AsyncStatements(create_engine(postgres_database.migration_url, pre_ping=False), direct)
    listing = ListingRepository(reads)
    try:
        sessionmaker = create_sessionmaker(direct)
        for key in ("ls/d/1", "ls/d/2", "ls/e"):
            await put(sessionmaker, key, b"x")
        before = await listing.objects("b", prefix="ls/", delimiter="/")  # keeps a connection
        assert [type(entry) for entry in before] == [CommonPrefix, ListedObject]
        async with reads._reads.connect() as pooled:  # and one in the pool
            await pooled.execute(text("SELECT 1"))
        await terminate_other_backends(postgres_database)
        assert await listing.objects("b", prefix="ls/", delimiter="/") == before
        await terminate_other_backends(postgres_database)
        keys = [
            entry.key
            for entry in await listing.objects("b", prefix="ls/")
            if isinstance(entry, ListedObject)
        ]
        assert keys == ["ls/d/1", "ls/d/2", "ls/e"]
    finally:
        await reads.close()
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


async def test_a_chunkless_put_inserts_or_replaces_a_chunkless_object_in_place(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    statements = single_statements_for(engine)
    try:
        created = utcnow()
        first = row_values(spec("k", b"one"), new_public_id(), created, created)
        stored = await statements.put_chunkless_object(first)
        assert stored is not None
        row_id, created_at = stored
        assert created_at == created

        later = utcnow()
        second = row_values(full_spec("k"), new_public_id(), later, later)
        assert await statements.put_chunkless_object(second) == (row_id, created)
        # Committed: a session of the app's own engine sees the new version
        # whole, under the key's row, with the first version's creation time.
        async with session_scope(sessionmaker) as session:
            row = await ObjectRepository(session).get("b", "k")
            assert row is not None
            assert (row.id, row.created_at, row.updated_at) == (row_id, created, later)
            assert (row.public_id, row.inline_data) == (second["public_id"], b"\x00\xff\x01")
            assert (row.name, row.etag, row.owner_key_id) == ("n\u00e9", '"0123"', 12)
            assert (row.user_metadata, row.tags) == (second["user_metadata"], {"t": "1"})
            assert (row.checksum, row.checksum_type) == ("AAAAAA==", "FULL_OBJECT")
        assert await statements.object_by_public_id(first["public_id"]) is None
    finally:
        await statements.close()


async def test_a_chunkless_put_leaves_an_object_made_of_chunks(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    """Its chunks must be released with it: that is the session's work."""
    statements = single_statements_for(engine)
    try:
        kept = await put_chunked(sessionmaker, "chunked")
        now = utcnow()
        values = row_values(spec("chunked", b"small"), new_public_id(), now, now)
        assert await statements.put_chunkless_object(values) is None
        row = await statements.object("b", "chunked")
        assert row is not None
        assert (row.id, row.public_id, row.inline_data) == (kept.id, kept.public_id, None)
        # Another key's object, with no chunk, is replaced as usual.
        await put(sessionmaker, "other", b"1")
        values = row_values(spec("other", b"2"), new_public_id(), now, now)
        assert await statements.put_chunkless_object(values) is not None
    finally:
        await statements.close()


async def test_a_chunkless_delete_deletes_only_an_object_without_chunks(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    statements = single_statements_for(engine)
    try:
        await put(sessionmaker, "small", b"1")
        await put(sessionmaker, "kept", b"2")
        await put_chunked(sessionmaker, "chunked")

        assert await statements.delete_chunkless_object("b", "small") is True
        assert await statements.delete_chunkless_object("b", "small") is False
        assert await statements.delete_chunkless_object("b", "absent") is False
        # Its chunks must be released with it: that is the session's work.
        assert await statements.delete_chunkless_object("b", "chunked") is False
        async with session_scope(sessionmaker) as session:
            left = await ObjectRepository(session).list("b")
        assert sorted(row.key for row in left) == ["chunked", "kept"]
    finally:
        await statements.close()


async def test_a_small_object_goes_to_the_trash_in_one_transaction(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    """With the trash on, a small object's rewrite and delete move the old
    version to the trash; one made of chunks is left to the session."""
    statements = single_statements_for(engine)
    try:
        first = await put(sessionmaker, "k", b"one")
        await put_chunked(sessionmaker, "chunked")
        now = utcnow()

        def move(key: str, reason: str) -> TrashMove:
            return TrashMove("b", key, reason, now, now + timedelta(hours=1))

        second = row_values(spec("k", b"two"), new_public_id(), now, now)
        replaced = await statements.trash_chunkless_object(move("k", "replaced"), second)
        deleted = await statements.trash_chunkless_object(move("k", "deleted"))
        absent = await statements.trash_chunkless_object(move("k", "deleted"))
        chunked = await statements.trash_chunkless_object(
            move("chunked", "replaced"),
            row_values(spec("chunked", b"x"), new_public_id(), now, now),
        )

        assert replaced is not None and replaced.trashed and replaced.stored is not None
        assert deleted == (True, None) and absent == (False, None)
        assert chunked is None
        assert await statements.object("b", "k") is None
        kept = await statements.object("b", "chunked")
        assert kept is not None and kept.inline_data is None
        async with session_scope(sessionmaker) as session:
            trash = TrashRepository(session)
            old = await trash.get(first)
            newer = await trash.get(second["public_id"])
            assert [item.reason for item in await trash.list()] == ["deleted", "replaced"]
        assert old is not None and newer is not None
        assert (old.bucket, old.key, old.reason, old.row.size) == ("b", "k", "replaced", 3)
        assert old.expires_at == now + timedelta(hours=1)
        # The second version kept the first's creation time, as a rewrite does.
        assert (newer.row.id, newer.row.created_at) == replaced.stored
        assert newer.row.created_at == old.row.created_at
    finally:
        await statements.close()


async def test_concurrent_chunkless_puts_of_one_key_leave_one_whole_version(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    statements = single_statements_for(engine)
    try:
        now = utcnow()
        versions = [
            row_values(spec("hot", b"v%d" % n), new_public_id(), now, now) for n in range(12)
        ]
        # With a replacement through the session (it reads the version it
        # replaces under the key's lock) in the middle of them.
        results = await asyncio.gather(
            *(statements.put_chunkless_object(values) for values in versions[:6]),
            put(sessionmaker, "hot", b"session"),
            *(statements.put_chunkless_object(values) for values in versions[6:]),
        )
        assert all(result is not None for result in results)
        row = await statements.object("b", "hot")
        assert row is not None
        written = {values["public_id"]: values["inline_data"] for values in versions}
        written[str(results[6])] = b"session"
        assert written[row.public_id] == row.inline_data
        async with session_scope(sessionmaker) as session:
            assert len(await ObjectRepository(session).list("b", prefix="hot")) == 1
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


def test_rows_have_the_table_columns() -> None:
    """ObjectRow is the read statements' columns, and an insert takes every
    value row_values gives (a column added to the table must be added here)."""
    assert list(ObjectRow._fields) == [column.name for column in COLUMNS]
    now = utcnow()
    values = row_values(spec("k", b"x"), new_public_id(), now, now)
    assert set(INSERT_KEYS) == set(values)
    row = inserted_row(7, values)
    assert (row.id, row.key, row.inline_data, row.created_at) == (7, "k", b"x", now)


def full_spec(key: str) -> ObjectSpec:
    return ObjectSpec(
        bucket="b",
        key=key,
        name="n\u00e9",
        content_type="text/plain; charset=utf-8",
        size=3,
        etag='"0123"',
        md5="0123",
        sha256="ab" * 32,
        user_metadata={"x-amz-meta-\u00e9": "v\u00e9", "x-amz-meta-n": ""},
        inline_data=b"\x00\xff\x01",
        owner_key_id=12,
        checksum=StoredChecksum("crc32", "AAAAAA==", "FULL_OBJECT"),
        tags={"t": "1"},
    )


async def test_compiled_statements_read_and_write_what_sqlalchemy_does(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    """The statements run on the driver's connection (SQLite's inserts and
    reads, asyncpg's reads) store the same column values as SQLAlchemy's own
    execution, and read back the same row values as SQLAlchemy's execution
    of the same statement."""
    statements = single_statements_for(engine)
    core = AsyncStatements(engine, engine)
    try:
        now = utcnow()
        for key, tags in (("with", {"t": "1"}), ("without", None)):
            values = row_values(full_spec(key), new_public_id(), now, now)
            values["tags"] = tags
            mine = await statements.insert_object_unless_exists(values)
            theirs = await core.insert_object_unless_exists(
                {**values, "key": key + "-core", "public_id": new_public_id()}
            )
            assert mine is not None and theirs is not None
            async with engine.connect() as connection:
                stored = {
                    row[0]: row[1:]
                    for row in await connection.execute(
                        text(
                            "SELECT key, name, content_type, size, etag, md5, sha256,"
                            " user_metadata, inline_data, created_at, updated_at,"
                            " owner_key_id, checksum_algorithm, checksum, checksum_type,"
                            " parts, tags FROM objects WHERE key IN (:a, :b)"
                        ),
                        {"a": key, "b": key + "-core"},
                    )
                }
            assert stored[key] == stored[key + "-core"]
            read = await statements.object("b", key)
            async with engine.connect() as connection:
                result = await connection.execute(BY_KEY, {"bucket": "b", "key": key})
                core_row = result.first()
            assert core_row is not None
            assert read is not None and read == ObjectRow(*core_row)
            assert read.user_metadata == values["user_metadata"]
            assert read.created_at == now and read.created_at.tzinfo is not None
            assert read.tags == tags
            assert inserted_row(mine, values) == read
    finally:
        await statements.close()
        await core.close()


async def test_sqlite_driver_errors_are_sqlalchemy_errors(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A failing statement raises what SQLAlchemy's own execution raises (the
    error pages tell a locked or missing database apart by its class)."""
    path = tmp_path_factory.mktemp("errors") / "e.db"
    engine = create_engine(f"sqlite:///{path}")
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE t (x)"))  # no objects table
    statements = SqliteThreadStatements(str(path))
    try:
        with pytest.raises(OperationalError, match="no such table"):
            await statements.object("b", "k")
        now = utcnow()
        with pytest.raises(OperationalError, match="no such table"):
            await statements.insert_object_unless_exists(
                row_values(spec("k", b"x"), new_public_id(), now, now)
            )
    finally:
        await statements.close()
        await engine.dispose()


async def test_concurrent_reads_each_get_their_own_row(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    """Many reads at once, of two statements, on more pooled connections than
    pgbouncer (transaction mode, pool of 5) has server connections: on
    Postgres each read is an unnamed statement outside a transaction, and its
    two round trips must reach the same server connection."""
    statements = single_statements_for(engine)
    try:
        public_ids = {}
        for n in range(30):
            public_ids[n] = await put(sessionmaker, f"c{n}", b"%d" % n)

        async def read(n: int) -> None:
            if n % 2:
                row = await statements.object("b", f"c{n % 30}")
            else:
                row = await statements.object_by_public_id(public_ids[n % 30])
            assert row is not None
            assert (row.key, row.inline_data) == (f"c{n % 30}", b"%d" % (n % 30))

        for _ in range(3):
            await asyncio.gather(*(read(n) for n in range(120)))
        assert await statements.object("b", "missing") is None
    finally:
        await statements.close()


class OnPostgres(NamedTuple):
    engine: AsyncEngine
    statements: AsyncStatements


@pytest.fixture
async def on_postgres(postgres_database: Database) -> AsyncIterator[OnPostgres]:
    """The app's engine on Postgres (through pgbouncer) and its single
    statements, as the service makes them; both closed after the test."""
    engine = create_engine(postgres_database.url)
    statements = single_statements_for(engine)
    assert isinstance(statements, AsyncStatements)
    try:
        yield OnPostgres(engine, statements)
    finally:
        await statements.close()
        await engine.dispose()


@pytest.mark.postgres
async def test_postgres_reads_run_on_the_driver_and_fail_as_sqlalchemy_does(
    on_postgres: OnPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Postgres read is asyncpg's own statement, not SQLAlchemy's execution;
    when the driver raises, the read raises what SQLAlchemy raises for it."""
    engine, statements = on_postgres
    await put(create_sessionmaker(engine), "driver", b"d")

    async def no_execute(*args: object, **kwargs: object) -> None:
        raise AssertionError("read through SQLAlchemy's execution")

    with monkeypatch.context() as patched:
        patched.setattr(AsyncConnection, "execute", no_execute)
        row = await statements.object("b", "driver")
    assert row is not None and row.inline_data == b"d"

    missing = table("no_such_table", column("x"))
    bad = select(missing.c.x).where(missing.c.x == bindparam("bucket"))
    with pytest.raises(ProgrammingError, match="no_such_table"):
        await statements._first(bad, {"bucket": "b"})


@pytest.mark.postgres
async def test_postgres_statements_are_described_once_per_connection(
    on_postgres: OnPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement's description is asked once per connection and kept;
    after that each run is one round trip that parses it again. Two
    statements alternating on one connection each read their own row (an
    unnamed statement not parsed again would run the other one), and so do
    reads through pgbouncer while other clients use its server connections."""
    engine, statements = on_postgres
    public_ids = {key: await put(create_sessionmaker(engine), key, key.encode()) for key in "xy"}
    described: list[str] = []
    prepare = asyncpg.Connection.prepare

    async def counted(self: asyncpg.Connection, query: str, **kwargs: object) -> object:
        if "FROM objects" in query:  # not SQLAlchemy's own on a new connection
            described.append(query)
        return await prepare(self, query, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(asyncpg.Connection, "prepare", counted)
        for _ in range(5):
            for key in "xy":
                by_key = await statements.object("b", key)
                by_id = await statements.object_by_public_id(public_ids[key])
                assert by_key is not None and by_id is not None
                assert (by_key.inline_data, by_id.inline_data) == (key.encode(), key.encode())
        # Elsewhere, other clients' statements on the server connections.
        other = await asyncpg.connect(on_postgres_dsn(engine), statement_cache_size=0)
        try:
            for key in "yx":
                assert await other.fetchval("SELECT key FROM objects WHERE key = $1", key) == key
                row = await statements.object("b", key)
                assert row is not None and row.inline_data == key.encode()
        finally:
            await other.close()
        assert len(described) == 2 and len(set(described)) == 2
        # More at once than the connections kept between statements: the
        # others come from the pool, where they keep what was described.
        described_after = []
        for _ in range(3):
            rows = await asyncio.gather(*(statements.object("b", "x") for _ in range(12)))
            assert all(row is not None and row.inline_data == b"x" for row in rows)
            described_after.append(len(described))
    assert described_after[0] > 2 and described_after[1:] == described_after[:1] * 2


def on_postgres_dsn(engine: AsyncEngine) -> str:
    """asyncpg's DSN for the engine's database (through pgbouncer)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


def new_values(key: str, data: bytes) -> dict[str, object]:
    now = utcnow()
    return row_values(spec(key, data), new_public_id(), now, now)


@pytest.mark.postgres
async def test_postgres_inserts_run_on_the_driver_and_fail_as_sqlalchemy_does(
    on_postgres: OnPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small PUT's insert is asyncpg's own statement in autocommit; one the
    server refuses raises what SQLAlchemy raises for it, and writes nothing."""
    statements = on_postgres.statements

    async def no_sqlalchemy(*args: object, **kwargs: object) -> None:
        raise AssertionError("inserted through SQLAlchemy's execution")

    with monkeypatch.context() as patched:
        patched.setattr(AsyncConnection, "scalar", no_sqlalchemy)
        new_id = await statements.insert_object_unless_exists(new_values("on-driver", b"d"))
    row = await statements.object("b", "on-driver")
    assert row is not None and (row.id, row.inline_data) == (new_id, b"d")

    too_long = new_values("refused", b"r") | {"content_type": "x" * 10_000}
    with pytest.raises(DBAPIError, match="value too long"):
        await statements.insert_object_unless_exists(too_long)
    assert await statements.object("b", "refused") is None


@pytest.mark.postgres
async def test_postgres_insert_on_a_dead_pooled_connection_is_stored_once(
    on_postgres: OnPostgres, postgres_database: Database
) -> None:
    """The inserts' pool has no pre-ping: a connection the server closed is
    found out by the insert, which then stores the row on a new one."""
    statements = on_postgres.statements
    assert await statements.object("b", "none") is None  # keeps a connection
    await terminate_other_backends(postgres_database)
    values = new_values("after-restart", b"x")
    new_id = await statements.insert_object_unless_exists(values)
    row = await statements.object_by_public_id(str(values["public_id"]))
    assert new_id is not None and row is not None and row.id == new_id


@pytest.mark.postgres
async def test_postgres_insert_written_before_its_connection_failed_is_not_taken_for_a_conflict(
    on_postgres: OnPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection fails after the server wrote the row: run again, the
    insert would find its own key taken and report a conflict (and the PUT
    would replace its own object). The row is found by its new public id
    instead."""
    statements = on_postgres.statements
    fetchrow = PreparedStatement.fetchrow
    lost = []

    async def written_then_lost(self: PreparedStatement, *args: object) -> object:
        await fetchrow(self, *args)
        lost.append(self.get_query())
        raise ConnectionResetError("the connection was lost before the answer came")

    values = new_values("lost-answer", b"l")
    with monkeypatch.context() as patched:
        patched.setattr(PreparedStatement, "fetchrow", written_then_lost)
        new_id = await statements.insert_object_unless_exists(values)
    assert lost and lost[0].startswith("INSERT")
    row = await statements.object("b", "lost-answer")
    assert new_id is not None and row is not None
    assert (row.id, row.public_id) == (new_id, values["public_id"])


@pytest.mark.postgres
async def test_postgres_statements_give_back_every_connection_even_when_cancelled(
    on_postgres: OnPostgres, postgres_database: Database
) -> None:
    """A few connections stay checked out between statements (KEPT_CONNECTIONS);
    more are taken while more statements run at once. Reads cancelled midway
    (a client that hung up) leave none behind, and `close` gives back the
    kept ones."""
    engine, statements = on_postgres
    pool = statements._reads.pool
    await put(create_sessionmaker(engine), "kept", b"k")
    # The reads wait on the server, their statements sent, while another
    # connection holds the table.
    dsn = postgres_database.migration_url.replace("postgresql+asyncpg", "postgresql")
    holder = await asyncpg.connect(dsn)
    try:
        locked = holder.transaction()
        await locked.start()
        await holder.execute("LOCK TABLE objects IN ACCESS EXCLUSIVE MODE")
        reads = [asyncio.ensure_future(statements.object("b", "kept")) for _ in range(10)]

        async def reads_wait_on_the_lock() -> bool:
            waiting = await holder.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return pool.checkedout() == len(reads) and waiting > 0  # type: ignore[attr-defined]

        await eventually(reads_wait_on_the_lock)
        for read in reads[::2]:
            read.cancel()
        async with asyncio.timeout(10):
            await asyncio.wait(reads[::2])
        assert not any(read.done() for read in reads[1::2])
        await locked.rollback()
    finally:
        await holder.close()
    done = await asyncio.gather(*reads, return_exceptions=True)
    rows = [row for row in done if isinstance(row, ObjectRow)]
    assert rows and all(row.inline_data == b"k" for row in rows)
    assert all(isinstance(r, ObjectRow | asyncio.CancelledError) for r in done)
    assert pool.checkedout() <= KEPT_CONNECTIONS  # type: ignore[attr-defined]
    row = await statements.object("b", "kept")
    assert row is not None and row.inline_data == b"k"

    kept = list(statements._kept)
    await statements.close()
    # Given back: a connection back in the pool has no driver connection.
    assert kept and all(connection.dbapi_connection is None for connection in kept)
