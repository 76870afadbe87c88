from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import (
    MIGRATIONS_DIR,
    SchemaOutOfDate,
    check_schema,
    downgrade,
    head_revision,
    schema_is_current,
    upgrade,
)
from app.db.models import Base, Chunk, GcEntry, UploadPart
from app.db.repositories import MultipartRepository, ObjectRepository, PieceSpec
from app.db.session import session_scope
from app.db.spool import SpoolRepository
from tests.db.helpers import Database, add_chunks, spec, whole_chunks


def test_migration_scripts_are_found_next_to_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert head_revision() == "0004"


async def test_empty_database_fails_check_then_passes_after_upgrade(
    empty_database: Database,
) -> None:
    engine = create_engine(empty_database.url)
    try:
        assert not await schema_is_current(engine)
        with pytest.raises(SchemaOutOfDate) as raised:
            await check_schema(engine)
        assert str(raised.value) == (
            "database schema is at nothing (no tables), code needs 0004: run `teleuploader migrate`"
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


async def test_downgrade_below_multipart_ledgers_the_chunks_only_uploads_used(
    empty_database: Database,
) -> None:
    """Without part_pieces nothing would reference them, and nothing would delete them."""
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        sessionmaker = create_sessionmaker(engine)
        shared, in_part, in_object, pending = await add_chunks(sessionmaker, [100, 10, 20, 30])
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("k", whole_chunks([shared, in_object])))
            multipart = MultipartRepository(session)
            upload = await multipart.create(
                bucket="bucket", key="big", content_type="text/plain", user_metadata={}
            )
            await multipart.put_part(
                upload.id,
                1,
                size=60,
                etag='"x"',
                pieces=[PieceSpec(shared.id, 50, 50), *whole_chunks([in_part])],
            )
        await engine.dispose()

        await asyncio.to_thread(downgrade, empty_database.migration_url, "0001")

        async with session_scope(sessionmaker) as session:
            remaining = set(await session.scalars(select(Chunk.id)))
            (entry,) = (await session.scalars(select(GcEntry))).all()
        assert remaining == {shared.id, in_object.id, pending.id}
        assert (entry.message_id, entry.reason, entry.attempts) == (
            in_part.message_id,
            "aborted",
            0,
        )
        assert abs(entry.enqueued_at - datetime.now(UTC)) < timedelta(minutes=1)
        assert entry.next_attempt_at == entry.enqueued_at
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await schema_is_current(engine)
    finally:
        await engine.dispose()


async def test_downgrade_below_the_spool_drops_the_parts_it_held(
    empty_database: Database,
) -> None:
    """A spooled part has no bytes in Telegram: without its spool row it would
    be an empty shell, so it goes and Complete asks the client for it again."""
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        sessionmaker = create_sessionmaker(engine)
        (chunk,) = await add_chunks(sessionmaker, [10])
        async with session_scope(sessionmaker) as session:
            multipart = MultipartRepository(session)
            upload = await multipart.create(
                bucket="bucket", key="big", content_type="text/plain", user_metadata={}
            )
            await multipart.put_part(
                upload.id, 1, size=10, etag='"x"', pieces=whole_chunks([chunk])
            )
            await SpoolRepository(session).put(
                upload.id,
                2,
                size=5,
                etag='"y"',
                path="i/p.part",
                owner="i",
                bucket="bucket",
                key="big",
            )
        await engine.dispose()

        await asyncio.to_thread(downgrade, empty_database.migration_url, "0002")

        async with session_scope(sessionmaker) as session:
            parts = (await session.execute(select(UploadPart.part_number))).scalars().all()
        assert parts == [1]
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await schema_is_current(engine)
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
