"""Alembic environment: run by app.db.migrations, never with a URL from a file.

The URL arrives in `config.attributes["database_url"]`. Postgres migrations
must use a direct connection (MIGRATION_DATABASE_URL), not pgbouncer's
transaction pool: DDL and Alembic's version bookkeeping want one session.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

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


def _run_with(connection: Connection) -> None:
    # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine(_database_url(), for_migrations=True)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_with)
    finally:
        await engine.dispose()


def _run_offline() -> None:
    url = normalize_url(_database_url())
    _configure(url=url, literal_binds=True, render_as_batch=url.get_backend_name() == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
else:
    asyncio.run(_run_online())
