"""Send intents and chat watermarks (app/db/intents.py), on both backends:
which ids a reconciliation ledgers, how the watermark moves, and how a dead
instance is claimed once."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import ChunkRepository
from app.db.gc import GcRepository
from app.db.intents import IntentRepository, WatermarkRepository
from app.db.models import ChatWatermark, GcEntry, Instance, SendIntent
from app.db.session import session_scope
from app.db.types import utcnow
from tests.db.helpers import CHAT_ID, document

Sessions = async_sessionmaker[AsyncSession]


async def ledgered(sessionmaker: Sessions) -> list[int]:
    async with session_scope(sessionmaker) as session:
        return sorted(await session.scalars(select(GcEntry.message_id)))


async def mark_of(sessionmaker: Sessions) -> ChatWatermark:
    async with session_scope(sessionmaker) as session:
        mark = await session.get(ChatWatermark, CHAT_ID)
    assert mark is not None
    return mark


async def unclean_chat_at(sessionmaker: Sessions, message_id: int) -> None:
    async with session_scope(sessionmaker) as session:
        marks = WatermarkRepository(session)
        await marks.ensure(CHAT_ID, message_id + 1)
        await marks.mark_unclean([CHAT_ID])


async def test_reconcile_ledgers_only_ids_no_row_holds_in_batches(sessionmaker: Sessions) -> None:
    await unclean_chat_at(sessionmaker, 10)
    started = utcnow()
    async with session_scope(sessionmaker) as session:
        chunks = ChunkRepository(session)
        for message_id in (12, 15):
            await chunks.add_pending(replace(document(), message_id=message_id), "0" * 64)
        await GcRepository(session).add(
            bot_id=1, chat_id=CHAT_ID, message_id=13, file_unique_id="u", reason="deleted"
        )
        # Another chat's rows hold nothing here.
        await chunks.add_pending(replace(document(), chat_id=-1, message_id=14), "0" * 64)

    rounds = []
    reached = False
    while not reached:
        async with session_scope(sessionmaker) as session:
            count, reached = await WatermarkRepository(session).reconcile(
                CHAT_ID, 20, covers_marks_until=started, limit=3
            )
        rounds.append(count)

    # (10, 20): 11..19; 12 and 15 are chunks, 13 is in the ledger already.
    assert await ledgered(sessionmaker) == [11, 13, 14, 16, 17, 18, 19]
    assert rounds == [1, 2, 3]  # 11-13, 14-16, then 17-19 reaches the probe
    mark = await mark_of(sessionmaker)
    assert (mark.message_id, mark.unclean_since) == (20, None)


async def test_a_death_marked_during_the_reconciliation_keeps_the_chat_unclean(
    sessionmaker: Sessions,
) -> None:
    await unclean_chat_at(sessionmaker, 10)
    started = utcnow() - timedelta(minutes=1)  # the mark came after this round began

    async with session_scope(sessionmaker) as session:
        count, reached = await WatermarkRepository(session).reconcile(
            CHAT_ID, 12, covers_marks_until=started
        )

    assert (count, reached) == (1, True)
    mark = await mark_of(sessionmaker)
    assert mark.message_id == 12
    assert mark.unclean_since is not None


async def test_the_first_watermark_goes_below_the_sends_still_in_flight(
    sessionmaker: Sessions,
) -> None:
    async with session_scope(sessionmaker) as session:
        intents = IntentRepository(session)
        for _ in range(2):
            await intents.open("me", CHAT_ID)

    async with session_scope(sessionmaker) as session:
        await WatermarkRepository(session).ensure(CHAT_ID, 10)
    async with session_scope(sessionmaker) as session:
        await WatermarkRepository(session).ensure(CHAT_ID, 11)  # taken already: no change

    # Message 10 was recorded first; the two sends in flight may have posted 8 and 9.
    assert (await mark_of(sessionmaker)).message_id == 7


async def test_a_dead_instance_is_claimed_once_with_its_intents(sessionmaker: Sessions) -> None:
    await unclean_chat_at(sessionmaker, 10)
    async with session_scope(sessionmaker) as session:
        await WatermarkRepository(session).reconcile(CHAT_ID, 10, covers_marks_until=utcnow())
        now = utcnow()
        for instance_id in ("dead", "live"):
            session.add(Instance(id=instance_id, host="h", pid=1, started_at=now, heartbeat_at=now))
        intents = IntentRepository(session)
        await intents.open("dead", CHAT_ID)
        kept = await intents.open("live", CHAT_ID)
        await intents.open("forgotten", CHAT_ID)  # its instance row is long gone

    async with session_scope(sessionmaker) as session:
        first = await WatermarkRepository(session).claim_dead([CHAT_ID], {"dead"})
    assert first == 1
    assert (await mark_of(sessionmaker)).unclean_since is not None
    async with session_scope(sessionmaker) as session:
        assert set(await session.scalars(select(Instance.id))) == {"live"}
        assert set(await session.scalars(select(SendIntent.id))) == {kept}
        await WatermarkRepository(session).reconcile(CHAT_ID, 10, covers_marks_until=utcnow())

    async with session_scope(sessionmaker) as session:
        again = await WatermarkRepository(session).claim_dead([CHAT_ID], {"dead"})
    assert again == 0
    assert (await mark_of(sessionmaker)).unclean_since is None


async def test_only_live_owners_intents_up_to_the_horizon_count(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        intents = IntentRepository(session)
        mine = await intents.open("me", CHAT_ID)
        await intents.open("other", CHAT_ID)
        horizon = await intents.latest_id()
        await intents.open("me", CHAT_ID)  # after the probe: posts above it

    async with session_scope(sessionmaker) as session:
        intents = IntentRepository(session)
        assert await intents.open_up_to(horizon, {"me"}) == 1
        assert await intents.open_up_to(horizon, {"me", "other"}) == 2
        await intents.resolve(mine)
        assert await intents.open_up_to(horizon, {"me"}) == 0


async def test_deletions_above_the_mark_are_counted_until_a_reconciliation_covers_them(
    sessionmaker: Sessions,
) -> None:
    await unclean_chat_at(sessionmaker, 10)
    async with session_scope(sessionmaker) as session:
        gc = GcRepository(session)
        entries = [
            await gc.add(
                bot_id=1,
                chat_id=CHAT_ID,
                message_id=message_id,
                file_unique_id="u",
                reason="deleted",
            )
            for message_id in (9, 12, 14)
        ]
    async with session_scope(sessionmaker) as session:
        gc = GcRepository(session)
        for entry in entries:
            await gc.done(entry.id)
        # Ids 11..15: 12 and 14 deleted by the service, 15 still held.
        await ChunkRepository(session).add_pending(replace(document(), message_id=15), "0" * 64)
    async with session_scope(sessionmaker) as session:
        marks = WatermarkRepository(session)
        assert (await marks.get(CHAT_ID)).deleted_above == 2  # type: ignore[union-attr]
        assert await marks.held_count(CHAT_ID, 10, 16) == 1

    async with session_scope(sessionmaker) as session:
        _, reached = await WatermarkRepository(session).reconcile(
            CHAT_ID, 16, covers_marks_until=utcnow()
        )
    assert reached
    mark = await mark_of(sessionmaker)
    assert (mark.message_id, mark.deleted_above) == (16, 0)
