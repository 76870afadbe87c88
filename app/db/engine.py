"""Creating engines and sessions for SQLite and for Postgres behind pgbouncer."""

from __future__ import annotations

import itertools
import secrets
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.engine.url import URL
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

from app.config.database_url import normalize_url as normalize_url
from app.db.sqlite_driver import OneHopAiosqlite
from app.db.types import json_loads

#: Connections an engine keeps open, and how many more it may open for a
#: burst. A connection opened past the kept ones is closed again when it is
#: returned: with 8 clients and SQLAlchemy's 5 kept, 3 in 8 requests paid for
#: a new connection (on SQLite a new thread and file handle, on Postgres a
#: new login through pgbouncer). The total stays SQLAlchemy's 15.
POOL_SIZE = 10
POOL_OVERFLOW = 5

#: SQLite's page cache per connection, in KiB (PRAGMA cache_size takes a
#: negative number as KiB). Its default, 2 MiB, fills as the database grows,
#: in each of up to POOL_SIZE + POOL_OVERFLOW connections: up to 30 MiB of
#: RSS that a soak saw creep minute by minute (issue 55). The OS's page cache
#: holds the file anyway, so a small one costs little: 512 KiB.
SQLITE_CACHE_KIB = 512

# Unique across every client of a server connection: a random prefix per
# process and a counter (uuid4 read the kernel's random source per statement).
_STATEMENT_PREFIX = f"__asyncpg_{secrets.token_hex(8)}_"
_STATEMENT_NUMBERS = itertools.count()


def _unique_statement_name() -> str:
    return f"{_STATEMENT_PREFIX}{next(_STATEMENT_NUMBERS)}__"


def create_engine(
    url: str | URL, *, for_migrations: bool = False, pre_ping: bool = True
) -> AsyncEngine:
    """An engine for `url`, configured for its backend.

    `for_migrations` makes a short-lived engine without a pool and, on SQLite,
    without foreign-key enforcement (Alembic's batch mode rebuilds tables,
    which foreign keys would block). `pre_ping=False` (Postgres) skips the
    round trip that checks a pooled connection before each use: for callers
    that retry on a dead connection themselves.
    """
    parsed = normalize_url(url) if isinstance(url, str) else url
    if parsed.drivername == "postgresql+asyncpg":
        return _postgres_engine(parsed, for_migrations=for_migrations, pre_ping=pre_ping)
    return _sqlite_engine(parsed, foreign_keys=not for_migrations)


def _postgres_engine(url: URL, *, for_migrations: bool, pre_ping: bool) -> AsyncEngine:
    # pgbouncer in transaction mode hands each transaction whichever server
    # connection is free, so nothing may outlive a transaction on the server:
    # no statement caches, and every prepared statement gets a unique name
    # (asyncpg's counter-based names collide across clients sharing a server
    # connection: "prepared statement __asyncpg_stmt_1__ already exists").
    # These settings are harmless on a direct connection. The request path's
    # single statements (app.db.single_statements) count on the cache being
    # off: asyncpg then parses its unnamed statement again with every Bind.
    connect_args: dict[str, Any] = {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": _unique_statement_name,
    }
    extra: dict[str, Any] = (
        {"poolclass": NullPool}
        if for_migrations
        else {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
    )
    return _create_async_engine(
        url,
        connect_args=connect_args,
        pool_pre_ping=pre_ping,
        json_deserializer=json_loads,
        **extra,
    )


def _sqlite_engine(url: URL, *, foreign_keys: bool) -> AsyncEngine:
    # No pre-ping: a SQLite connection is a file opened by this process and
    # cannot drop the way a server connection can, and the ping would be one
    # more statement (a round trip to aiosqlite's thread) per transaction.
    engine = _create_async_engine(
        url,
        module=OneHopAiosqlite(),
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW,
        json_deserializer=json_loads,
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # WAL lets readers run while one writer writes; busy_timeout makes a
        # second writer wait for the lock instead of failing at once.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.close()
        # The sqlite3 driver would not BEGIN before a SELECT, so reads ran
        # outside the transaction (no consistent snapshot, broken savepoints).
        # Take transaction control away from it and BEGIN ourselves below.
        dbapi_connection.isolation_level = None

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN")

    return engine


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    # Objects stay readable after commit: handlers commit, then build responses.
    return async_sessionmaker(engine, expire_on_commit=False)
