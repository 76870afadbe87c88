"""Alembic environment: run by app.db.migrations, never with a URL from a file.

The URL arrives in `config.attributes["database_url"]`. Postgres migrations
must use a direct connection (MIGRATION_DATABASE_URL), not pgbouncer's
transaction pool: DDL and Alembic's version bookkeeping want one session.

One migration runs at a time per database: replicas that each migrate at
start (the container image does) queue on a lock, and every one after the
first finds the schema current and does nothing. Without it, two at once
both created the first table and one failed ("already exists").
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.engine.url import URL

from app.db.engine import create_engine, normalize_url
from app.db.models import Base

config = context.config
target_metadata = Base.metadata


def _database_url() -> str:
    url = config.attributes.get("database_url")
    if not url:
        raise RuntimeError(
            "no database URL given: run migrations with `teleuploader migrate` "
            "(app.db.migrations.upgrade), not with the alembic command"
        )
    return str(url)


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        **kwargs,  # type: ignore[arg-type]
    )


#: The key of Postgres' advisory lock that migrations hold (any constant
#: works; this one reads "teleupld").
MIGRATION_LOCK_KEY = 0x74656C6575706C64


def _run_with(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        # A session-level lock, held until the connection closes (the
        # migration engine has no pool: at the end of this run). Committed
        # at once, so that Alembic begins its own transaction after it.
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        connection.commit()
    # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine(_database_url(), for_migrations=True)
    try:
        with _sqlite_file_lock(engine.url):
            async with engine.connect() as connection:
                await connection.run_sync(_run_with)
    finally:
        await engine.dispose()


@contextlib.contextmanager
def _sqlite_file_lock(url: URL) -> Iterator[None]:
    """An exclusive flock(2) on an SQLite database file while it migrates
    (waiting for another process's). SQLite's own locks are POSIX record
    locks, which flock does not touch on Linux: the database works as usual
    meanwhile. A database that does not exist yet is created empty, which
    SQLite takes for a new database."""
    path = url.database if url.get_backend_name() == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _run_offline() -> None:
    url = normalize_url(_database_url())
    _configure(url=url, literal_binds=True, render_as_batch=url.get_backend_name() == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
else:
    asyncio.run(_run_online())
