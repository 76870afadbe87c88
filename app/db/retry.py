"""Running a transaction again when Postgres aborted it for a conflict.

A deadlock (40P01) or a serialization failure (40001) says nothing about the
request: Postgres chose this transaction as the victim of a race, and the same
work run again succeeds. Lock ordering (app.db.locking, ObjectRepository.put)
keeps them rare; this makes the rare one invisible to the client. Every other
error goes to the caller at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.session import session_scope
from app.kit import jitter

log = structlog.get_logger("app.db.retry")

T = TypeVar("T")

#: How many times a transaction runs before its conflict goes to the caller.
TRANSACTION_ATTEMPTS = 4
#: The longest pause (seconds, jittered, times the attempt) before running again,
#: so the two sides of a deadlock do not meet again at once.
CONFLICT_PAUSE = 0.05

DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"
_CONFLICTS = frozenset({DEADLOCK_DETECTED, SERIALIZATION_FAILURE})


def conflict_sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE if `exc` is a deadlock or serialization failure, else None."""
    if not isinstance(exc, DBAPIError):
        return None
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return sqlstate if sqlstate in _CONFLICTS else None


async def in_transaction(
    sessionmaker: async_sessionmaker[AsyncSession],
    work: Callable[[AsyncSession], Awaitable[T]],
    *,
    attempts: int = TRANSACTION_ATTEMPTS,
) -> T:
    """`work(session)` in one transaction that commits; run again in a fresh
    transaction when Postgres aborts it for a deadlock or serialization
    failure, up to `attempts` times. `work` must have no effect outside the
    database (it may run more than once)."""
    for attempt in range(1, attempts + 1):
        try:
            async with session_scope(sessionmaker) as session:
                return await work(session)
        except DBAPIError as exc:
            sqlstate = conflict_sqlstate(exc)
            if sqlstate is None or attempt == attempts:
                raise
            log.warning(
                "transaction_conflict_retried",
                sqlstate=sqlstate,
                attempt=attempt,
                cause=str(exc.orig).splitlines()[0][:200],
            )
            await asyncio.sleep(jitter.uniform(0, CONFLICT_PAUSE * attempt))
    raise AssertionError("unreachable: the last attempt returns or raises")
