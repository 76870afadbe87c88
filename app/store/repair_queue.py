"""Which short chunks the scrub's repairs take next (app/store/scrub.py).

Fewest intact copies first, on from where the round before stopped, so a
chunk whose repair fails waits for its turn again and never holds the
others back (before, every round took the same first twenty: twenty lost
chunks stopped every repair for good). Left out:

* sealed chunks this instance cannot open (the query leaves them out): under
  a customer key (SSE-C; never kept), or a master key not configured here;
* lost chunks a repair here found unreadable, until their state changes: a
  check that finds a copy intact again (the chunk is no longer lost), or a
  loss after such a return (another `lost_at`). Each is tried once first:
  a copy taken for missing because its bot was revoked still reads through
  another bot's forward.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copies import CopyRepository, ShortChunk
from app.db.session import session_scope


class RepairQueue:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        replicas: int,
        key_ids: tuple[str, ...],
    ) -> None:
        self._sessionmaker = sessionmaker
        self._replicas = replicas
        self._key_ids = key_ids
        # Where the next round goes on (None: from the first).
        self.cursor: ShortChunk | None = None
        # Lost chunks found unreadable: their `lost_at` then.
        self._unreadable: dict[int, datetime] = {}

    async def take(
        self, limit: int, after: ShortChunk | None
    ) -> tuple[list[int], ShortChunk | None]:
        """Up to `limit` chunks to repair past `after`, and where the next
        take goes on (None: this one reached the end)."""
        chosen: list[int] = []
        while True:
            async with session_scope(self._sessionmaker) as session:
                page = await CopyRepository(session).needing_repair(
                    self._replicas, limit, after=after, key_ids=self._key_ids
                )
            for short in page:
                after = short
                if not self._still_unreadable(short):
                    chosen.append(short.id)
                    if len(chosen) == limit:
                        return chosen, after
            if len(page) < limit:
                return chosen, None

    async def found_unreadable(self, chunk_id: int) -> None:
        """A repair read none of the chunk's copies: left out while it stays
        lost as it is now (one that is not lost failed for another reason,
        and is tried again)."""
        async with session_scope(self._sessionmaker) as session:
            lost_at = await CopyRepository(session).lost_since(chunk_id)
        if lost_at is not None:
            self._unreadable[chunk_id] = lost_at

    def _still_unreadable(self, short: ShortChunk) -> bool:
        seen = self._unreadable.get(short.id)
        if seen is None:
            return False
        if short.lost_at == seen:
            return True
        del self._unreadable[short.id]  # its state changed: tried again
        return False
