"""A transaction Postgres aborted for a conflict runs again; nothing else does."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.retry import TRANSACTION_ATTEMPTS, in_transaction


class PgError(Exception):
    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def conflict(sqlstate: str) -> DBAPIError:
    return DBAPIError("SELECT ... FOR UPDATE", {}, PgError("deadlock detected", sqlstate))


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"], ids=["deadlock", "serialization"])
async def test_a_conflict_runs_the_transaction_again(
    sessionmaker: async_sessionmaker[AsyncSession], sqlstate: str
) -> None:
    runs = 0

    async def work(session: AsyncSession) -> str:
        nonlocal runs
        runs += 1
        if runs < TRANSACTION_ATTEMPTS:
            raise conflict(sqlstate)
        return "done"

    assert await in_transaction(sessionmaker, work) == "done"
    assert runs == TRANSACTION_ATTEMPTS


async def test_a_conflict_that_persists_reaches_the_caller(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    runs = 0

    async def work(session: AsyncSession) -> None:
        nonlocal runs
        runs += 1
        raise conflict("40P01")

    with pytest.raises(DBAPIError):
        await in_transaction(sessionmaker, work)
    assert runs == TRANSACTION_ATTEMPTS


async def test_other_errors_are_not_retried(sessionmaker: async_sessionmaker[AsyncSession]) -> None:
    runs = 0

    async def work(session: AsyncSession) -> None:
        nonlocal runs
        runs += 1
        raise IntegrityError("INSERT", {}, PgError("duplicate key", "23505"))

    with pytest.raises(IntegrityError):
        await in_transaction(sessionmaker, work)
    assert runs == 1
