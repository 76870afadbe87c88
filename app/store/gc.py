"""The garbage collector: deletes Telegram messages nothing references any more.

Telegram lets a bot delete a channel post only for 48 hours from its
*posting* (td's MessagesManager.cpp, can_delete_channel_message), so failed,
aborted, overwritten and deleted uploads are cleaned up promptly. The work
list is the `gc_ledger` table, so it survives restarts; a document that could
not even be written to the ledger (the database was down) is kept in memory
and written on the next round.

Every entry knows when its message was posted, at the latest (`posted_at`;
for the few that do not, `enqueued_at` is that latest). Past 48 hours from
then no call can succeed, so none is made: the message is recorded as left
in the channel for good (`left_messages`), as is one Telegram refuses to
delete; both are counted (`/metrics`, `teleuploader check`; docs/trash.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import ChunkRepository
from app.db.gc import GcRepository
from app.db.models import GcReason
from app.db.session import session_scope
from app.db.trash import TrashRepository
from app.kit.periodic import Periodic
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import ChatForbidden, PermanentError, TelegramError
from app.telegram.types import StoredDocument

log = structlog.get_logger("app.store.gc")

# Telegram's wording when the message is already gone: nothing left to do.
_ALREADY_GONE = "message to delete not found"
# Telegram's wording both when the bot lacks the right to delete in the chat
# and when the message is past the 48 hours: getChatMember tells them apart
# (only messages still inside their 48 hours, as the service knows their
# posting, are asked about).
_CANNOT_DELETE = "message can't be deleted"
# Bots may delete channel posts for 48 hours from their posting (td's
# MessagesManager.cpp: `unix_time() >= date + 2 * 86400` refuses). An
# entry's `posted_at` is the latest the posting can have been, so past this
# age from it no call can succeed.
DELETE_WINDOW = timedelta(hours=48)
MAX_RETRY_DELAY = 600.0


@dataclass(frozen=True, slots=True)
class _Due:
    """A ledger entry claimed for this round."""

    id: int
    bot_id: int
    chat_id: int
    message_id: int
    attempts: int
    posted_at: datetime  # at the latest


@dataclass(frozen=True, slots=True)
class _Outcome:
    settled: bool  # True: drop the ledger entry
    error: str | None = None


class GarbageCollector:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        interval: float = 2.0,
        batch: int = 50,
        on_undeletable: Callable[[], None] | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self._batch = batch
        # (document, why it goes, when it was posted at the latest)
        self._unrecorded: list[tuple[StoredDocument, GcReason, datetime]] = []
        # Releases the database refused (it was down): retried every round.
        self._unreleased: list[tuple[list[int], GcReason]] = []
        self.loop = Periodic("gc", self._round, interval=interval, run_at_start=True)
        self._background: set[asyncio.Task[None]] = set()
        self.deleted = 0
        # Left in the channel by this process: the 48 h window closed first,
        # or Telegram refused for good.
        self.undeletable = 0
        self.on_undeletable = on_undeletable  # e.g. a metric
        # Refreshed every round, for /metrics (a scrape cannot await the
        # database): the ledger's size, and the messages left in the
        # channels for good (every instance's).
        self.last_backlog = 0
        self.last_left = 0

    # --- feeding the ledger -----------------------------------------------------

    def enqueue_document(self, document: StoredDocument, *, reason: GcReason) -> None:
        """Record a message that has no chunk row (an orphaned send). Sync, so
        the dispatcher can call it from its worker. Telegram has answered its
        post by now: it was posted now at the latest."""
        self._unrecorded.append((document, reason, datetime.now(UTC)))
        task = asyncio.get_running_loop().create_task(self._record_unrecorded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def release_chunks(self, chunk_ids: list[int], *, reason: GcReason) -> None:
        """Chunks no longer needed by their upload: ledger the unreferenced ones.

        If the database cannot take it now, the release is kept and retried
        every round: a failed upload's chunks must not wait for a restart
        (and Telegram's 48 h delete window) to be collected."""
        try:
            async with session_scope(self._sessionmaker) as session:
                await ChunkRepository(session).release(chunk_ids, reason)
        except Exception as exc:
            self._unreleased.append((list(chunk_ids), reason))
            log.warning("chunk_release_deferred", chunks=len(chunk_ids), error=str(exc))
            return
        self.wake()

    async def _release_unreleased(self) -> None:
        while self._unreleased:
            chunk_ids, reason = self._unreleased[0]
            async with session_scope(self._sessionmaker) as session:
                await ChunkRepository(session).release(chunk_ids, reason)
            self._unreleased.pop(0)

    async def sweep_orphans(self, before: datetime, live_owners: Iterable[str] = ()) -> int:
        """Pending chunks of instances that are gone (and unowned ones older
        than `before`) belong to uploads that died with them: ledger them."""
        async with session_scope(self._sessionmaker) as session:
            count = await ChunkRepository(session).collect_pending_orphans(before, live_owners)
        if count:
            log.warning("orphaned_chunks_collected", count=count)
            self.wake()
        return count

    async def sweep_stale(self, owner: str, before: datetime) -> int:
        """A live instance's pending chunks created before `before` belong to
        no running upload (a request task died): ledger them."""
        async with session_scope(self._sessionmaker) as session:
            count = await ChunkRepository(session).collect_stale_pending(owner, before)
        if count:
            log.warning("stale_pending_chunks_collected", count=count)
            self.wake()
        return count

    async def _record_unrecorded(self) -> None:
        if not self._unrecorded:
            return
        batch, self._unrecorded = self._unrecorded, []
        try:
            async with session_scope(self._sessionmaker) as session:
                repo = GcRepository(session)
                for document, reason, posted_at in batch:
                    await repo.add(
                        bot_id=document.bot_id,
                        chat_id=document.chat_id,
                        message_id=document.message_id,
                        file_unique_id=document.file_unique_id,
                        reason=reason,
                        posted_at=posted_at,
                    )
        except Exception:
            self._unrecorded = batch + self._unrecorded
            log.warning("gc_ledger_write_failed", pending=len(self._unrecorded))
            return
        self.wake()

    # --- the loop ---------------------------------------------------------------

    def wake(self) -> None:
        self.loop.wake()

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._record_unrecorded()
        with contextlib.suppress(Exception):
            await self._release_unreleased()

    async def _round(self) -> float | None:
        await self._record_unrecorded()
        await self._release_unreleased()
        expired = await self.expire_trash()
        done = await self.run_once()
        self.last_backlog, self.last_left = await self._counts()
        # A full batch: more are due, at once.
        return 0.0 if max(done, expired) >= self._batch else None

    async def expire_trash(self) -> int:
        """Delete one batch of objects whose time in the trash is over; their
        chunks' messages join the ledger (those no live object shares).
        Returns how many objects went."""
        async with session_scope(self._sessionmaker) as session:
            if not await TrashRepository(session).any_expired():
                return 0
        async with session_scope(self._sessionmaker) as session:
            objects, chunks = await TrashRepository(session).expire(self._batch)
        if objects:
            log.info("trash_expired", objects=objects, chunks_released=chunks)
        return objects

    async def run_once(self) -> int:
        """Delete one batch of due messages; returns how many entries were settled.
        A message past its 48 hours gets no call: it is left in the channel."""
        now = datetime.now(UTC)
        async with session_scope(self._sessionmaker) as session:
            ledger = GcRepository(session)
            entries = [
                _Due(
                    e.id,
                    e.bot_id,
                    e.chat_id,
                    e.message_id,
                    e.attempts,
                    e.posted_at or e.enqueued_at,
                )
                for e in await ledger.due(self._batch, now)
            ]
            held = ledger.held_dropped
        if held:
            log.warning(
                "gc_skipped_held_messages",
                messages=held,
                detail="ledgered messages that a chunk copy or snapshot row holds "
                "were kept, and their entries dropped",
            )
        if not entries:
            return 0
        expired = [e for e in entries if now - e.posted_at >= DELETE_WINDOW]
        young = [e for e in entries if now - e.posted_at < DELETE_WINDOW]
        try:
            outcomes = await asyncio.gather(
                *(self._delete(e.bot_id, e.chat_id, e.message_id) for e in young)
            )
        except asyncio.CancelledError:
            # Stopped mid-round: the claimed entries would stay hidden from
            # every instance for the claim's lease (minutes). A deletion that
            # went through meanwhile is found gone on the next try.
            await asyncio.shield(self._give_back([entry.id for entry in entries]))
            raise
        async with session_scope(self._sessionmaker) as session:
            repo = GcRepository(session)
            for entry in expired:
                await repo.left(entry.id, "past_window")
                self._count_undeletable()
            settled = len(expired)
            for entry, outcome in zip(young, outcomes, strict=True):
                settled += await self._settle(repo, entry, outcome, now)
        if expired:
            log.warning(
                "gc_left_in_channel",
                messages=len(expired),
                why="past_window",
                detail="posted more than 48 hours ago: Telegram lets no bot delete them, "
                "so none was asked to (docs/trash.md)",
            )
        return settled

    async def _settle(
        self, repo: GcRepository, entry: _Due, outcome: _Outcome, now: datetime
    ) -> bool:
        """Record what became of one deletion; whether its entry is settled."""
        if outcome.settled and outcome.error is None:
            await repo.done(entry.id)
            self.deleted += 1
        elif outcome.settled:
            log.error(
                "gc_message_not_deletable",
                bot_id=entry.bot_id,
                message_id=entry.message_id,
                error=outcome.error,
            )
            await repo.left(entry.id, "refused", outcome.error)
            self._count_undeletable()
        elif datetime.now(UTC) - entry.posted_at >= DELETE_WINDOW:
            # Retried for as long as Telegram allows a deletion.
            log.error(
                "gc_gave_up_undeletable",
                bot_id=entry.bot_id,
                message_id=entry.message_id,
                attempts=entry.attempts + 1,
                error=outcome.error,
            )
            await repo.left(entry.id, "past_window", outcome.error)
            self._count_undeletable()
        else:
            delay = timedelta(seconds=min(MAX_RETRY_DELAY, 5 * 2 ** min(entry.attempts, 10)))
            await repo.failed(entry.id, outcome.error or "", now + delay)
            return False
        return True

    async def _give_back(self, entry_ids: list[int]) -> None:
        try:
            async with session_scope(self._sessionmaker) as session:
                await GcRepository(session).give_back(entry_ids, datetime.now(UTC))
        except Exception as exc:  # the claim's lease brings them back anyway
            log.warning("gc_give_back_failed", entries=len(entry_ids), error=str(exc))

    def _count_undeletable(self) -> None:
        self.undeletable += 1
        if self.on_undeletable is not None:
            self.on_undeletable()

    async def backlog(self) -> int:
        async with session_scope(self._sessionmaker) as session:
            return await GcRepository(session).backlog() + len(self._unrecorded)

    async def _counts(self) -> tuple[int, int]:
        """(`backlog`, messages left in the channels for good), in one session."""
        async with session_scope(self._sessionmaker) as session:
            repo = GcRepository(session)
            return await repo.backlog() + len(self._unrecorded), await repo.left_count()

    async def _delete(self, bot_id: int, chat_id: int, message_id: int) -> _Outcome:
        """Delete through the bot that posted it if it can still work, else
        any admin bot of the chat (channel admins with can_delete_messages may
        delete any post): bots this instance may call now in the chat (with
        several instances, those it holds the lease of). A bot the chat
        refuses passes the deletion on to the next one at once."""
        tried: set[int] = set()
        refusal: str | None = None
        while True:
            usable = [b for b in self._dispatcher.serving_bots(chat_id) if b not in tried]
            if not usable:
                return _Outcome(settled=False, error=refusal or "no usable bot")
            deleter = bot_id if bot_id in usable else usable[message_id % len(usable)]
            tried.add(deleter)
            try:
                await self._dispatcher.call(
                    deleter, "deleteMessage", lambda c: c.delete_message(chat_id, message_id)
                )
            except ChatForbidden as exc:
                # The dispatcher took this bot out of the chat (or out of the
                # pool, if it was its last chat): the next bot may.
                refusal = str(exc)
                continue
            except PermanentError as exc:
                if _ALREADY_GONE in exc.description:
                    return _Outcome(settled=True)
                others = [b for b in self._dispatcher.serving_bots(chat_id) if b not in tried]
                if _CANNOT_DELETE in exc.description and others:
                    try:
                        may_delete = await self._may_delete(deleter, chat_id)
                    except TelegramError as check:
                        return _Outcome(settled=False, error=str(check))
                    if not may_delete:
                        # This bot lacks the right to delete here; another may have it.
                        continue
                # E.g. older than 48 hours, or no bot of the chat may delete
                # it: retrying cannot help. Say so loudly.
                return _Outcome(settled=True, error=str(exc))
            except TelegramError as exc:
                return _Outcome(settled=False, error=str(exc))
            return _Outcome(settled=True)

    async def _may_delete(self, bot_id: int, chat_id: int) -> bool:
        """Whether the bot has the right to delete posts in the chat."""
        member = await self._dispatcher.call(
            bot_id, "getChatMember", lambda c: c.get_chat_member(chat_id, bot_id)
        )
        return member.can_delete_messages
