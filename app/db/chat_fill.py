"""How full each storage chat is: the newest message id seen there
(app/telegram/chat_fill.py says why that is the count)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import case, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import dialect_name
from app.db.models import ChatFill
from app.db.types import utcnow


class ChatFillRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def raise_to(self, newest: Mapping[int, int]) -> None:
        """Each chat's count up to the id given, never down: instances that
        saw different posts agree on the highest."""
        if not newest:
            return
        now = utcnow()
        insert = upsert_insert(dialect_name(self._session), ChatFill)
        statement = insert.values(
            [
                {"chat_id": chat_id, "newest_message_id": message_id, "updated_at": now}
                for chat_id, message_id in sorted(newest.items())
            ]
        )
        higher = statement.excluded.newest_message_id > ChatFill.newest_message_id
        statement = statement.on_conflict_do_update(
            index_elements=[ChatFill.chat_id],
            set_={
                "newest_message_id": case(
                    (higher, statement.excluded.newest_message_id),
                    else_=ChatFill.newest_message_id,
                ),
                "updated_at": now,
            },
        )
        await self._session.execute(statement)

    async def all(self) -> dict[int, int]:
        """Every chat's count."""
        rows = await self._session.execute(select(ChatFill.chat_id, ChatFill.newest_message_id))
        return {int(chat_id): int(newest) for chat_id, newest in rows}
