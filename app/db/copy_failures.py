"""Reads and checks Telegram could not serve, per copy (`copy_failures`).

What they add up to is decided in app/store/copy_failures.py; here only
the counting, each method one short transaction of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Integer, delete, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import dialect_name, lock_database_for_write
from app.db.models import ChunkCopy, CopyFailure
from app.db.types import UtcDateTime


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """A copy's failures so far: how many were counted, the first and the last."""

    failures: int
    first_at: datetime
    last_at: datetime


class CopyFailureRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def record(self, copy_id: int, now: datetime, spacing: timedelta) -> FailureRecord | None:
        """Count a failure of the copy, unless the last counted one is less
        than `spacing` ago (one outage met by many reads is one failure);
        the record as it stands. None: the copy is gone."""
        await lock_database_for_write(self._session)
        insert = (
            upsert_insert(dialect_name(self._session), CopyFailure)
            .from_select(
                ["copy_id", "first_at", "last_at", "failures"],
                select(
                    ChunkCopy.id,
                    literal(now, UtcDateTime),
                    literal(now, UtcDateTime),
                    literal(0, Integer),
                ).where(ChunkCopy.id == copy_id),
            )
            .on_conflict_do_nothing(index_elements=[CopyFailure.copy_id])
        )
        await self._session.execute(insert)
        row = (
            await self._session.execute(
                select(CopyFailure.failures, CopyFailure.first_at, CopyFailure.last_at)
                .where(CopyFailure.copy_id == copy_id)
                .with_for_update()
            )
        ).first()
        if row is None:
            return None
        failures, first_at, last_at = row
        if failures > 0 and now - last_at < spacing:
            return FailureRecord(failures, first_at, last_at)
        first_at = now if failures == 0 else first_at
        await self._session.execute(
            update(CopyFailure)
            .where(CopyFailure.copy_id == copy_id)
            .values(failures=failures + 1, first_at=first_at, last_at=now)
            .execution_options(synchronize_session=False)
        )
        return FailureRecord(failures + 1, first_at, now)

    async def clear(self, copy_id: int) -> bool:
        """The copy was served: its failures are forgotten. True if it had some."""
        result = await self._session.execute(
            delete(CopyFailure)
            .where(CopyFailure.copy_id == copy_id)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]
