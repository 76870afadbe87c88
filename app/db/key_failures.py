"""Failed key checks, counted per client and credential in windows that
start at a failure (app/store/key_failures.py has the rule).

One upsert per count, its own statement: no read before the write (SQLite's
write lock is taken at once), and every instance counts into the same row.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import case, delete
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import dialect_name
from app.db.models import KeyCheckFailure

if TYPE_CHECKING:
    from app.db.dialects import UpsertInsert


class KeyFailureRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    def _insert(self) -> UpsertInsert:
        return upsert_insert(dialect_name(self._session), KeyCheckFailure)

    async def count(
        self, client: str, credential: str, *, now: datetime, window: timedelta
    ) -> tuple[int, datetime]:
        """Count one failure: the failures in its window (this one included)
        and when the window began. A row whose window has passed begins a
        new one with this failure."""
        statement = self._insert().values(
            client=client, credential=credential, started_at=now, failures=1
        )
        stale = KeyCheckFailure.started_at <= now - window
        upsert = statement.on_conflict_do_update(
            index_elements=[KeyCheckFailure.client, KeyCheckFailure.credential],
            set_={
                "failures": case((stale, 1), else_=KeyCheckFailure.failures + 1),
                "started_at": case(
                    (stale, statement.excluded.started_at), else_=KeyCheckFailure.started_at
                ),
            },
        ).returning(KeyCheckFailure.failures, KeyCheckFailure.started_at)
        row = (await self._session.execute(upsert)).one()
        return int(row.failures), row.started_at

    async def sweep(self, before: datetime) -> int:
        """Delete the rows whose window began before `before` (passed)."""
        result = await self._session.execute(
            delete(KeyCheckFailure).where(KeyCheckFailure.started_at < before)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]
