"""The single statements on SQLite: synchronous connections to the database
file (see app/db/single_statements.py for why and how)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import sqlalchemy
from sqlalchemy import Select, TextualSelect, event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from app.db.compiled import CompiledStatement, StatementCache, run_for_rows, run_statement
from app.db.object_rows import ObjectRow
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
    TRASH_KEYS,
    WRITES,
    TrashMove,
    TrashOutcome,
    trash_key,
)
from app.db.types import json_loads

#: Threads (and read connections) for SQLite reads. Each lookup holds one for
#: tens of microseconds; a few cover the event loop's one thread.
SQLITE_READ_THREADS = 4


class SqliteThreadStatements:
    """Synchronous connections to the SQLite file, one hop a statement.

    Each thread keeps one connection of its engine's pool for its whole life
    and runs the statements compiled once (app.db.compiled) on it directly.
    """

    dialect = "sqlite"

    def __init__(self, path: str) -> None:
        url = f"sqlite:///{path}"
        self._reads = sqlalchemy.create_engine(
            url,
            # One more for the event loop's own reads (`_inline`).
            pool_size=SQLITE_READ_THREADS + 1,
            max_overflow=0,
            connect_args={"check_same_thread": False},
            json_deserializer=json_loads,
        )
        event.listen(self._reads, "connect", _read_only)
        # One writer: SQLite takes one at a time anyway.
        self._writes = sqlalchemy.create_engine(
            url,
            pool_size=1,
            max_overflow=0,
            connect_args={"check_same_thread": False},
            json_deserializer=json_loads,
        )
        event.listen(self._writes, "connect", _writer)
        dialect = self._reads.dialect
        self._by_key = CompiledStatement(BY_KEY, dialect)
        self._by_public_id = CompiledStatement(BY_PUBLIC_ID, dialect)
        self._compiled_writes = {
            kind: CompiledStatement(by_dialect["sqlite"], dialect, keys=INSERT_KEYS)
            for kind, by_dialect in WRITES.items()
        }
        self._chunkless_delete = CompiledStatement(CHUNKLESS_DELETE, dialect)
        self._current = CompiledStatement(CURRENT, dialect)
        self._to_trash = CompiledStatement(TO_TRASH, dialect)
        self._trash_entry = CompiledStatement(TRASH_ENTRY, dialect, keys=TRASH_KEYS)
        self._compiled_reads = StatementCache(dialect)
        self._held: list[PoolProxiedConnection] = []
        # The event loop's read connection (used by one read at a time: a
        # read on it never awaits).
        self._inline: PoolProxiedConnection | None = None
        self._thread_connections = threading.local()
        self._read_threads = ThreadPoolExecutor(
            SQLITE_READ_THREADS, thread_name_prefix="sqlite-read"
        )
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-write")

    def _connection(self, engine: sqlalchemy.Engine) -> PoolProxiedConnection:
        """This thread's connection of `engine`, kept for the thread's life
        (each pool has a connection for each of its threads)."""
        mine: dict[sqlalchemy.Engine, PoolProxiedConnection] | None = getattr(
            self._thread_connections, "by_engine", None
        )
        if mine is None:
            mine = self._thread_connections.by_engine = {}
        connection = mine.get(engine)
        if connection is None:
            connection = mine[engine] = engine.raw_connection()
            self._held.append(connection)
        return connection

    def _run(
        self, engine: sqlalchemy.Engine, statement: CompiledStatement, values: dict[str, Any]
    ) -> list[Any] | None:
        return self._run_on(self._connection(engine), statement, values)

    @staticmethod
    def _run_on(
        connection: PoolProxiedConnection, statement: CompiledStatement, values: dict[str, Any]
    ) -> list[Any] | None:
        return run_statement(connection, statement, values)

    async def _first(
        self, statement: CompiledStatement, values: dict[str, str]
    ) -> ObjectRow | None:
        try:
            row = self._read_inline(statement, values)
        except _WouldWait:
            loop = asyncio.get_running_loop()
            row = await loop.run_in_executor(
                self._read_threads, self._run, self._reads, statement, values
            )
        return None if row is None else ObjectRow(*row)

    def _read_inline(
        self, statement: CompiledStatement, values: dict[str, str]
    ) -> list[Any] | None:
        """`statement` on the event loop's connection; `_WouldWait` where
        it would have to wait for SQLite's lock."""
        try:
            if self._inline is None:
                self._inline = self._reads.raw_connection()
                self._held.append(self._inline)
                cursor = self._inline.cursor()
                cursor.execute("PRAGMA busy_timeout=0")
                cursor.close()
            return self._run_on(self._inline, statement, values)
        except DBAPIError as exc:
            if _is_busy(exc.orig):
                raise _WouldWait from exc
            raise

    async def object(self, bucket: str, key: str) -> ObjectRow | None:
        return await self._first(self._by_key, {"bucket": bucket, "key": key})

    async def object_by_public_id(self, public_id: str) -> ObjectRow | None:
        return await self._first(self._by_public_id, {"public_id": public_id})

    async def rows(
        self, statement: Select[Any] | TextualSelect, values: dict[str, Any]
    ) -> list[Sequence[Any]]:
        compiled = self._compiled_reads[statement]
        # In a thread, not in the event loop: a page of 1,000 rows takes
        # milliseconds, where the hop costs a tenth of one.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._read_threads, self._all_rows, compiled, values)

    def _all_rows(
        self, statement: CompiledStatement, values: dict[str, Any]
    ) -> list[Sequence[Any]]:
        return run_for_rows(self._connection(self._reads), statement, values)

    async def insert_object_unless_exists(self, values: dict[str, Any]) -> int | None:
        row = await self._write(self._compiled_writes[INSERT], values)
        return None if row is None else int(row[0])

    async def put_chunkless_object(self, values: dict[str, Any]) -> tuple[int, datetime] | None:
        row = await self._write(self._compiled_writes[CHUNKLESS_PUT], values)
        return None if row is None else (int(row[0]), row[1])

    async def delete_chunkless_object(self, bucket: str, key: str) -> bool:
        row = await self._write(self._chunkless_delete, {"bucket": bucket, "key": key})
        return row is not None

    async def trash_chunkless_object(
        self, move: TrashMove, replacement: dict[str, Any] | None = None
    ) -> TrashOutcome | None:
        loop = asyncio.get_running_loop()
        return await asyncio.shield(
            loop.run_in_executor(self._write_thread, self._trash_chunkless, move, replacement)
        )

    def _trash_chunkless(
        self, move: TrashMove, replacement: dict[str, Any] | None
    ) -> TrashOutcome | None:
        """On the writer's thread: one transaction, the database's write lock
        (the key's lock on SQLite) taken first."""
        connection = self._connection(self._writes)
        cursor = connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                outcome = self._trash_in_transaction(connection, move, replacement)
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT" if outcome is not None else "ROLLBACK")
        finally:
            cursor.close()
        return outcome

    def _trash_in_transaction(
        self,
        connection: PoolProxiedConnection,
        move: TrashMove,
        replacement: dict[str, Any] | None,
    ) -> TrashOutcome | None:
        current = self._run_on(connection, self._current, {"bucket": move.bucket, "key": move.key})
        if current is not None and current[2]:
            return None
        if current is not None:
            object_id = current[0]
            self._run_on(
                connection,
                self._to_trash,
                {
                    "object_id": object_id,
                    "trash_bucket": TRASH_BUCKET,
                    "trash_key": trash_key(object_id),
                },
            )
            self._run_on(connection, self._trash_entry, move.entry(object_id))
        stored = None
        if replacement is not None:
            if current is not None:
                replacement = {**replacement, "created_at": current[1]}
            row = self._run_on(connection, self._compiled_writes[INSERT], replacement)
            if row is None:
                raise RuntimeError(f"object {move.bucket}/{move.key} appeared under the write lock")
            stored = (int(row[0]), replacement["created_at"])
        return TrashOutcome(trashed=current is not None, stored=stored)

    async def _write(
        self, statement: CompiledStatement, values: dict[str, Any]
    ) -> list[Any] | None:
        loop = asyncio.get_running_loop()
        # Shielded: once sent, the write runs to its end in its thread, and
        # whoever awaits it must not learn otherwise.
        return await asyncio.shield(
            loop.run_in_executor(self._write_thread, self._run, self._writes, statement, values)
        )

    async def close(self) -> None:
        # Statements in flight finish first; then no connection outlives us.
        for threads in (self._read_threads, self._write_thread):
            await asyncio.to_thread(threads.shutdown, wait=True)
        for connection in self._held:
            connection.close()
        self._held.clear()
        self._reads.dispose()
        self._writes.dispose()


class _WouldWait(Exception):
    """A read that the event loop's connection cannot run without waiting."""


def _is_busy(exc: BaseException | None) -> bool:
    """Whether SQLite refused for a lock another connection holds (extended
    result codes keep the primary code in their low byte)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _autocommit(dbapi_connection: DBAPIConnection, *pragmas: str) -> None:
    cursor = dbapi_connection.cursor()
    # A writer holds the lock only for its commit: wait for it, as the app's
    # own connections do, rather than fail.
    cursor.execute("PRAGMA busy_timeout=5000")
    for pragma in pragmas:
        cursor.execute(pragma)
    cursor.close()
    # No BEGIN from the driver: each statement is its own transaction.
    dbapi_connection.isolation_level = None


def _read_only(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    _autocommit(dbapi_connection, "PRAGMA query_only=ON")


def _writer(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    _autocommit(dbapi_connection, "PRAGMA journal_mode=WAL", "PRAGMA foreign_keys=ON")
