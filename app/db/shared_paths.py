"""File paths asked for by one instance and answered by the bot's holder.

Every method is one statement in its own short transaction (pgbouncer's
transaction pooling keeps no session state). A row is a question while its
`file_path` is empty or expired, and an answer until `expires_at`.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import dialect_name
from app.db.models import SharedFilePath

if TYPE_CHECKING:
    from app.db.dialects import UpsertInsert


class SharedPathRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    def _insert(self) -> UpsertInsert:
        return upsert_insert(dialect_name(self._session), SharedFilePath)

    async def ask(self, bot_id: int, file_id: str, now: datetime) -> str | None:
        """Ask the holder of `bot_id` for the file's path. Returns the path
        at once if a holder answered before and it is still valid."""
        statement = self._insert().values(
            bot_id=bot_id, file_id=file_id, requested_at=now, file_path=None, expires_at=None
        )
        # An answer kept: still valid, it is returned; expired, the row is a
        # question again (see `questions`).
        upsert = statement.on_conflict_do_update(
            index_elements=[SharedFilePath.bot_id, SharedFilePath.file_id],
            set_={"requested_at": statement.excluded.requested_at},
        ).returning(SharedFilePath.file_path, SharedFilePath.expires_at)
        row = (await self._session.execute(upsert)).first()
        if row is None or row.file_path is None or row.expires_at is None:
            return None
        return row.file_path if row.expires_at > now else None

    async def answer_of(self, bot_id: int, file_id: str, now: datetime) -> str | None:
        """The holder's answer, if it came and is still valid."""
        path = await self._session.scalar(
            select(SharedFilePath.file_path).where(
                SharedFilePath.bot_id == bot_id,
                SharedFilePath.file_id == file_id,
                SharedFilePath.expires_at > now,
            )
        )
        return path

    async def questions(
        self, bot_ids: Collection[int], now: datetime, asked_since: datetime, limit: int
    ) -> list[tuple[int, str]]:
        """Unanswered questions about these bots, asked since `asked_since`."""
        if not bot_ids:
            return []
        rows = await self._session.execute(
            select(SharedFilePath.bot_id, SharedFilePath.file_id)
            .where(
                SharedFilePath.bot_id.in_(bot_ids),
                SharedFilePath.requested_at >= asked_since,
                or_(SharedFilePath.expires_at.is_(None), SharedFilePath.expires_at <= now),
            )
            .order_by(SharedFilePath.requested_at)
            .limit(limit)
        )
        return [(bot_id, file_id) for bot_id, file_id in rows]

    async def answer(
        self, bot_id: int, file_id: str, file_path: str, expires_at: datetime, now: datetime
    ) -> None:
        """Record a path this instance got (for a question, or for its own
        read: the next instance asking finds it at once)."""
        statement = self._insert().values(
            bot_id=bot_id,
            file_id=file_id,
            requested_at=now,
            file_path=file_path,
            expires_at=expires_at,
        )
        await self._session.execute(
            statement.on_conflict_do_update(
                index_elements=[SharedFilePath.bot_id, SharedFilePath.file_id],
                set_={"file_path": file_path, "expires_at": expires_at},
            )
        )

    async def forget(self, bot_id: int, file_id: str) -> None:
        """Drop the path kept for the file (the file server no longer has it)."""
        await self._session.execute(
            delete(SharedFilePath).where(
                SharedFilePath.bot_id == bot_id, SharedFilePath.file_id == file_id
            )
        )

    async def prune(self, now: datetime, unanswered_after: timedelta) -> int:
        """Delete expired answers and questions nobody answered in time."""
        result = await self._session.execute(
            delete(SharedFilePath).where(
                or_(
                    SharedFilePath.expires_at <= now,
                    (SharedFilePath.expires_at.is_(None))
                    & (SharedFilePath.requested_at < now - unanswered_after),
                )
            )
        )
        return int(result.rowcount)  # type: ignore[attr-defined]
