"""Send intents and chat watermarks: the bookkeeping that lets a crash's
orphaned Telegram messages be found and deleted.

Message ids in a channel rise one by one, and the storage channel belongs to
the service alone, so every id in it is either held by a row (a chunk, live
or pending, or a GC ledger entry) or an orphan: a message Telegram posted
that no row learnt of (the process died between the post and its commit).
A chat's watermark is the highest id known reconciled. After an unclean
stop, the ids between the watermark and a fresh probe message that no row
holds are ledgered for deletion, but only once every send that was in flight
when the probe was posted has resolved, which the intents tell.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import CompoundSelect, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import batches, dialect_name, lock_database_for_write
from app.db.models import (
    ChatWatermark,
    ChunkCopy,
    GcEntry,
    Instance,
    LeftMessage,
    SendIntent,
    SnapshotMessage,
)
from app.db.types import utcnow

# Ledger entries for ids no row names: the bot is unknown (any admin bot may
# delete a channel post) and so is the file.
UNKNOWN_BOT = 0
UNKNOWN_FILE = ""
# The chat of an intent whose send goes to whichever storage chat its bot can
# post to soonest (the dispatcher chooses at the attempt): it may post in any.
# Telegram chat ids are never 0.
ANY_CHAT = 0
# Message ids looked at per reconciliation transaction (bounds its memory and
# the ledger rows it writes at once; a bigger gap takes several).
RECONCILE_BATCH = 10_000


class IntentRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def open(self, owner: str, chat_id: int) -> int:
        """Record a send about to start; returns the intent's id."""
        intent = SendIntent(owner=owner, chat_id=chat_id, created_at=utcnow())
        self._session.add(intent)
        await self._session.flush()
        return intent.id

    async def resolve(self, intent_id: int) -> None:
        await self._session.execute(delete(SendIntent).where(SendIntent.id == intent_id))

    async def latest_id(self) -> int:
        """The newest intent's id (0: none ever, or all resolved and gone)."""
        return int(await self._session.scalar(select(func.max(SendIntent.id))) or 0)

    async def open_up_to(self, intent_id: int, owners: Iterable[str]) -> int:
        """How many intents up to `intent_id` that `owners` hold are open."""
        return int(
            await self._session.scalar(
                select(func.count())
                .select_from(SendIntent)
                .where(SendIntent.id <= intent_id, SendIntent.owner.in_(builtins.list(owners)))
            )
            or 0
        )

    async def open_in_chat(self, chat_id: int) -> int:
        """How many sends that may post to the chat are in flight (their
        intents open; a send's chat is chosen only when it runs)."""
        return int(
            await self._session.scalar(
                select(func.count())
                .select_from(SendIntent)
                .where(SendIntent.chat_id.in_([chat_id, ANY_CHAT]))
            )
            or 0
        )

    async def registered_instances(self) -> set[str]:
        """The ids of every registered instance, alive or not."""
        return set(await self._session.scalars(select(Instance.id)))

    async def forget_older(self, owner: str, before: datetime) -> int:
        """Drop an owner's intents older than `before` (their sends' tasks died
        without resolving them); returns how many."""
        result = await self._session.execute(
            delete(SendIntent).where(SendIntent.owner == owner, SendIntent.created_at < before)
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]


class WatermarkRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def get(self, chat_id: int) -> ChatWatermark | None:
        return await self._session.get(ChatWatermark, chat_id)

    async def ensure(self, chat_id: int, recorded_id: int) -> None:
        """Give the chat its first watermark unless it has one, as a chunk
        with message id `recorded_id` is recorded (its send's intent resolved).

        What the chat held before the service's first message is not the
        service's to judge, so the mark goes just below that message: below
        `recorded_id`, and below the messages that the sends still in flight
        (one per open intent) may have posted before it.
        """
        in_flight = await self._session.scalar(
            select(func.count())
            .select_from(SendIntent)
            .where(SendIntent.chat_id.in_([chat_id, ANY_CHAT]))
        )
        values = {
            "chat_id": chat_id,
            "message_id": max(0, recorded_id - 1 - int(in_flight or 0)),
            "unclean_since": None,
            "updated_at": utcnow(),
        }
        statement = (
            upsert_insert(dialect_name(self._session), ChatWatermark)
            .values(values)
            .on_conflict_do_nothing()
        )
        await self._session.execute(statement)

    async def note_deleted(self, chat_id: int, message_id: int) -> None:
        """The service deleted its message `message_id`: no row holds the id
        any more, so count it, for the foreign-post audit."""
        await self._session.execute(
            update(ChatWatermark)
            .where(ChatWatermark.chat_id == chat_id, ChatWatermark.message_id < message_id)
            .values(deleted_above=ChatWatermark.deleted_above + 1)
        )

    async def newest_known(self, chat_id: int) -> int:
        """The newest message id of the chat known to be posted already: the
        watermark, or a row's (a chunk copy's, a ledger entry's, a
        snapshot message's). A message posted from now on takes an id above."""
        mark = await self._session.get(ChatWatermark, chat_id)
        held = (
            select(func.max(ChunkCopy.message_id))
            .where(ChunkCopy.chat_id == chat_id)
            .union_all(
                select(func.max(GcEntry.message_id)).where(GcEntry.chat_id == chat_id),
                select(func.max(SnapshotMessage.message_id)).where(
                    SnapshotMessage.chat_id == chat_id
                ),
            )
            .subquery()
        )
        newest = await self._session.scalar(select(func.max(held.c[0])))
        return max(int(newest or 0), mark.message_id if mark is not None else 0)

    async def note_unseen_post(self, chat_id: int, above: int) -> None:
        """The service posted a message in the chat whose id it never learns
        (a pin's service message), above `above` (`newest_known` before the
        post began). Counted as one of its own ids above the mark that no
        row holds, for the foreign-post audit, when it surely is above: the
        mark is not past `above`. (A mark raised past `above` meanwhile, by a
        reconciliation running at that moment, leaves it uncounted: the
        audit may then count it as foreign once, as it may a deletion.)"""
        await self._session.execute(
            update(ChatWatermark)
            .where(ChatWatermark.chat_id == chat_id, ChatWatermark.message_id <= above)
            .values(deleted_above=ChatWatermark.deleted_above + 1)
        )

    async def held_count(self, chat_id: int, low: int, high: int) -> int:
        """How many ids strictly between `low` and `high` a row holds."""
        held = _held(chat_id, low, high).subquery()
        return int(await self._session.scalar(select(func.count()).select_from(held)) or 0)

    async def claim_dead(self, chat_ids: Iterable[int], dead: Iterable[str]) -> int:
        """Forget instances that died (their rows and open intents) and mark
        the chats unclean if any was still registered; returns how many were.

        Deleting the rows is the claim: of several live instances seeing the
        same dead one, only the one whose delete removed it marks the chat.
        """
        ids = sorted(set(dead))
        if not ids:
            return 0
        await lock_database_for_write(self._session)
        claimed = 0
        for batch in batches(ids):
            result = await self._session.execute(delete(Instance).where(Instance.id.in_(batch)))
            claimed += int(result.rowcount or 0)  # type: ignore[attr-defined]
            await self._session.execute(delete(SendIntent).where(SendIntent.owner.in_(batch)))
        # Intents whose owner is not registered at all (forgotten earlier).
        await self._session.execute(
            delete(SendIntent).where(SendIntent.owner.not_in(select(Instance.id)))
        )
        if claimed:
            await self.mark_unclean(chat_ids)
        return claimed

    async def mark_unclean(self, chat_ids: Iterable[int]) -> None:
        """Ids above the watermarks may hold orphans: reconcile the chats. The
        mark is the latest such moment, so a reconciliation that began before
        it does not clear it. (A chat with no watermark yet has had no chunk.)"""
        now = utcnow()
        await self._session.execute(
            update(ChatWatermark)
            .where(ChatWatermark.chat_id.in_(builtins.list(chat_ids)))
            .values(unclean_since=now, updated_at=now)
        )

    async def reconcile(
        self,
        chat_id: int,
        probe_id: int,
        *,
        covers_marks_until: datetime,
        limit: int = RECONCILE_BATCH,
    ) -> tuple[int, bool]:
        """Ledger the ids above the watermark and below `probe_id` that no
        chunk or ledger row holds, at most `limit` ids at a time, and raise the
        watermark past them. Returns (ids ledgered, whether `probe_id` is reached).

        Once it is, the chat is clean again, unless it was marked unclean
        after `covers_marks_until` (a death while this reconciliation ran, or
        one too recent for Telegram to have finished its last sends).
        """
        await lock_database_for_write(self._session)
        mark = await self._session.get(ChatWatermark, chat_id, with_for_update=True)
        if mark is None:
            raise LookupError(f"chat {chat_id} has no watermark")
        low = mark.message_id
        high = min(probe_id, low + 1 + limit)  # exclusive
        reached = high == probe_id or probe_id <= low
        gap: list[int] = []
        if high > low + 1:
            held = await self._held_ids(chat_id, low, high)
            gap = [i for i in range(low + 1, high) if i not in held]
        now = utcnow()
        for batch in batches(gap):
            await self._session.execute(
                insert(GcEntry),
                [
                    {
                        "bot_id": UNKNOWN_BOT,
                        "chat_id": chat_id,
                        "message_id": message_id,
                        "file_unique_id": UNKNOWN_FILE,
                        "reason": "orphaned",
                        "enqueued_at": now,
                        "attempts": 0,
                        "next_attempt_at": now,
                    }
                    for message_id in batch
                ],
            )
        values: dict[str, object] = {
            "message_id": max(low, probe_id if reached else high - 1),
            "updated_at": now,
        }
        if reached:
            # Every id up to the probe is accounted for now. (A message posted
            # after the probe and deleted before this commit is forgotten:
            # the audit may count it as foreign once.)
            values["deleted_above"] = 0
        if reached and mark.unclean_since is not None and mark.unclean_since <= covers_marks_until:
            values["unclean_since"] = None
        await self._session.execute(
            update(ChatWatermark).where(ChatWatermark.chat_id == chat_id).values(**values)
        )
        return len(gap), reached

    async def _held_ids(self, chat_id: int, low: int, high: int) -> set[int]:
        """Message ids strictly between `low` and `high` that a row holds."""
        return {int(i) for i in await self._session.scalars(_held(chat_id, low, high))}


def _held(chat_id: int, low: int, high: int) -> CompoundSelect[int]:
    """The ids strictly between `low` and `high` that a chunk copy, ledger,
    snapshot or left-in-the-channel row holds."""
    return (
        select(ChunkCopy.message_id)
        .where(
            ChunkCopy.chat_id == chat_id, ChunkCopy.message_id > low, ChunkCopy.message_id < high
        )
        .union(
            select(GcEntry.message_id).where(
                GcEntry.chat_id == chat_id, GcEntry.message_id > low, GcEntry.message_id < high
            ),
            select(SnapshotMessage.message_id).where(
                SnapshotMessage.chat_id == chat_id,
                SnapshotMessage.message_id > low,
                SnapshotMessage.message_id < high,
            ),
            select(LeftMessage.message_id).where(
                LeftMessage.chat_id == chat_id,
                LeftMessage.message_id > low,
                LeftMessage.message_id < high,
            ),
        )
    )
