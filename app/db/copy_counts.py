"""How many copies of live chunks the given bots hold: what a full scrub
pass on one instance leaves to the instances holding those bots
(app/store/scrub.py)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.locking import batches
from app.db.models import Chunk, ChunkCopy


async def live_copies_of(session: AsyncSession, bot_ids: Iterable[int]) -> int:
    total = 0
    for batch in batches(sorted(set(bot_ids))):
        total += int(
            await session.scalar(
                select(func.count())
                .select_from(ChunkCopy)
                .join(Chunk, Chunk.id == ChunkCopy.chunk_id)
                .where(Chunk.state == "live", ChunkCopy.bot_id.in_(batch))
            )
            or 0
        )
    return total
