from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.engine import POOL_OVERFLOW, POOL_SIZE, create_engine, normalize_url
from app.db.models import ApiKey, Chunk
from app.db.session import session_scope


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgres://u:p@h:5432/db", "postgresql+asyncpg://u:p@h:5432/db"),
        ("postgresql://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("sqlite:///./x.db", "sqlite+aiosqlite:///./x.db"),
        ("sqlite+aiosqlite:////tmp/x.db", "sqlite+aiosqlite:////tmp/x.db"),
    ],
)
def test_normalize_url_picks_async_drivers(given: str, expected: str) -> None:
    assert normalize_url(given).render_as_string(hide_password=False) == expected


def test_normalize_url_refuses_other_databases() -> None:
    with pytest.raises(ValueError, match="unsupported database URL"):
        normalize_url("mysql://u@h/db")


async def test_sqlite_connections_use_wal_foreign_keys_and_busy_timeout(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/pragmas.db")
    try:
        async with engine.connect() as connection:
            assert await connection.scalar(text("PRAGMA journal_mode")) == "wal"
            assert await connection.scalar(text("PRAGMA foreign_keys")) == 1
            assert await connection.scalar(text("PRAGMA busy_timeout")) == 5000
    finally:
        await engine.dispose()


async def test_every_pooled_sqlite_connection_has_a_bounded_page_cache(tmp_path: Path) -> None:
    # SQLite's page cache (2 MiB by default) fills with the database, per
    # connection: a pool of 15 held up to 30 MiB more as the file grew.
    engine = create_engine(f"sqlite:///{tmp_path}/cache.db")
    try:
        async with contextlib.AsyncExitStack() as stack:
            connections = [
                await stack.enter_async_context(engine.connect())
                for _ in range(POOL_SIZE + POOL_OVERFLOW)
            ]
            raws = {id((await c.get_raw_connection()).driver_connection) for c in connections}
            assert len(raws) == POOL_SIZE + POOL_OVERFLOW
            sizes = [await c.scalar(text("PRAGMA cache_size")) for c in connections]
        assert sizes == [-512] * (POOL_SIZE + POOL_OVERFLOW)
    finally:
        await engine.dispose()


async def test_sqlite_reads_happen_inside_the_transaction(tmp_path: Path) -> None:
    # The sqlite3 driver alone would run a SELECT outside any transaction.
    engine = create_engine(f"sqlite:///{tmp_path}/begin.db")
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
            raw = await connection.get_raw_connection()
            assert raw.driver_connection is not None
            assert raw.driver_connection.in_transaction
    finally:
        await engine.dispose()


async def test_timestamps_come_back_aware_utc(session: AsyncSession) -> None:
    moscow = timezone(timedelta(hours=3))
    chunk = Chunk(
        size=1,
        sha256="0" * 64,
        state="pending",
        created_at=datetime(2026, 1, 1, 15, 0, tzinfo=moscow),
    )
    session.add(chunk)
    await session.commit()
    session.expunge_all()
    loaded = await session.get(Chunk, chunk.id)
    assert loaded is not None
    assert loaded.created_at == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert loaded.created_at.utcoffset() == timedelta(0)


async def test_naive_timestamps_are_refused(session: AsyncSession) -> None:
    session.add(Chunk(size=1, sha256="0" * 64, created_at=datetime(2026, 1, 1)))
    with pytest.raises(Exception, match="naive datetime"):
        await session.flush()


async def test_session_scope_commits_or_rolls_back(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    async with session_scope(sessionmaker) as session:
        session.add(ApiKey(name="kept", prefix="tu_kept", key_hash="1" * 64, scope="admin"))
    with pytest.raises(RuntimeError, match="boom"):
        async with session_scope(sessionmaker) as session:
            session.add(ApiKey(name="lost", prefix="tu_lost", key_hash="2" * 64, scope="admin"))
            await session.flush()
            raise RuntimeError("boom")
    async with session_scope(sessionmaker) as session:
        names = (await session.scalars(select(ApiKey.name))).all()
    assert names == ["kept"]
