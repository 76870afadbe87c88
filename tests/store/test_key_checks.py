"""Refusing bogus API keys from memory: one query per key per TTL, bounded
memory, and nothing that delays a real key (SQLite and Postgres)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.session import session_scope
from app.store.key_checks import KeyChecks
from tests.db.helpers import key_queries

Sessions = async_sessionmaker[AsyncSession]
BOGUS = "tu_" + "b" * 43


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def create_key(sessionmaker: Sessions, name: str) -> str:
    async with session_scope(sessionmaker) as session:
        _key, plaintext = await ApiKeyRepository(session).create(name, scope="read")
    return plaintext


async def test_a_refusal_is_remembered_for_the_ttl_then_asked_again(
    sessionmaker: Sessions,
) -> None:
    clock = Clock()
    checks = KeyChecks(sessionmaker, ttl=5.0, clock=clock)

    with key_queries() as first:
        assert await checks.verify(BOGUS) is None
    clock.now += 4.9
    with key_queries() as within_ttl:
        assert await checks.verify(BOGUS) is None
    clock.now += 0.1
    with key_queries() as after_ttl:
        assert await checks.verify(BOGUS) is None

    assert (len(first), len(within_ttl), len(after_ttl)) == (1, 0, 1)


async def test_a_flood_of_distinct_bogus_keys_keeps_at_most_the_bound(
    sessionmaker: Sessions,
) -> None:
    checks = KeyChecks(sessionmaker, ttl=60.0, max_refused=100, clock=Clock())

    results = [await checks.verify(f"tu_flood_{n}") for n in range(1000)]

    assert results == [None] * 1000
    assert checks.refused_count == 100
    # The most recent refusals are the ones kept.
    with key_queries() as recent:
        assert await checks.verify("tu_flood_999") is None
    with key_queries() as forgotten:
        assert await checks.verify("tu_flood_0") is None
    assert (len(recent), len(forgotten)) == (0, 1)


async def test_concurrent_requests_with_one_key_share_one_lookup(sessionmaker: Sessions) -> None:
    # ttl=0: nothing is remembered, so only the sharing can save queries.
    checks = KeyChecks(sessionmaker, ttl=0.0)

    with key_queries() as queries:
        results = await asyncio.gather(*(checks.verify(BOGUS) for _ in range(50)))

    assert results == [None] * 50
    assert len(queries) == 1
    assert checks.refused_count == 0


async def test_real_keys_are_not_delayed_and_revocation_takes_effect_at_once(
    sessionmaker: Sessions,
) -> None:
    checks = KeyChecks(sessionmaker, ttl=60.0, clock=Clock())
    assert await checks.verify(BOGUS) is None
    plaintext = await create_key(sessionmaker, "new")

    found = await checks.verify(plaintext)

    assert found is not None and found.name == "new"
    async with session_scope(sessionmaker) as session:
        assert await ApiKeyRepository(session).revoke("new")
    # Accepted keys are never remembered: the next request asks again.
    assert await checks.verify(plaintext) is None


async def test_a_database_error_is_not_remembered(tmp_path: Path) -> None:
    # A database without the schema: every lookup fails ("no such table").
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    checks = KeyChecks(create_sessionmaker(engine), ttl=60.0)
    try:
        for _ in range(2):
            with pytest.raises(OperationalError):
                await checks.verify(BOGUS)
        assert checks.refused_count == 0
    finally:
        await engine.dispose()
