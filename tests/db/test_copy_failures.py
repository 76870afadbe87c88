"""Counting the failures of a copy (app/db/copy_failures.py) and the rule
that makes a copy missing from them (app/store/copy_failures.py), on both
backends: the count is in the database so that restarts and every
instance add to the same one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copy_failures import CopyFailureRepository
from app.db.models import ChunkCopy, CopyFailure
from app.db.session import session_scope
from app.store.copy_failures import CopyFailures, MissingRule
from tests.db.test_copies import two_copy_object

Sessions = async_sessionmaker[AsyncSession]
START = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


class Clock:
    """The time the rule is told; tests move it."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


async def test_a_copy_is_missing_after_three_failures_spread_over_an_hour(
    sessionmaker: Sessions,
) -> None:
    _chunk, (copy_id, _other) = await two_copy_object(sessionmaker)
    clock = Clock()
    failures = CopyFailures(sessionmaker, MissingRule(), clock=clock)

    verdicts = [await failures.failed(copy_id)]  # 12:00
    clock.advance(minutes=5)
    # Within 10 minutes of the last one: the same outage, not counted.
    verdicts.append(await failures.failed(copy_id))
    clock.advance(minutes=25)
    verdicts.append(await failures.failed(copy_id))  # 12:30, the second
    clock.advance(minutes=20)
    verdicts.append(await failures.failed(copy_id))  # 12:50, the third: not an hour yet
    clock.advance(minutes=10)
    verdicts.append(await failures.failed(copy_id))  # 13:00, an hour since the first

    assert verdicts == [False, False, False, False, True]
    async with session_scope(sessionmaker) as session:
        row = (await session.execute(select(CopyFailure))).scalar_one()
    assert (row.failures, row.first_at, row.last_at) == (4, START, START + timedelta(hours=1))


async def test_a_copy_served_in_between_starts_the_count_again(sessionmaker: Sessions) -> None:
    _chunk, (copy_id, _other) = await two_copy_object(sessionmaker)
    clock = Clock()
    failures = CopyFailures(sessionmaker, MissingRule(), clock=clock)
    for _ in range(3):
        assert not await failures.failed(copy_id)
        clock.advance(minutes=25)
    assert failures.may_be_failing(copy_id)

    await failures.served(copy_id)
    clock.advance(minutes=25)

    # 75 minutes and four failures since the first, but one was served since.
    assert not await failures.failed(copy_id)
    async with session_scope(sessionmaker) as session:
        row = (await session.execute(select(CopyFailure))).scalar_one()
    assert (row.failures, row.first_at) == (1, START + timedelta(minutes=100))


async def test_instances_add_to_one_count_and_none_is_kept_for_a_copy_that_went(
    sessionmaker: Sessions,
) -> None:
    """Two instances (two CopyFailures) counting at once: each failure is
    counted once, whoever sees it; a copy deleted meanwhile has none."""
    _chunk, (copy_id, other) = await two_copy_object(sessionmaker)
    rule = MissingRule(failures=4, span=timedelta(0), spacing=timedelta(0))
    clocks = [Clock(), Clock()]
    instances = [CopyFailures(sessionmaker, rule, clock=clock) for clock in clocks]

    verdicts = await asyncio.gather(*(instance.failed(copy_id) for instance in instances * 2))

    assert sorted(verdicts) == [False, False, False, True]
    async with session_scope(sessionmaker) as session:
        await session.execute(delete(ChunkCopy).where(ChunkCopy.id == other))
    assert not await instances[0].failed(other)
    async with session_scope(sessionmaker) as session:
        assert await CopyFailureRepository(session).clear(other) is False
        await session.execute(delete(ChunkCopy).where(ChunkCopy.id == copy_id))
        # The failures go with their copy.
        assert list(await session.scalars(select(CopyFailure.copy_id))) == []
