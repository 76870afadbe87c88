"""The per-bot dispatcher: one asyncio worker per bot token.

Why it exists: Telegram answers two concurrent calls on one token with a 429 and
a 30-60 s wait. The predecessor picked bots round-robin inside one global queue,
so two uploads landed on one bot, and those waits made `docker push` fail.

How it works (see shared/reference/per-bot-queue-design.md, made better):

* Every bot has a worker that runs **one upload at a time** (and one call at
  a time with `small_lane` off); beside it, its small-call lane runs one small
  call at a time (getFile, deleteMessage...: `SMALL_CALLS` in
  app/telegram/worker.py), so a read's getFile does not wait behind an
  upload. Every call on a bot, its getMe check included, goes through them.
* A job goes to the least loaded bot that can run it, and an idle bot takes
  waiting work from busy ones (app/telegram/routing.py).
* What an attempt's outcome does, from a 429 to a revoked token, is in
  app/telegram/attempts.py; a bot's state and its pacing per (bot, chat) in
  app/telegram/worker.py.
* Built with `checked=False`, every bot waits outside the pool until its getMe
  check passes (`admit`, from app.telegram.probe), so the service need not wait
  for every bot before it starts. A bot is admitted for the storage chats where
  it may post; sends go only there.
* Several instances on one database (`require_leases`): a bot works only while
  this instance holds its lease (`grant`, from app.store.leases), never
  starts a call past the lease's end and cuts a call that would outlast it;
  `revoke` stops it, moving its queue to other bots and waiting for its
  running calls, before the lease moves on.

This module is the facade the rest of the service uses: the public calls
and the workers' lifecycle. Who is in the pool (the getMe check's admissions,
each bot's chats, the leases of several instances) is in
app/telegram/pool_membership.py; the views for /ready and /metrics, which only
read the pool, are in app/telegram/pool_views.py.

Only Bot API *method* calls go through the lanes. Downloading a file's bytes
(`/file/bot<token>/...`, or a local server's file on its disk) is not a method
call and is not rate-limited the same way; it uses the bot's client directly
(`client_for`), so a long download does not stall that bot's uploads. getFile
is a method call, and a download on the server's side before it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import structlog

from app.config.tuning import ABANDONED_CALL_HOLD_SECONDS
from app.telegram.attempts import (
    TRANSIENT_BACKOFF_BASE,
    AbandonedSendHandler,
    AttemptObserver,
    Attempts,
    OrphanHandler,
)
from app.telegram.chat_fill import ChatFill
from app.telegram.chunk_pieces import ChunkPieces
from app.telegram.client import BotClient
from app.telegram.errors import DispatcherClosed
from app.telegram.pool_membership import PoolMembership
from app.telegram.pool_views import PoolViews
from app.telegram.routing import Router
from app.telegram.types import DocumentBody, StoredDocument
from app.telegram.worker import (
    PACING_WINDOW,
    SMALL_CALLS,
    BotStatus,
    BotWorker,
    Job,
    Lane,
    ReplicaGroup,
)

__all__ = ["BotStatus", "BotWorker", "Dispatcher", "Job"]

log = structlog.get_logger("app.telegram.dispatcher")

T = TypeVar("T")

ALL_FAILED_PAUSE = 5.0


class Dispatcher(PoolMembership, PoolViews):
    """The bot pool: takes jobs, runs each on one bot's worker, one call per token."""

    def __init__(
        self,
        clients: list[BotClient],
        *,
        chat_ids: Sequence[int],
        max_attempts: int = 10,
        sends_per_minute: int = 0,
        on_orphan: OrphanHandler | None = None,
        on_attempt: AttemptObserver | None = None,
        on_abandoned_send: AbandonedSendHandler | None = None,
        clock: Callable[[], float] = time.monotonic,
        transient_backoff: float = TRANSIENT_BACKOFF_BASE,
        all_failed_pause: float = ALL_FAILED_PAUSE,
        pacing_window: float = PACING_WINDOW,
        abandoned_hold: float = ABANDONED_CALL_HOLD_SECONDS,
        checked: bool = True,
        leased: bool = False,
        small_lane: bool = True,
        chat_message_limit: int = 0,
    ) -> None:
        """`checked=False`: every bot waits outside the pool until `admit`
        (after its getMe check passed) or `reject`. `leased=True`: a bot
        works only while its lease is granted (`require_leases`).
        `small_lane=False`: every call of a bot takes its one lane."""
        if not clients:
            raise ValueError("the dispatcher needs at least one bot")
        if not chat_ids:
            raise ValueError("the dispatcher needs at least one storage chat")
        self.chat_ids = list(chat_ids)
        self._clock = clock
        self.small_lane = small_lane
        self.workers: dict[int, BotWorker] = {
            c.bot_id: BotWorker(c, index, set(self.chat_ids)) for index, c in enumerate(clients)
        }
        if not checked:
            for worker in self.workers.values():
                worker.usable = False
                worker.probing = True
        # How full each chat is; a full one takes no new sends (chat_fill.py).
        self.fill = ChatFill(self.chat_ids, chat_message_limit)
        self._router = Router(
            self.workers,
            self.chat_ids,
            clock=clock,
            sends_per_minute=sends_per_minute,
            pacing_window=pacing_window,
            all_failed_pause=all_failed_pause,
        )
        self._attempts = Attempts(
            self._router,
            clock=clock,
            max_attempts=max_attempts,
            transient_backoff=transient_backoff,
            abandoned_hold=abandoned_hold,
        )
        self._router.is_full = self.fill.full
        self.on_orphan = on_orphan
        self.on_attempt = on_attempt
        self.on_abandoned_send = on_abandoned_send
        self._leasing = False
        # The bots another live instance holds the lease of (set by
        # app.store.leases): a reader here asks it for their file paths.
        self.held_elsewhere: frozenset[int] = frozenset()
        self._job_ids = itertools.count(1)
        # Whose turn it is to take a chunk's first copy (replica_chats).
        self._replica_turns = itertools.count()
        self._accepting = False
        if leased:
            self.require_leases()

    # The service sets these after construction; the attempts call them.

    @property
    def on_orphan(self) -> OrphanHandler | None:
        return self._attempts.on_orphan

    @on_orphan.setter
    def on_orphan(self, handler: OrphanHandler | None) -> None:
        self._attempts.on_orphan = handler

    @property
    def on_attempt(self) -> AttemptObserver | None:
        return self._attempts.on_attempt

    @on_attempt.setter
    def on_attempt(self, observer: AttemptObserver | None) -> None:
        self._attempts.on_attempt = observer

    @property
    def on_abandoned_send(self) -> AbandonedSendHandler | None:
        return self._attempts.on_abandoned_send

    @on_abandoned_send.setter
    def on_abandoned_send(self, handler: AbandonedSendHandler | None) -> None:
        self._attempts.on_abandoned_send = handler

    @property
    def in_fleet(self) -> bool:
        """Other live instances share the bots (set by app.store.leases)."""
        return self._router.in_fleet

    @in_fleet.setter
    def in_fleet(self, value: bool) -> None:
        self._router.in_fleet = value

    @property
    def bots_expected(self) -> bool:
        """Leases of a dead instance pass here or to another live one once
        they expire (set by app.store.leases): jobs wait for those bots."""
        return self._router.bots_expected

    @bots_expected.setter
    def bots_expected(self, value: bool) -> None:
        self._router.bots_expected = value

    # --- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        self._accepting = True
        for worker in self.workers.values():
            if worker.usable:
                self._start_lanes(worker)

    def _start_lanes(self, worker: BotWorker) -> None:
        """Run the bot's lanes (until `stop`), unless they run already: from
        the start for a bot in the pool, from its first check for the others.
        What a lane may run is routing's to say (`Router.next_job`)."""
        if not self._accepting:
            return
        lanes = [(worker, "worker"), (worker.small, "small-calls")]
        for lane, name in lanes if self.small_lane else lanes[:1]:
            if lane.task is None or lane.task.done():
                lane.task = asyncio.create_task(
                    self._lane_loop(worker, lane), name=f"bot-{name}-{worker.bot_id}"
                )

    async def stop(self, grace: float = 30.0) -> None:
        """Two-phase stop: take no new jobs, let queued and running ones finish
        within `grace` seconds, then cancel what is left."""
        self._accepting = False
        self._router.update_idle()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._router.idle.wait()
        closed = DispatcherClosed("the dispatcher stopped before the job could run")
        for job in self._router.cancel_delayed():
            job.fail(closed)
        lanes = [lane for w in self.workers.values() for lane in (w, w.small)]
        tasks = [lane.task for lane in lanes if lane.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for lane in lanes:
            for job in lane.queue:
                job.fail(closed)
            lane.queue.clear()
        await self.close_clients()
        log.info("dispatcher_stopped", workers=len(tasks))

    async def close_clients(self) -> None:
        """Close the bots' HTTP clients (again: harmless)."""
        for worker in self.workers.values():
            await worker.client.aclose()

    # --- public calls ---------------------------------------------------------

    async def send_document(
        self,
        data: bytes | bytearray | ChunkPieces | DocumentBody,
        filename: str,
        *,
        caption: str | None = None,
        chat_id: int | None = None,
        replicas: ReplicaGroup | None = None,
        even_if_full: bool = False,
    ) -> StoredDocument:
        """Store `data` as a document through some bot, in `chat_id` or else in
        the storage chat its bot can post to soonest (the result says which).
        A send of one of several copies names their `replicas`: it goes to a
        bot none of the others has, where the pool allows. A full chat takes
        none (ChatsFull) unless `even_if_full` (a probe, deleted at once)."""
        if chat_id is None:
            self.require_open_chats()
        elif not even_if_full and self.fill.full(chat_id):
            raise self.fill.refusal()

        def run(client: BotClient, chat: int) -> Awaitable[StoredDocument]:
            return client.send_document(chat, data, filename, caption=caption)

        document: StoredDocument = await self._submit(
            "sendDocument", run, is_send=True, chat_id=chat_id, replicas=replicas
        )
        self.fill.saw(document.chat_id, document.message_id)
        return document

    def open_chat_ids(self) -> list[int]:
        """The storage chats that take new writes (not full)."""
        return self.fill.open_chats(self.chat_ids)

    def require_open_chats(self) -> list[int]:
        """`open_chat_ids`, or ChatsFull when there is none: a write can
        fail at once, before anything of it is sent."""
        chats = self.open_chat_ids()
        if not chats:
            raise self.fill.refusal()
        return chats

    def replica_chats(self, copies: int) -> list[int | None]:
        """The chat each of a chunk's `copies` goes to: distinct storage chats
        some usable bot may post to, taken in turn so that every chat gets
        its share; None (the send chooses) for a copy beyond them. One copy
        chooses its chat itself, as every send did before replicas."""
        if copies <= 1:
            return [None] * copies
        open_chats = [
            chat
            for chat in self.open_chat_ids()
            if any(w.usable and chat in w.chats for w in self.workers.values())
        ]
        if not open_chats:
            return [None] * copies
        turn = next(self._replica_turns) % len(open_chats)
        ordered = open_chats[turn:] + open_chats[:turn]
        chosen: list[int | None] = list(ordered[:copies])
        return chosen + [None] * (copies - len(chosen))

    async def forward_message(
        self, from_chat_id: int, message_id: int, *, exclude: set[int] | None = None
    ) -> StoredDocument:
        """Forward a stored document through another bot, giving that bot a
        file_id of its own (file_ids cannot move between bots). The copy goes
        to the same chat, so the bots that can reach the original reach it."""

        def run(client: BotClient, chat: int) -> Awaitable[StoredDocument]:
            return client.forward_message(chat, from_chat_id, message_id)

        # Into a full chat too: it keeps stored data reachable, and goes at once.
        document: StoredDocument = await self._submit(
            "forwardMessage", run, is_send=True, exclude=exclude, chat_id=from_chat_id
        )
        self.fill.saw(document.chat_id, document.message_id)
        return document

    async def file_path(self, bot_id: int, file_id: str, size: int | None = None) -> str:
        """getFile through the bot that holds `file_id` (file_ids are bot-
        scoped). A reader waits for it: it goes ahead of queued uploads.
        `size`: the file's, for the call's time budget (getFile downloads it)."""
        location = await self.call(
            bot_id, "getFile", lambda client: client.get_file(file_id, size), priority=True
        )
        return location.file_path

    async def call(
        self,
        bot_id: int,
        kind: str,
        run: Callable[[BotClient], Awaitable[T]],
        *,
        priority: bool = False,
    ) -> T:
        """Run a call that must use one particular bot (getFile, deleteMessage...):
        in its small-call lane if it is a small call (`SMALL_CALLS`).
        `priority`: a reader waits for it; it goes ahead of queued uploads."""
        return await self._submit(
            kind, lambda client, _chat: run(client), pinned_bot=bot_id, priority=priority
        )

    async def check(self, bot_id: int, kind: str, run: Callable[[BotClient], Awaitable[T]]) -> T:
        """A call of the bot's check (getMe, getChatMember: app.telegram.probe),
        through its lanes like any other, but also before it is admitted to
        the pool. Raises NotHeldHere while another instance holds the bot."""
        self._start_lanes(self.workers[bot_id])
        return await self._submit(
            kind, lambda client, _chat: run(client), pinned_bot=bot_id, check=True
        )

    def client_for(self, bot_id: int) -> BotClient | None:
        """The client of a usable bot, for streaming file downloads."""
        worker = self.workers.get(bot_id)
        return worker.client if worker is not None and worker.usable else None

    def serves(self, bot_id: int) -> bool:
        """Whether a call with the bot can run on this instance now."""
        worker = self.workers.get(bot_id)
        return worker is not None and worker.serving(self._clock())

    def in_service(self, bot_id: int) -> bool:
        """Whether the bot works, or will soon, somewhere in the fleet: usable
        here or held back for its check here (another instance may hold
        it), not out of the pool for good."""
        worker = self.workers.get(bot_id)
        return worker is not None and (worker.usable or worker.probing)

    def download_client(self, bot_id: int) -> BotClient | None:
        """The client of a configured bot, for downloading a file from a path
        another instance got: that is no method call and needs no lease."""
        worker = self.workers.get(bot_id)
        return worker.client if worker is not None else None

    # --- jobs in, jobs run ----------------------------------------------------

    def pick_bot(self, exclude: set[int] | frozenset[int] = frozenset()) -> BotWorker | None:
        """The bot a new job would go to now (see `Router.pick_bot`)."""
        return self._router.pick_bot(exclude)

    async def _submit(
        self,
        kind: str,
        run: Callable[[BotClient, int], Awaitable[T]],
        *,
        pinned_bot: int | None = None,
        is_send: bool = False,
        exclude: set[int] | None = None,
        priority: bool = False,
        chat_id: int | None = None,
        replicas: ReplicaGroup | None = None,
        check: bool = False,
    ) -> T:
        if not self._accepting:
            raise DispatcherClosed("the dispatcher is not accepting jobs")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        job = Job(
            id=next(self._job_ids),
            kind=kind,
            run=run,
            future=future,
            pinned_bot=pinned_bot,
            chat_id=chat_id,
            is_send=is_send,
            priority=priority,
            tried=set(exclude or ()),
            enqueued_at=self._clock(),
            replicas=replicas,
            small=self.small_lane and pinned_bot is not None and kind in SMALL_CALLS,
            check=check,
        )
        self._router.route(job)
        # If our caller is cancelled, awaiting the future cancels it, and a job
        # that has not started is then dropped by the worker.
        return await future

    async def _lane_loop(self, worker: BotWorker, lane: Lane) -> None:
        while True:
            lane.wake.clear()
            job, wait = self._router.next_job(worker, lane)
            if job is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await lane.wake.wait()
                continue
            await self._attempts.run(worker, job)
