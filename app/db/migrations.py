"""Schema migrations (Alembic, configured here rather than in an alembic.ini).

The scripts live in app/migrations/ (env.py, and one file per revision in
versions/; app/migrations/README.md says how to add one). They are package
data: a wheel or sdist carries them, so an installed program migrates
without the checkout.

`upgrade` is synchronous and runs its own event loop (Alembic's env.py calls
asyncio.run): call it from the CLI, or via `asyncio.to_thread` from async code.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"


class SchemaOutOfDate(RuntimeError):
    """The database is not at the schema revision this code was written for."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic Config for our scripts; `url` is what env.py connects to.

    Also the entry point for writing a new migration:
    `alembic.command.revision(alembic_config(url), message=..., autogenerate=True)`.
    """
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(
            f"migration scripts not found at {MIGRATIONS_DIR}: the installation is "
            "incomplete; reinstall TeleUploader"
        )
    config = Config()
    # Config values go through configparser interpolation: escape '%'. The
    # URL (which may hold a password with '%') travels in `attributes` instead.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    if url is not None:
        config.attributes["database_url"] = url
    return config


@functools.cache
def head_revision() -> str:
    """The revision the code needs (read once: the scripts do not change
    while the process runs, and reading them costs tens of milliseconds)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("no migration scripts found")
    return head


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` to `revision`. Use a direct Postgres URL, not pgbouncer."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def _current_revisions(connection: Connection) -> tuple[str, ...]:
    return tuple(MigrationContext.configure(connection).get_current_heads())


async def current_revisions(engine: AsyncEngine) -> tuple[str, ...]:
    """The revisions recorded in the database; empty for an unmigrated one."""
    async with engine.connect() as connection:
        return await connection.run_sync(_current_revisions)


async def schema_is_current(engine: AsyncEngine) -> bool:
    return await current_revisions(engine) == (head_revision(),)


async def check_schema(engine: AsyncEngine) -> None:
    """Raise SchemaOutOfDate unless the database is at the code's revision.

    Startup calls this instead of migrating: migrations need the direct
    connection and an operator's decision, and a failure must be loud.
    """
    current = await current_revisions(engine)
    head = head_revision()
    if current != (head,):
        shown = ", ".join(current) if current else "nothing (no tables)"
        raise SchemaOutOfDate(
            f"database schema is at {shown}, code needs {head}: run `teleuploader migrate`"
        )
