"""Reconciliation: deleting the Telegram messages a crash left unrecorded.

A process killed between Telegram posting a chunk and the commit of its row
leaves a message no row knows of, and the Bot API cannot list a chat. But
message ids in a channel rise one by one, and the storage channel belongs to
the service alone (deploy/README.md), so the ids above the chat's watermark
(the highest id known reconciled) that no chunk or ledger row holds are
exactly such orphans, once every send that was in flight has resolved.

The same happens without a crash when a send's answer is lost (a dropped
connection, a call given up on a timeout): the dispatcher retries, and the
first attempt's message is an orphan. Such attempts (`may_have_posted`) mark
the chat unclean too, at the next periodic sweep.

A chat's first watermark is set as its first chunk is recorded (the id before
it: what the chat held before is not the service's). A reconciliation runs
when the chat is marked unclean (an instance died: see app/store/instance.py).
Each chat is reconciled on its own (its own watermark, probe and message id
sequence); a round goes through every storage chat that is marked. It:

1. posts a tiny probe document, the chat's newest message (ledgered at once);
2. waits until every send intent that existed then is resolved or belongs to
   a dead instance: a live upload's message, posted but not yet recorded,
   is never taken for an orphan;
3. ledgers every id between the watermark and the probe that no row holds and
   raises the watermark to the probe, in one transaction per batch of ids.

A death is covered only by a round that began LATE_POSTS_ALLOWANCE after it
was marked (Telegram may post a dead process's last sends a while later), so
a crash found at once is reconciled twice: at once, and at a later sweep.

The deletions go through the GC ledger like every other (rate limits,
retries, the 48 h window); ids of messages already deleted are answered
"not found" and settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.intents import IntentRepository, WatermarkRepository
from app.db.session import session_scope
from app.db.types import utcnow
from app.store.gc import GarbageCollector
from app.telegram.dispatcher import Dispatcher

log = structlog.get_logger("app.store.reconcile")

PROBE_BYTES = b"\0"
PROBE_FILE_NAME = "reconciliation-probe.bin"
PROBE_CAPTION = "teleuploader reconciliation probe"
# How often to look whether the sends in flight at the probe have resolved.
INTENT_POLL_SECONDS = 1.0
# How long to wait for them before giving up this round (the next sweep tries
# again with a new probe).
INTENT_WAIT_SECONDS = 600.0
# Telegram finishes a send whose body it had even after its client died, for
# up to about the server's allowance of a call (as the dispatcher's hold of
# a token after an abandoned call, Tuning.abandoned_call_hold_seconds): a
# round probing sooner after a death may miss a late post, so the chat stays
# marked for another round (the next sweep's).
LATE_POSTS_ALLOWANCE = timedelta(seconds=60)


# Failed attempts after which Telegram may still have posted the message (the
# answer was lost, or the call was given up while Telegram worked on it).
_POSTING_METHODS = frozenset({"sendDocument", "forwardMessage"})
_MAYBE_POSTED_OUTCOMES = frozenset({"transient", "abandoned"})


def may_have_posted(method: str, outcome: str) -> bool:
    """Whether a dispatcher attempt that ended so may have left a message no
    row knows of (and the chat needs a reconciliation)."""
    return method in _POSTING_METHODS and outcome in _MAYBE_POSTED_OUTCOMES


class IntentsStillOpen(Exception):
    """Sends of live instances that were in flight at the probe did not resolve in time."""


class Reconciler:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        *,
        live_owners: Callable[[], Awaitable[set[str]]],
        poll_seconds: float = INTENT_POLL_SECONDS,
        wait_seconds: float = INTENT_WAIT_SECONDS,
        late_posts_allowance: timedelta = LATE_POSTS_ALLOWANCE,
    ) -> None:
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self._gc = gc
        self._live_owners = live_owners
        self._poll_seconds = poll_seconds
        self._wait_seconds = wait_seconds
        self.late_posts_allowance = late_posts_allowance
        self._lock = asyncio.Lock()
        self.reconciled = 0  # ids ledgered since the start, for logs and tests

    @property
    def chat_ids(self) -> list[int]:
        """The storage chats (every one that new chunks may go to)."""
        return self._dispatcher.chat_ids

    async def needed(self) -> bool:
        """Whether some storage chat is marked unclean."""
        return bool(await self._marked_chats())

    async def _marked_chats(self) -> list[int]:
        """The storage chats marked unclean. (A chat with no watermark has
        never had a chunk recorded: nothing of the service's is in it.)"""
        marked = []
        async with session_scope(self._sessionmaker) as session:
            marks = WatermarkRepository(session)
            for chat_id in self.chat_ids:
                mark = await marks.get(chat_id)
                if mark is not None and mark.unclean_since is not None:
                    marked.append(chat_id)
        return marked

    async def run(self) -> int:
        """Reconcile every chat that needs it; returns how many ids were
        ledgered. Raises IntentsStillOpen, TelegramError or a database error
        if this round could not finish (the chats left stay marked)."""
        async with self._lock:
            ledgered = 0
            failure: Exception | None = None
            for chat_id in await self._marked_chats():
                try:
                    ledgered += await self._reconcile_chat(chat_id)
                except Exception as exc:
                    # One chat that cannot be probed now (no bot may post
                    # there) does not hold back the others.
                    log.warning("reconcile_chat_failed", chat_id=chat_id, error=str(exc))
                    failure = failure or exc
            if failure is not None:
                raise failure
            return ledgered

    async def _reconcile_chat(self, chat_id: int) -> int:
        started = utcnow()
        probe_id = await self._probe(chat_id)
        async with session_scope(self._sessionmaker) as session:
            horizon = await IntentRepository(session).latest_id()
        await self._wait_for_intents(horizon)
        ledgered = 0
        reached = False
        while not reached:
            async with session_scope(self._sessionmaker) as session:
                count, reached = await WatermarkRepository(session).reconcile(
                    chat_id,
                    probe_id,
                    covers_marks_until=started - self.late_posts_allowance,
                )
            ledgered += count
        self.reconciled += ledgered
        if ledgered:
            self._gc.wake()
        log.warning("orphans_reconciled", chat_id=chat_id, orphans=ledgered, watermark=probe_id)
        return ledgered

    async def _probe(self, chat_id: int) -> int:
        """Post a tiny document into `chat_id` (now its newest message); its
        id. It goes to the GC ledger at once."""
        document = await self._dispatcher.send_document(
            PROBE_BYTES, PROBE_FILE_NAME, caption=PROBE_CAPTION, chat_id=chat_id, even_if_full=True
        )
        self._gc.enqueue_document(document, reason="orphaned")
        return document.message_id

    async def _wait_for_intents(self, horizon: int) -> None:
        """Until no live instance holds an intent up to `horizon` (those that
        existed when the probe was posted)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_seconds
        while True:
            live = await self._live_owners()
            async with session_scope(self._sessionmaker) as session:
                still_open = await IntentRepository(session).open_up_to(horizon, live)
            if not still_open:
                return
            if loop.time() >= deadline:
                raise IntentsStillOpen(f"{still_open} sends in flight at the probe did not resolve")
            # Other instances' sends resolve in their own processes: polling
            # the database is the only way to see it.
            await asyncio.sleep(self._poll_seconds)
