"""Send intents: a row written before a chunk's send, so that reconciliation
(app/store/reconcile.py) never takes the message of a send still under way
for an orphan, and resolved once the send's outcome is known: in the same
transaction as the row that records the message, or on its own after the
send failed.

The chunk writer, the scrub's repairs and the sealing migration send chunks
the same way and open and resolve their intents here. (Snapshots and the
journal name their chat in the intent: app/store/snapshot.py.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.intents import ANY_CHAT, IntentRepository
from app.db.session import session_scope


class SendIntents:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], owner: str | None) -> None:
        """`owner`: this instance's id; None (some tests) writes no intents."""
        self._sessionmaker = sessionmaker
        self._owner = owner

    async def open(self) -> int | None:
        """Record a send about to start (None: no owner). The dispatcher
        picks the chat at the attempt, so the intent covers every chat."""
        if self._owner is None:
            return None
        async with session_scope(self._sessionmaker) as session:
            return await IntentRepository(session).open(self._owner, ANY_CHAT)

    async def resolve(self, intents: Iterable[int | None]) -> None:
        """After failed sends, in one transaction. Should the database refuse,
        the periodic sweep drops them once no upload that old runs any more."""
        ids = [intent for intent in intents if intent is not None]
        if not ids:
            return
        with contextlib.suppress(Exception):
            async with session_scope(self._sessionmaker) as session:
                for intent in ids:
                    await IntentRepository(session).resolve(intent)
