"""Each storage chat's fill, kept in the database: what this instance's posts
were answered (the dispatcher's ChatFill, app/telegram/chat_fill.py) goes
there every few seconds in one statement, and what every other instance's
did comes back in the same transaction. So several instances and restarts
agree on how full a chat is, at no cost per chunk: a post's reply carries
its message id, and the database hears of it in batches.

Between two rounds another instance may post a few more messages into a chat
this one already fills up: CHAT_MESSAGE_LIMIT is a ceiling with room to
spare (half the count past which others lost files), not an exact one.
"""

from __future__ import annotations

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chat_fill import ChatFillRepository
from app.db.session import session_scope
from app.kit.periodic import Periodic
from app.telegram.chat_fill import ChatFill

log = structlog.get_logger("app.store.chat_fill")

#: Seconds between two rounds.
SYNC_INTERVAL = 5.0


class ChatFillSync:
    """Keeps a ChatFill and the `chat_fill` table in step."""

    def __init__(
        self,
        fill: ChatFill,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        interval: float = SYNC_INTERVAL,
    ) -> None:
        self.fill = fill
        self._sessionmaker = sessionmaker
        self.loop = Periodic("chat_fill", self.round, interval=interval)
        self._full: set[int] = set()

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        # What the last posts raised, before the process goes (best effort:
        # the next post into the chat raises it again).
        try:
            await self.round()
        except Exception as exc:
            log.warning("chat_fill_not_saved", error=f"{type(exc).__name__}: {exc}")

    async def load(self) -> None:
        """What the database knows, before the first write (best effort: the
        loop's rounds try again)."""
        try:
            await self.round()
        except Exception as exc:
            log.warning("chat_fill_not_loaded", error=f"{type(exc).__name__}: {exc}")

    async def round(self) -> None:
        unsaved = self.fill.take_unsaved()
        try:
            async with session_scope(self._sessionmaker) as session:
                repo = ChatFillRepository(session)
                await repo.raise_to(unsaved)
                known = await repo.all()
        except BaseException:
            self.fill.put_back(unsaved)
            raise
        self.fill.learn(known)
        self._report_full()

    def _report_full(self) -> None:
        """One line when a chat fills up (and when none is left)."""
        full = {chat for chat in self.fill.newest if self.fill.full(chat)}
        for chat_id in sorted(full - self._full):
            log.error(
                "storage_chat_full",
                chat_id=chat_id,
                messages=self.fill.newest[chat_id],
                limit=self.fill.limit,
                open_chats=len(self.fill.open_chats(self.fill.newest)),
                detail="it takes no new writes; the other storage chats carry on "
                '(deploy/README.md, "Adding a storage chat")',
            )
        self._full = full
