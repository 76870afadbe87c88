from __future__ import annotations

import asyncio

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.db.migrations import (
    MIGRATIONS_DIR,
    SchemaOutOfDate,
    check_schema,
    downgrade,
    head_revision,
    schema_is_current,
    upgrade,
)
from app.db.models import Base
from tests.db.helpers import Database


def test_migration_scripts_are_found_next_to_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert head_revision() == "0001"


async def test_empty_database_fails_check_then_passes_after_upgrade(
    empty_database: Database,
) -> None:
    engine = create_engine(empty_database.url)
    try:
        assert not await schema_is_current(engine)
        with pytest.raises(SchemaOutOfDate) as raised:
            await check_schema(engine)
        assert str(raised.value) == (
            "database schema is at nothing (no tables), code needs 0001: run `teleuploader migrate`"
        )

        await asyncio.to_thread(upgrade, empty_database.migration_url)

        assert await schema_is_current(engine)
        await check_schema(engine)
    finally:
        await engine.dispose()


async def test_downgrade_removes_everything_and_upgrade_restores_it(
    empty_database: Database,
) -> None:
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    await asyncio.to_thread(downgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        tables = await _tables(engine)
        assert tables <= {"alembic_version"}
        with pytest.raises(SchemaOutOfDate):
            await check_schema(engine)
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await _tables(engine) == {*Base.metadata.tables, "alembic_version"}
    finally:
        await engine.dispose()


async def test_migrated_schema_matches_the_models(engine: AsyncEngine) -> None:
    def differences(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        assert await connection.run_sync(differences) == []


async def _tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        return set(await connection.run_sync(lambda c: inspect(c).get_table_names()))
