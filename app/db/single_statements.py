"""The request path's single-statement work, the cheapest way each backend
allows: reading one object row (GET, HEAD) or a listing's page (the
statements of app.db.listing), and storing a small object (PUT) under a new
key, or over a small object (a key rewritten again and again, as a
registry's link files are).

Through an ORM session on SQLAlchemy's async adapters each of these cost
about 1 ms of CPU: the session, its commit, and on SQLite a round trip to
aiosqlite's thread for every step (BEGIN, cursor, execute, fetch, close,
COMMIT, the pool's reset). One statement needs none of that: on its own it is
atomic, reads one consistent snapshot, and commits.

* SQLite (a database file): synchronous connections to the same file in
  autocommit. A read runs right in the event loop on a read-only connection
  that never waits for a lock (busy_timeout 0): a lookup by key takes a few
  microseconds, where the hop to a thread and back cost ~0.1 ms of CPU, a
  fifth of a small HEAD. In WAL mode a reader is refused only while the
  log is being reset or recovered; such a read goes to a small thread pool
  of our own, as every read did before. WAL lets readers run while a
  writer writes, and they see every transaction committed before the read
  began, like a new session would. A listing's page (milliseconds of
  SQLite's work for 1,000 rows) always runs in one of those threads, so
  that it does not hold up the event loop. Inserts go through one
  connection of their own, with the same journal and sync settings as the
  app's (WAL, synchronous=FULL: an acknowledged insert is on disk), queueing
  behind other writers on busy_timeout like the app's connections do.
* Postgres: reads and inserts are asyncpg's own unnamed statements outside
  a transaction (one round trip each once described; see
  `AsyncStatements._on_driver`), on a few connections of an engine of their
  own, without pre-ping, kept out of its pool between statements: checking
  one out and back in cost as much CPU as the statement. A read whose driver
  call fails is run again through SQLAlchemy, on a new connection if that one
  was dead. An insert cannot be retried blindly: when the driver raises, the
  row is looked up by its new public id (found: it was written), and if it is
  not there the insert is run again through SQLAlchemy on the app's engine,
  which pings first and raises what it always raised.
* An in-memory SQLite database (which another connection could not see):
  Core statements on the app's engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Final, Protocol, TypeVar

from sqlalchemy import Select, TextualSelect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from app.db.compiled import CompiledStatement, StatementCache
from app.db.engine import create_engine
from app.db.locking import lock_object_key_on
from app.db.object_rows import INSERTS_UNLESS_EXISTS, ObjectRow
from app.db.single_statement_sql import (
    BY_KEY,
    BY_PUBLIC_ID,
    CHUNKLESS_DELETE,
    CHUNKLESS_PUT,
    CURRENT,
    INSERT,
    INSERT_KEYS,
    TO_TRASH,
    TRASH_BUCKET,
    TRASH_ENTRY,
    WRITES,
    TrashMove,
    TrashOutcome,
    trash_key,
)
from app.db.sqlite_statements import SqliteThreadStatements

T = TypeVar("T")

#: Postgres connections kept out of the pool between single statements; more
#: are checked out while more statements run at once, and given back after.
KEPT_CONNECTIONS = 4


class SingleStatements(Protocol):
    #: The database's dialect ("sqlite", "postgresql").
    dialect: str

    async def object(self, bucket: str, key: str) -> ObjectRow | None:
        """The objects row under (bucket, key), every column but `parts`."""

    async def object_by_public_id(self, public_id: str) -> ObjectRow | None:
        """The objects row with this public id, every column but `parts`."""

    async def rows(
        self, statement: Select[Any] | TextualSelect, values: dict[str, Any]
    ) -> list[Sequence[Any]]:
        """Every row of a read `statement` (a listing's page), with `values`
        for its bound parameters. Each distinct statement object is compiled
        once: build each form once (app.db.listing does)."""

    async def insert_object_unless_exists(self, values: dict[str, Any]) -> int | None:
        """Insert an objects row (`object_rows.row_values`) that references no
        chunk, committed; its id, or None if its key already has an object."""

    async def put_chunkless_object(self, values: dict[str, Any]) -> tuple[int, datetime] | None:
        """Store an objects row that references no chunk under its key,
        committed: inserted, or replacing in place an object that references
        no chunk either (`object_rows.CHUNKLESS_PUTS`). The row's id and
        creation time, or None if the key's object references chunks."""

    async def delete_chunkless_object(self, bucket: str, key: str) -> bool:
        """Delete the object under (bucket, key) if it references no chunk
        (none to release), committed; False if there is none, or it has
        chunks, or (on Postgres) the connection failed after the delete."""

    async def trash_chunkless_object(
        self, move: TrashMove, replacement: dict[str, Any] | None = None
    ) -> TrashOutcome | None:
        """In one transaction under the key's lock: move the object under
        (move.bucket, move.key) to the trash (`app.db.trash`) if it references
        no chunk, then insert `replacement` (`object_rows.row_values`, keeping
        the replaced object's creation time) there, committed. None if the
        object references chunks: nothing is done (the session's path)."""

    async def close(self) -> None: ...


class AsyncStatements:
    """Core statements on pooled connections of async engines: `reads` for
    reads (retried once on a dead connection), `writes` for inserts. Engines
    named in `owned` are closed with this object. On asyncpg both run on the
    driver itself first (`_on_driver`)."""

    def __init__(
        self, reads: AsyncEngine, writes: AsyncEngine, *, owned: tuple[AsyncEngine, ...] = ()
    ) -> None:
        self._reads = reads
        self._writes = writes
        self._owned = owned
        self.dialect = reads.dialect.name
        on_asyncpg = reads.dialect.name == "postgresql" and reads.dialect.driver == "asyncpg"
        # Statements run on the driver, compiled on first use (None: not asyncpg).
        self._compiled = StatementCache(reads.dialect) if on_asyncpg else None
        # Per kind of write, its statement for the driver (None: not asyncpg).
        self._writes_on_driver: dict[str, CompiledStatement | None] = {
            kind: (
                CompiledStatement(by_dialect["postgresql"], reads.dialect, keys=INSERT_KEYS)
                if on_asyncpg
                else None
            )
            for kind, by_dialect in WRITES.items()
        }
        # Connections of `reads` checked out and idle, for `_on_driver`.
        self._kept: list[PoolProxiedConnection] = []

    async def _first(self, statement: Select[Any], values: dict[str, str]) -> ObjectRow | None:
        if self._compiled is not None:
            compiled = self._compiled[statement]
            done, record = await self._on_driver(compiled, values)
            if done:
                return None if record is None else ObjectRow(*compiled.row(record))
            # The driver raised: SQLAlchemy runs it again and raises what it
            # always has (a read can run twice).
        return await _once_more_if_dead(lambda: self._first_once(statement, values))

    async def _first_once(self, statement: Select[Any], values: dict[str, str]) -> ObjectRow | None:
        async with self._reads.connect() as connection:
            result = (await connection.execute(statement, values)).first()
            return None if result is None else ObjectRow(*result)

    async def object(self, bucket: str, key: str) -> ObjectRow | None:
        return await self._first(BY_KEY, {"bucket": bucket, "key": key})

    async def object_by_public_id(self, public_id: str) -> ObjectRow | None:
        return await self._first(BY_PUBLIC_ID, {"public_id": public_id})

    async def rows(
        self, statement: Select[Any] | TextualSelect, values: dict[str, Any]
    ) -> list[Sequence[Any]]:
        if self._compiled is not None:
            compiled = self._compiled[statement]
            done, records = await self._on_driver(compiled, values, every_row=True)
            if done:
                return compiled.rows(records)
        return await _once_more_if_dead(lambda: self._rows_once(statement, values))

    async def _rows_once(
        self, statement: Select[Any] | TextualSelect, values: dict[str, Any]
    ) -> list[Sequence[Any]]:
        async with self._reads.connect() as connection:
            return [tuple(row) for row in await connection.execute(statement, values)]

    async def insert_object_unless_exists(self, values: dict[str, Any]) -> int | None:
        row = await self._write(INSERT, values)
        return None if row is None else int(row[0])

    async def put_chunkless_object(self, values: dict[str, Any]) -> tuple[int, datetime] | None:
        row = await self._write(CHUNKLESS_PUT, values)
        return None if row is None else (int(row[0]), row[1])

    async def delete_chunkless_object(self, bucket: str, key: str) -> bool:
        values = {"bucket": bucket, "key": key}
        if self._compiled is not None:
            on_driver = self._compiled[CHUNKLESS_DELETE]
            done, record = await asyncio.shield(self._on_driver(on_driver, values))
            if done:
                return record is not None
            # The driver raised: run it again through SQLAlchemy (a delete
            # that was made finds nothing the second time).
        async with self._writes.begin() as connection:
            return (await connection.execute(CHUNKLESS_DELETE, values)).first() is not None

    async def trash_chunkless_object(
        self, move: TrashMove, replacement: dict[str, Any] | None = None
    ) -> TrashOutcome | None:
        # Not on the driver: several statements in one transaction. Shielded
        # like every write.
        return await asyncio.shield(self._trash_chunkless(move, replacement))

    async def _trash_chunkless(
        self, move: TrashMove, replacement: dict[str, Any] | None
    ) -> TrashOutcome | None:
        insert = INSERTS_UNLESS_EXISTS[self._writes.dialect.name]
        async with self._writes.begin() as connection:
            await lock_object_key_on(connection, move.bucket, move.key)
            current = (
                await connection.execute(CURRENT, {"bucket": move.bucket, "key": move.key})
            ).first()
            if current is not None and current[2]:
                return None
            if current is not None:
                object_id, replacement_created = current[0], current[1]
                await connection.execute(
                    TO_TRASH,
                    {
                        "object_id": object_id,
                        "trash_bucket": TRASH_BUCKET,
                        "trash_key": trash_key(object_id),
                    },
                )
                await connection.execute(TRASH_ENTRY, move.entry(object_id))
            stored = None
            if replacement is not None:
                if current is not None:
                    replacement = {**replacement, "created_at": replacement_created}
                new_id = (await connection.execute(insert, replacement)).scalar_one()
                stored = (int(new_id), replacement["created_at"])
            return TrashOutcome(trashed=current is not None, stored=stored)

    async def _write(self, kind: str, values: dict[str, Any]) -> Sequence[Any] | None:
        """The row `WRITES[kind]` returns for `values` (None: it wrote nothing)."""
        on_driver = self._writes_on_driver[kind]
        if on_driver is not None:
            # Shielded: once sent, the write runs to its end, and its
            # connection is kept or dropped knowing how it ended.
            done, record = await asyncio.shield(self._on_driver(on_driver, values))
            if done:
                return None if record is None else on_driver.row(record)
            # The driver raised: if the row is there, the write was made
            # before the connection failed (the public id is new).
            written = await self.object_by_public_id(values["public_id"])
            if written is not None:
                return (written.id, written.created_at)
        statement = WRITES[kind][self._writes.dialect.name]
        async with self._writes.begin() as connection:
            return (await connection.execute(statement, values)).first()

    async def _on_driver(
        self, statement: CompiledStatement, values: dict[str, Any], *, every_row: bool = False
    ) -> tuple[bool, Any]:
        """(True, asyncpg's record or None, or with `every_row` its list of
        records) of `statement` run by asyncpg itself; (False, None) if the
        driver raised.

        Outside a transaction and with asyncpg's statement cache off, this is
        asyncpg's unnamed statement: Parse, Bind, Execute and Sync in one
        round trip, where SQLAlchemy's execution took four for a read (BEGIN,
        prepare, execute, ROLLBACK) and seven for an insert (its pre-ping's
        BEGIN, ping and ROLLBACK; BEGIN, prepare, execute, COMMIT). The
        statement's description (parameter and column types, asyncpg's codecs
        for them) is asked once per pooled connection (Parse, Describe and
        Flush) and kept with it (`_prepared`): describing it again for every
        statement cost as much CPU as running it. pgbouncer in transaction
        mode hands the server connection back only at ReadyForQuery, which
        only the Sync brings, so each statement, parsed again with its Bind,
        runs whole on one server connection; between statements a client
        connection holds none.
        """
        connection = self._kept.pop() if self._kept else await self._reads.raw_connection()
        try:
            prepared = await _prepared(connection, statement.sql)
            parameters = statement.parameters(values)
            if every_row:
                record = await prepared.fetch(*parameters)
            else:
                record = await prepared.fetchrow(*parameters)
        except BaseException as exc:
            # In whatever state the driver left it, it is not used again.
            connection.invalidate()
            connection.close()
            if not isinstance(exc, Exception):
                raise
            return False, None
        if len(self._kept) < KEPT_CONNECTIONS:
            self._kept.append(connection)
        else:
            await greenlet_spawn(connection.close)
        return True, record

    async def close(self) -> None:
        kept, self._kept = self._kept, []
        for connection in kept:
            await greenlet_spawn(connection.close)
        for engine in self._owned:
            await engine.dispose()


async def _once_more_if_dead(read: Callable[[], Awaitable[T]]) -> T:
    """`read` through SQLAlchemy, and once more if its pooled connection
    turned out dead (the reads' engine does not ping first)."""
    try:
        return await read()
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        return await read()


# Where a pooled connection keeps asyncpg's statements described on it
# (SQLAlchemy's `info`: kept across checkouts, cleared when the connection is
# invalidated or replaced).
_PREPARED: Final = "single_statements.prepared"


async def _prepared(connection: PoolProxiedConnection, sql: str) -> Any:
    """asyncpg's prepared statement for `sql` on `connection`, described once
    per connection. Named "" it is the unnamed statement, which asyncpg (its
    statement cache off, as behind pgbouncer) parses again with every Bind:
    nothing of it needs to outlive the statement on the server."""
    prepared_on: dict[str, Any] = connection.info.setdefault(_PREPARED, {})
    prepared = prepared_on.get(sql)
    if prepared is None:
        driver = connection.driver_connection
        if driver is None:
            raise RuntimeError("the pooled connection has no driver connection")
        prepared = prepared_on[sql] = await driver.prepare(sql, name="")
    return prepared


def single_statements_for(engine: AsyncEngine) -> SingleStatements:
    """The cheapest single statements for the database `engine` is connected to."""
    url = engine.url
    path = url.database
    # A URI with options (shared cache, mode=memory) is left to the engine.
    if url.get_backend_name() == "sqlite" and path and path != ":memory:" and not url.query:
        return SqliteThreadStatements(path)
    if url.get_backend_name() == "postgresql":
        reads = create_engine(url, pre_ping=False)
        return AsyncStatements(reads, engine, owned=(reads,))
    return AsyncStatements(engine, engine)
