"""The GC ledger: Telegram messages waiting to be deleted."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.intents import WatermarkRepository
from app.db.locking import lock_database_for_write
from app.db.models import ChunkCopy, GcEntry, GcReason, LeftMessage, LeftWhy, SnapshotMessage
from app.db.types import utcnow

# How long entries handed out by `due` stay invisible to other workers. The
# worker commits the claim at once and deletes the messages outside any
# transaction (a transaction held across Telegram calls would pin a pgbouncer
# server connection); if it dies, the entries come back after the lease.
DEFAULT_LEASE = timedelta(minutes=5)

_MAX_ERROR_LENGTH = 2000


class GcRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        # Entries the last `due` dropped: a row holds their message.
        self.held_dropped = 0

    async def add(
        self,
        *,
        bot_id: int,
        chat_id: int,
        message_id: int,
        file_unique_id: str,
        reason: GcReason,
        posted_at: datetime | None = None,
        now: datetime | None = None,
    ) -> GcEntry:
        """Schedule deletion of a message no chunk row records (a failed or
        aborted upload), posted at `posted_at` at the latest (None: unknown,
        `now` is the latest it can be)."""
        now = now or utcnow()
        entry = GcEntry(
            bot_id=bot_id,
            chat_id=chat_id,
            message_id=message_id,
            file_unique_id=file_unique_id,
            reason=reason,
            enqueued_at=now,
            attempts=0,
            next_attempt_at=now,
            posted_at=posted_at,
        )
        self._session.add(entry)
        await self._session.flush()
        return entry

    async def due(
        self, limit: int, now: datetime | None = None, *, lease: timedelta = DEFAULT_LEASE
    ) -> list[GcEntry]:
        """Claim up to `limit` entries due at `now`, oldest first; commit right after.

        FOR UPDATE SKIP LOCKED keeps concurrent workers (several instances)
        from claiming the same rows; the claim itself is the pushed-back
        `next_attempt_at`, so it survives the transaction.

        An entry whose message a chunk copy or a snapshot row holds is never
        handed out: its entry is dropped instead (`held_dropped` counts them).
        Reconciliation can ledger a message that a stalled instance, taken
        for dead, records afterwards; deleting it would lose acknowledged
        bytes. Whoever retires that row later ledgers the message again.
        """
        self.held_dropped = 0
        if limit <= 0:
            return []
        now = now or utcnow()
        await lock_database_for_write(self._session)
        entries = list(
            await self._session.scalars(
                select(GcEntry)
                .where(GcEntry.next_attempt_at <= now)
                .order_by(GcEntry.next_attempt_at, GcEntry.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        )
        held = await self._held([entry.id for entry in entries])
        if held:
            await self._session.execute(
                delete(GcEntry)
                .where(GcEntry.id.in_(held))
                .execution_options(synchronize_session=False)
            )
            self.held_dropped = len(held)
            for entry in entries:
                if entry.id in held:
                    self._session.expunge(entry)
            entries = [entry for entry in entries if entry.id not in held]
        for entry in entries:
            entry.next_attempt_at = now + lease
        await self._session.flush()
        return entries

    async def _held(self, entry_ids: list[int]) -> set[int]:
        """Which of the entries name a message a row still holds."""
        if not entry_ids:
            return set()
        holds = or_(
            exists().where(
                ChunkCopy.chat_id == GcEntry.chat_id, ChunkCopy.message_id == GcEntry.message_id
            ),
            exists().where(
                SnapshotMessage.chat_id == GcEntry.chat_id,
                SnapshotMessage.message_id == GcEntry.message_id,
            ),
        )
        return set(
            await self._session.scalars(select(GcEntry.id).where(GcEntry.id.in_(entry_ids), holds))
        )

    async def done(self, entry_id: int) -> None:
        """The message is deleted (or Telegram says it is already gone, or
        can no longer be deleted). Its id stays counted as the service's own."""
        gone = (
            await self._session.execute(
                delete(GcEntry)
                .where(GcEntry.id == entry_id)
                .returning(GcEntry.chat_id, GcEntry.message_id)
                .execution_options(synchronize_session=False)
            )
        ).first()
        if gone is not None:
            await WatermarkRepository(self._session).note_deleted(gone.chat_id, gone.message_id)

    async def left(self, entry_id: int, why: LeftWhy, error: str | None = None) -> None:
        """The message cannot be deleted any more (`why`): it stays in the
        channel for good. Its entry becomes a `left_messages` row, which
        keeps its id counted as the service's."""
        gone = (
            await self._session.execute(
                delete(GcEntry)
                .where(GcEntry.id == entry_id)
                .returning(
                    GcEntry.bot_id,
                    GcEntry.chat_id,
                    GcEntry.message_id,
                    GcEntry.file_unique_id,
                    GcEntry.reason,
                    GcEntry.posted_at,
                )
                .execution_options(synchronize_session=False)
            )
        ).first()
        if gone is None:
            return  # settled elsewhere meanwhile
        self._session.add(
            LeftMessage(
                bot_id=gone.bot_id,
                chat_id=gone.chat_id,
                message_id=gone.message_id,
                file_unique_id=gone.file_unique_id,
                reason=gone.reason,
                why=why,
                posted_at=gone.posted_at,
                left_at=utcnow(),
                error=None if error is None else error[:_MAX_ERROR_LENGTH],
            )
        )
        await self._session.flush()

    async def failed(self, entry_id: int, error: str, next_attempt_at: datetime) -> None:
        await self._session.execute(
            update(GcEntry)
            .where(GcEntry.id == entry_id)
            .values(
                attempts=GcEntry.attempts + 1,
                last_error=error[:_MAX_ERROR_LENGTH],
                next_attempt_at=next_attempt_at,
            )
            .execution_options(synchronize_session="fetch")
        )

    async def give_back(self, entry_ids: list[int], now: datetime) -> None:
        """Entries claimed by `due` and left unsettled: due again at once,
        for any instance, rather than after the claim's lease."""
        await self._session.execute(
            update(GcEntry)
            .where(GcEntry.id.in_(entry_ids))
            .values(next_attempt_at=now)
            .execution_options(synchronize_session=False)
        )

    async def backlog(self) -> int:
        """How many messages are waiting to be deleted."""
        return await self._session.scalar(select(func.count()).select_from(GcEntry)) or 0

    async def left_count(self) -> int:
        """How many messages stay in the storage chats for good (`left`)."""
        return await self._session.scalar(select(func.count()).select_from(LeftMessage)) or 0
