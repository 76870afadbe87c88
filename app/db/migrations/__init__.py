"""Schema migrations (Alembic, configured here rather than in an alembic.ini).

The scripts live beside this module (env.py, and one file per revision in
versions/; README.md here says how to add one). They are package
data: a wheel or sdist carries them, so an installed program migrates
without the checkout.

Alembic is imported only to migrate (`upgrade`, `downgrade`,
`alembic_config`). Checking the schema, which every `serve` and `keys` does,
reads the revision table and the scripts' revision ids itself: Alembic, its
template engine and its dialect modules are ~8 MiB of an idle server's
memory (bench/README.md, idle_rss_bench.py). tests/db/test_migrations.py checks
that both ways find the same head.

`upgrade` is synchronous and runs its own event loop (Alembic's env.py calls
asyncio.run): call it from the CLI, or via `asyncio.to_thread` from async code.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent
#: Where Alembic records the revision a database is at (its default name,
#: which env.py keeps).
VERSION_TABLE = "alembic_version"


class SchemaOutOfDate(RuntimeError):
    """The database is not at the schema revision this code was written for."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic Config for our scripts; `url` is what env.py connects to.

    Also the entry point for writing a new migration:
    `alembic.command.revision(alembic_config(url), message=..., autogenerate=True)`.
    """
    from alembic.config import Config

    _require_scripts()
    config = Config()
    # Config values go through configparser interpolation: escape '%'. The
    # URL (which may hold a password with '%') travels in `attributes` instead.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    if url is not None:
        config.attributes["database_url"] = url
    return config


def _require_scripts() -> None:
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(
            f"migration scripts not found at {MIGRATIONS_DIR}: the installation is "
            "incomplete; reinstall TeleUploader"
        )


@functools.cache
def head_revision() -> str:
    """The revision the code needs (read once: the scripts do not change
    while the process runs)."""
    _require_scripts()
    return script_head(MIGRATIONS_DIR / "versions")


def script_head(versions: Path) -> str:
    """The one revision of the scripts in `versions` that no other revises.

    Read as Alembic reads a script's `revision` and `down_revision` (None,
    one id, or several for a merge), without running the scripts: they import
    Alembic. Several heads (two migrations written on two branches, not yet
    merged) are an error here as in Alembic.
    """
    revises: dict[str, tuple[str, ...]] = {}
    for path in sorted(versions.glob("*.py")):
        if path.name.startswith("_"):
            continue
        values = _module_constants(path, ("revision", "down_revision"))
        revision = values.get("revision")
        if not isinstance(revision, str):
            continue
        down = values.get("down_revision")
        if isinstance(down, str):
            revises[revision] = (down,)
        elif isinstance(down, tuple | list):
            revises[revision] = tuple(str(each) for each in down)
        else:
            revises[revision] = ()
    if not revises:
        raise RuntimeError(f"no migration scripts found in {versions}")
    revised = {down for downs in revises.values() for down in downs}
    heads = sorted(set(revises) - revised)
    if len(heads) != 1:
        raise RuntimeError(
            f"the migration scripts in {versions} have {len(heads)} heads "
            f"({', '.join(heads) or 'a cycle'}): merge them into one"
        )
    return heads[0]


def _module_constants(path: Path, names: tuple[str, ...]) -> dict[str, object]:
    """The literal values assigned to `names` at the top level of `path`."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in names:
                found[target.id] = ast.literal_eval(value)
    return found


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` to `revision`. Use a direct Postgres URL, not pgbouncer."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def _current_revisions(connection: Connection) -> tuple[str, ...]:
    # What Alembic's MigrationContext.get_current_heads reads: no table is no
    # revision (never migrated), as is an empty one (downgraded to base).
    if not inspect(connection).has_table(VERSION_TABLE):
        return ()
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
    return tuple(str(revision) for revision in rows.scalars())


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
