"""The per-bot dispatcher: one asyncio worker per bot token.

Why it exists: Telegram answers two concurrent calls on one token with a 429 and
a 30-60 s wait. The predecessor picked bots round-robin inside one global queue,
so two uploads landed on one bot, and those waits made `docker push` fail.

How it works (see shared/reference/per-bot-queue-design.md, made better):

* Every bot has a worker that runs **one call at a time**, so no token ever has
  two calls in flight.
* A new upload goes to the usable bot with the fewest queued + running jobs
  that is not cooling down (`pick_bot`). A worker that is idle takes a waiting
  upload from another bot's queue, so a job never waits behind a busy or
  rate-limited bot while another bot could run it.
* 429 on a bot: it cools down for `retry_after` seconds; the job, and every
  upload queued behind it, moves to other bots at once. If every bot is cooling
  down, the job waits for the one whose cooldown ends first.
* A call cut off by its time budget (`CallAbandoned`) may still be running at
  Telegram, so the token counts as busy for `abandoned_hold` seconds (it cools
  down, like after a 429) and the job moves to another bot at once. Retrying on
  the same token would put two calls on it: the very collision this design
  exists to prevent. A send given up this way may still post its message; it
  is counted (`on_abandoned_send`) for the reconciliation of orphans.
* Transient error (5xx, connection): retry on the same bot with
  exponential backoff, up to `TRANSIENT_TRIES_PER_BOT` tries, then another bot.
  When every usable bot has failed the job transiently, wait ~5 s and start over.
* Permanent error: the job fails at once with Telegram's description.
* 401/403: the bot leaves the pool (logged once); with no usable bot left every
  job fails fast with `NoUsableBot`.
* Built with `checked=False`, every bot waits outside the pool until its getMe
  check passes (`admit`, from app.telegram.probe), so the service need not wait
  for every bot before it starts. A bot is admitted for the storage chats where
  it may post; sends go only there. A 403 on a send (kicked from that chat)
  takes the bot out of that chat alone while it has others.
* At most `max_attempts` attempts per job across all bots (429s count too, so a
  job cannot loop forever), then it fails with the last error.
* Optional pacing: at most `sends_per_minute` uploads per (bot, chat) per
  minute, so a steady load draws few 429s in the first place. Telegram counts
  a bot's posts per chat, so with several storage chats (`chat_ids`) each bot
  has that budget in every chat: a new chunk goes to the chat where its bot
  can post soonest (ties: the chat that has been given the fewest chunks).
  Sends into a given chat (a forward, a reconciliation probe) wait for that
  chat's budget only.
* Several instances on one database (`require_leases`): a bot works only while
  this instance holds its lease (`grant`, from app.telegram.leases) and never
  starts a call past the lease's end; `revoke` stops it, moving its queue to
  other bots and waiting for its running call, before the lease moves on.

Only Bot API *method* calls go through the workers. Downloading a file's bytes
(`/file/bot<token>/...`) is not a method call and is not rate-limited the same
way; it uses the bot's client directly (`client_for`), so a long download does
not stall that bot's uploads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from app.telegram.client import BotClient
from app.telegram.errors import (
    BotUnusable,
    CallAbandoned,
    DispatcherClosed,
    NoUsableBot,
    RateLimited,
    TelegramError,
    TransientError,
)
from app.telegram.types import BotInfo, StoredDocument

log = structlog.get_logger("app.telegram.dispatcher")

T = TypeVar("T")

TRANSIENT_TRIES_PER_BOT = 3
TRANSIENT_BACKOFF_BASE = 0.5
ALL_FAILED_PAUSE = 5.0
# How long a token stays out of use after a call on it was abandoned: Telegram
# may still be storing the upload (it gets the server allowance of the budget,
# 30 s) and answers a second call meanwhile with a 30-60 s wait.
ABANDONED_CALL_HOLD = 60.0
PACING_WINDOW = 60.0
# How often a job no leased bot can run looks again for one.
LEASE_WAIT = 0.5

OrphanHandler = Callable[[StoredDocument], None]
# (bot_id, method, outcome, seconds) after every attempt, for metrics.
AttemptObserver = Callable[[int, str, str, float], None]
# (bot_id) when a send was given up while Telegram may still post it.
AbandonedSendHandler = Callable[[int], None]


@dataclass(eq=False)
class Job(Generic[T]):
    """One Telegram call, re-runnable on every attempt (its payload is bytes)."""

    id: int
    kind: str
    # Given the bot's client and the chat the attempt goes to.
    run: Callable[[BotClient, int], Awaitable[T]]
    future: asyncio.Future[T]
    pinned_bot: int | None = None
    # The chat a send must go to; None: whichever storage chat its bot can post
    # to soonest, chosen at each attempt.
    chat_id: int | None = None
    # Uploads count against the per-bot pacing budget.
    is_send: bool = False
    # A download waits for it (getFile): it goes ahead of the bot's queued
    # uploads, behind earlier priority jobs. Still one call at a time per token.
    priority: bool = False
    attempts: int = 0
    # The chat the latest attempt went to.
    last_chat: int | None = None
    tried: set[int] = field(default_factory=set)
    transient_tries: dict[int, int] = field(default_factory=dict)
    last_error: BaseException | None = None
    enqueued_at: float = 0.0

    @property
    def abandoned(self) -> bool:
        """The caller went away (its await was cancelled) or the job is settled."""
        return self.future.done()


@dataclass(frozen=True, slots=True)
class BotStatus:
    bot_id: int
    usable: bool
    cooling_down_for: float
    queued: int
    running: bool
    sends: int
    bytes_sent: int
    rate_limited: int
    abandoned: int
    errors: dict[str, int]
    probing: bool = False
    chats: tuple[int, ...] = ()


class BotWorker:
    """State of one bot plus the loop that runs its jobs one at a time."""

    def __init__(self, client: BotClient, index: int, chats: set[int]) -> None:
        self.client = client
        self.bot_id = client.bot_id
        self.index = index
        # The storage chats this bot may post to (those its check passed in).
        self.chats = chats
        self.queue: deque[Job[Any]] = deque()
        self.running: Job[Any] | None = None
        self.usable = True
        # Held back until its getMe check passes (app.telegram.probe), and why
        # its latest check did not.
        self.probing = False
        self.check_problem: str | None = None
        self.cooldown_until = 0.0
        # Several instances: whether this one holds the bot's lease, and the
        # monotonic time past which it must not start a call (app.telegram.leases).
        self.leased = True
        self.lease_until = math.inf
        # A getMe check runs on the client outside the worker (app.telegram.probe).
        self.checking = False
        # Set when a call or check ends or a lease is granted: what `revoke`
        # and a check waiting for its lease wait for.
        self.changed = asyncio.Event()
        self.last_assigned = 0
        # When this bot's recent sends were posted, per chat (pacing).
        self.send_times: dict[int, deque[float]] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        # Counters for /ready and /metrics.
        self.sends = 0
        self.bytes_sent = 0
        self.rate_limited = 0
        self.abandoned = 0
        self.errors: dict[str, int] = {}

    @property
    def load(self) -> int:
        return len(self.queue) + (1 if self.running is not None else 0)

    def cooling(self, now: float) -> bool:
        return self.cooldown_until > now

    def serving(self, now: float) -> bool:
        """Usable, and this instance may call Telegram with it now."""
        return self.usable and self.leased and now < self.lease_until

    def recent_sends(self, chat_id: int, now: float, window: float) -> deque[float]:
        """This bot's sends into `chat_id` in the last `window` seconds."""
        times = self.send_times.setdefault(chat_id, deque())
        while times and times[0] <= now - window:
            times.popleft()
        return times

    def pacing_delay(self, chat_id: int, now: float, budget: int, window: float) -> float:
        """Seconds until this bot may send another document into `chat_id`
        (0 = now): at most `budget` sends there in any `window` seconds."""
        times = self.recent_sends(chat_id, now, window)
        if budget <= 0 or len(times) < budget:
            return 0.0
        return times[0] + window - now


class Dispatcher:
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
        abandoned_hold: float = ABANDONED_CALL_HOLD,
        checked: bool = True,
    ) -> None:
        """`checked=False`: every bot waits outside the pool until `admit`
        (after its getMe check passed) or `reject`."""
        if not clients:
            raise ValueError("the dispatcher needs at least one bot")
        if not chat_ids:
            raise ValueError("the dispatcher needs at least one storage chat")
        self.chat_ids = list(chat_ids)
        # Chunks given to each chat since the start: ties go to the least given.
        self.chat_sends: dict[int, int] = dict.fromkeys(self.chat_ids, 0)
        self.max_attempts = max_attempts
        self.sends_per_minute = sends_per_minute
        self.on_orphan = on_orphan
        self.on_attempt = on_attempt
        self.on_abandoned_send = on_abandoned_send
        self._clock = clock
        self._abandoned_hold = abandoned_hold
        self._transient_backoff = transient_backoff
        self._all_failed_pause = all_failed_pause
        self._pacing_window = pacing_window
        self.workers: dict[int, BotWorker] = {
            c.bot_id: BotWorker(c, index, set(self.chat_ids)) for index, c in enumerate(clients)
        }
        if not checked:
            for worker in self.workers.values():
                worker.usable = False
                worker.probing = True
        self._leasing = False
        # Other live instances share the bots (set by app.telegram.leases).
        self.in_fleet = False
        self._job_ids = itertools.count(1)
        self._assignments = itertools.count(1)
        self._accepting = False
        self._delayed: set[asyncio.TimerHandle] = set()
        self._delayed_jobs: set[Job[Any]] = set()
        # Set whenever no job is queued, running or waiting to be re-routed.
        self._idle = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        self._accepting = True
        for worker in self.workers.values():
            if worker.usable:
                self._start_worker(worker)

    def _start_worker(self, worker: BotWorker) -> None:
        worker.task = asyncio.create_task(
            self._worker_loop(worker), name=f"bot-worker-{worker.bot_id}"
        )

    def admit(self, bot_id: int, chats: Sequence[int] | None = None) -> None:
        """A held-back bot passed its check: it joins the pool now, for
        `chats` only if given (the storage chats it may post to)."""
        worker = self.workers[bot_id]
        if not worker.probing:
            return
        if chats is not None:
            worker.chats = set(chats) & set(self.chat_ids)
        worker.probing = False
        worker.usable = True
        if self._accepting:
            self._start_worker(worker)
        self._wake_all()

    def note_check_problem(self, bot_id: int, problem: str) -> None:
        """Why a held-back bot's latest check did not pass (told to callers
        while no bot is admitted)."""
        self.workers[bot_id].check_problem = problem

    # --- leases (several instances) ---------------------------------------------

    def require_leases(self) -> None:
        """Run a bot only while its lease is granted (call before `start`)."""
        self._leasing = True
        for worker in self.workers.values():
            worker.leased = False
            worker.lease_until = 0.0

    def grant(self, bot_id: int, until: float, cooldown_until: float) -> None:
        """This instance holds the bot's lease: it may start calls until
        `until` (monotonic), not before `cooldown_until` (a 429 on the lease)."""
        worker = self.workers[bot_id]
        newly = not worker.leased
        worker.leased = True
        worker.lease_until = until
        worker.cooldown_until = max(worker.cooldown_until, cooldown_until)
        worker.changed.set()
        if newly:
            self._wake_all()

    async def revoke(self, bot_id: int) -> None:
        """Stop the bot before its lease moves: no new call, its queue to
        other bots, and back once its running call (or check) has ended."""
        worker = self.workers[bot_id]
        worker.leased = False
        worker.lease_until = 0.0
        self._move_queue_away(worker, include_pinned=True)
        while worker.running is not None or worker.checking:
            worker.changed.clear()
            await worker.changed.wait()

    def lease_left(self, bot_id: int) -> bool:
        """Whether this instance may still start a call with the bot."""
        worker = self.workers[bot_id]
        return worker.leased and self._clock() < worker.lease_until

    def leased_bots(self) -> list[int]:
        return [w.bot_id for w in self.workers.values() if w.leased]

    def serving_bots(self, chat_id: int | None = None) -> list[int]:
        """The bots that can take a call on this instance now; with
        `chat_id`, those that may act in it (see `usable_bots`)."""
        now = self._clock()
        return [
            w.bot_id
            for w in self.workers.values()
            if w.serving(now)
            and (chat_id is None or chat_id in w.chats or chat_id not in self.chat_ids)
        ]

    def pool_size(self) -> int:
        """The bots the work here can count on: usable ones, and with leases
        also those another instance holds (it checked them; they come here
        when the work does). A bot held here counts once its check passed."""
        return sum(
            1
            for w in self.workers.values()
            if w.usable or (self._leasing and w.probing and not w.leased)
        )

    def backlog(self) -> int:
        """Jobs waiting or running here: what bots are wanted for."""
        return self._pending_jobs()

    def reject(self, bot_id: int) -> None:
        """A held-back bot failed its check for good: it stays out."""
        self.workers[bot_id].probing = False

    def probing_bots(self) -> list[int]:
        """The bots held back until their check passes."""
        return [w.bot_id for w in self.workers.values() if w.probing]

    async def stop(self, grace: float = 30.0) -> None:
        """Two-phase stop: take no new jobs, let queued and running ones finish
        within `grace` seconds, then cancel what is left."""
        self._accepting = False
        self._update_idle()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._idle.wait()
        for handle in self._delayed:
            handle.cancel()
        self._delayed.clear()
        closed = DispatcherClosed("the dispatcher stopped before the job could run")
        for job in list(self._delayed_jobs):
            self._fail(job, closed)
        self._delayed_jobs.clear()
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for worker in self.workers.values():
            for job in worker.queue:
                self._fail(job, closed)
            worker.queue.clear()
            await worker.client.aclose()
        log.info("dispatcher_stopped", workers=len(tasks))

    def _pending_jobs(self) -> int:
        queued = sum(w.load for w in self.workers.values())
        return queued + len(self._delayed_jobs)

    # --- public calls -------------------------------------------------------------

    async def send_document(
        self,
        data: bytes | bytearray,
        filename: str,
        *,
        caption: str | None = None,
        chat_id: int | None = None,
    ) -> StoredDocument:
        """Store `data` as a document through some bot, in `chat_id` or else in
        the storage chat its bot can post to soonest (the result says which)."""

        def run(client: BotClient, chat: int) -> Awaitable[StoredDocument]:
            return client.send_document(chat, data, filename, caption=caption)

        return await self._submit("sendDocument", run, is_send=True, chat_id=chat_id)

    async def forward_message(
        self, from_chat_id: int, message_id: int, *, exclude: set[int] | None = None
    ) -> StoredDocument:
        """Forward a stored document through another bot, giving that bot a
        file_id of its own (file_ids cannot move between bots). The copy goes
        to the same chat, so the bots that can reach the original reach it."""

        def run(client: BotClient, chat: int) -> Awaitable[StoredDocument]:
            return client.forward_message(chat, from_chat_id, message_id)

        return await self._submit(
            "forwardMessage", run, is_send=True, exclude=exclude, chat_id=from_chat_id
        )

    async def call(
        self,
        bot_id: int,
        kind: str,
        run: Callable[[BotClient], Awaitable[T]],
        *,
        priority: bool = False,
    ) -> T:
        """Run a call that must use one particular bot (getFile, deleteMessage...).
        `priority`: a reader waits for it; it goes ahead of queued uploads."""
        return await self._submit(
            kind, lambda client, _chat: run(client), pinned_bot=bot_id, priority=priority
        )

    async def verify_bots(self) -> dict[int, BotInfo | TelegramError]:
        """getMe on every bot; a revoked token takes its bot out of the pool."""

        async def check(bot_id: int) -> BotInfo | TelegramError:
            try:
                return await self.call(bot_id, "getMe", lambda c: c.get_me())
            except TelegramError as exc:
                return exc

        ids = list(self.workers)
        results = await asyncio.gather(*(check(bot_id) for bot_id in ids))
        return dict(zip(ids, results, strict=True))

    def client_for(self, bot_id: int) -> BotClient | None:
        """The client of a usable bot, for streaming file downloads."""
        worker = self.workers.get(bot_id)
        return worker.client if worker is not None and worker.usable else None

    def usable_bots(self, chat_id: int | None = None) -> list[int]:
        """The bots in the pool; with `chat_id`, those that may act in it (a
        chat that is no storage chat any more was not checked: any bot)."""
        return [
            w.bot_id
            for w in self.workers.values()
            if w.usable and (chat_id is None or chat_id in w.chats or chat_id not in self.chat_ids)
        ]

    def seconds_until_free(self) -> float:
        """How long until some usable bot is likely to take a new job: the
        shortest cooldown left, counting a bot that is not cooling down (it
        failed transiently) as the pause the pool waits after such failures."""
        now = self._clock()
        waits = [
            w.cooldown_until - now if w.cooling(now) else self._all_failed_pause
            for w in self.workers.values()
            if w.usable
        ]
        return min(waits, default=self._all_failed_pause)

    def status(self) -> list[BotStatus]:
        now = self._clock()
        return [
            BotStatus(
                bot_id=w.bot_id,
                usable=w.usable,
                cooling_down_for=max(0.0, w.cooldown_until - now),
                queued=len(w.queue),
                running=w.running is not None,
                sends=w.sends,
                bytes_sent=w.bytes_sent,
                rate_limited=w.rate_limited,
                abandoned=w.abandoned,
                errors=dict(w.errors),
                probing=w.probing,
                chats=tuple(c for c in self.chat_ids if c in w.chats and not w.probing),
            )
            for w in self.workers.values()
        ]

    # --- routing ------------------------------------------------------------------

    def pick_bot(self, exclude: set[int] | frozenset[int] = frozenset()) -> BotWorker | None:
        """The usable, not cooling, not excluded bot with the fewest queued +
        running jobs (ties: the one assigned least recently). None if none."""
        now = self._clock()
        candidates = [
            w
            for w in self.workers.values()
            if w.serving(now) and w.bot_id not in exclude and not w.cooling(now)
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda w: (w.load, w.last_assigned))

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
        )
        self._route(job)
        # If our caller is cancelled, awaiting the future cancels it, and a job
        # that has not started is then dropped by the worker.
        return await future

    def _route(self, job: Job[Any]) -> None:
        """Put a job in the queue of the bot that should run it next."""
        if job.abandoned:
            return
        if job.pinned_bot is not None:
            worker = self.workers.get(job.pinned_bot)
            if worker is None or not worker.serving(self._clock()):
                self._fail(
                    job,
                    BotUnusable(
                        f"bot {job.pinned_bot} is not usable", status=0, bot_id=job.pinned_bot
                    ),
                )
                return
            self._enqueue(worker, job)
            return
        usable = [w for w in self.workers.values() if w.usable]
        if not usable:
            probing = [w for w in self.workers.values() if w.probing]
            if self.in_fleet and probing:
                # Bots other instances hold (and checked) come here with the
                # work once this backlog is published, and are checked here
                # on arrival: wait for one. (Alone, every bot is held here:
                # the caller hears at once that none passed its check yet.)
                self._route_later(job, LEASE_WAIT)
                return
            if probing:
                problems = "; ".join(
                    f"bot {w.bot_id}: {w.check_problem}" for w in probing if w.check_problem
                )
                error = NoUsableBot(
                    "no bot has passed its check (getMe, then its rights in the storage "
                    "chats) yet" + (f" ({problems})" if problems else "")
                )
                # Checks are retried within seconds: worth asking again soon.
                error.pool_wait = self._all_failed_pause
            else:
                error = NoUsableBot("no usable bot is left in the pool")
            self._fail(job, error)
            return
        unable = {w.bot_id for w in usable if not self._serves(w, job)}
        if len(unable) == len(usable):
            where = "a storage chat" if job.chat_id is None else f"chat {job.chat_id}"
            self._fail(job, NoUsableBot(f"no usable bot may post in {where}"))
            return
        now = self._clock()
        if not any(w.serving(now) for w in usable if w.bot_id not in unable):
            # Every such bot's lease is held elsewhere for now: the lease
            # rounds bring bots here once this backlog is published.
            self._route_later(job, LEASE_WAIT)
            return
        usable = [w for w in usable if w.serving(now)]
        untried = [w for w in usable if w.bot_id not in job.tried | unable]
        if not untried:
            # Every usable bot failed this job: pause, forget, start over.
            job.tried.clear()
            delay = self._all_failed_pause * random.uniform(1.0, 1.2)
            log.warning("all_bots_failed_job", job_id=job.id, kind=job.kind, pause=round(delay, 2))
            self._route_later(job, delay)
            return
        worker = self.pick_bot(exclude=job.tried | unable)
        if worker is None:
            # Every candidate is cooling down: queue on the one that frees first.
            # Its worker waits out the cooldown; an idle bot may take it earlier.
            worker = min(untried, key=lambda w: w.cooldown_until)
        self._enqueue(worker, job)

    def _enqueue(self, worker: BotWorker, job: Job[Any], *, front: bool = False) -> None:
        worker.last_assigned = next(self._assignments)
        if front:
            worker.queue.appendleft(job)
        elif job.priority:
            ahead = sum(1 for _ in itertools.takewhile(lambda q: q.priority, worker.queue))
            worker.queue.insert(ahead, job)
        else:
            worker.queue.append(job)
        self._wake_all()

    def _route_later(self, job: Job[Any], delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._delayed_jobs.add(job)

        def fire() -> None:
            self._delayed.discard(handle)
            self._delayed_jobs.discard(job)
            self._route(job)
            self._update_idle()

        handle = loop.call_later(delay, fire)
        self._delayed.add(handle)
        self._update_idle()

    def _wake_all(self) -> None:
        for worker in self.workers.values():
            worker.wake.set()
        self._update_idle()

    def _update_idle(self) -> None:
        if self._pending_jobs() == 0:
            self._idle.set()
        else:
            self._idle.clear()

    # --- the worker loop ----------------------------------------------------------

    async def _worker_loop(self, worker: BotWorker) -> None:
        while worker.usable:
            worker.wake.clear()
            job, wait = self._next_job(worker)
            if job is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await worker.wake.wait()
                continue
            await self._run_attempt(worker, job)

    def _next_job(self, worker: BotWorker) -> tuple[Job[Any] | None, float | None]:
        """The job this worker should run now, or how long to wait for one
        (None: until something changes)."""
        now = self._clock()
        if not worker.serving(now):
            # Not leased here (or the lease ran out unrenewed): no new call.
            self._move_queue_away(worker, include_pinned=True)
            return None, None if not worker.leased else 0.5
        if worker.cooling(now):
            # Jitter so that bots freed at the same moment do not all fire at once.
            return None, worker.cooldown_until - now + random.uniform(0, 0.1)
        self._drop_abandoned(worker)
        pacing: float | None = None  # the shortest wait of a queued send
        for job in worker.queue:
            delay = self._send_delay(worker, job, now)
            if delay == 0:
                worker.queue.remove(job)
                return job, None
            pacing = delay if pacing is None else min(pacing, delay)
        if pacing is not None:
            return None, pacing
        return self._steal_for(worker), None

    def _serves(self, worker: BotWorker, job: Job[Any]) -> bool:
        """Whether `worker` may run `job`: a send needs a chat the bot passed
        its check in (a chat that is no storage chat any more was not checked)."""
        if not job.is_send:
            return True
        if job.chat_id is None:
            return bool(worker.chats)
        return job.chat_id in worker.chats or job.chat_id not in self.chat_ids

    def _chats_of(self, worker: BotWorker, job: Job[Any]) -> list[int]:
        """The chats `worker` may send `job` to."""
        if job.chat_id is not None:
            return [job.chat_id]
        return [chat for chat in self.chat_ids if chat in worker.chats]

    def _send_delay(self, worker: BotWorker, job: Job[Any], now: float) -> float:
        """Seconds until `worker` may run `job` as far as pacing goes (0: now)."""
        if not job.is_send:
            return 0.0
        chats = self._chats_of(worker, job)
        if not chats:  # routing never gives it such a job
            return self._pacing_window
        return min(self._chat_delay(worker, chat, now) for chat in chats)

    def _chat_delay(self, worker: BotWorker, chat_id: int, now: float) -> float:
        return worker.pacing_delay(chat_id, now, self.sends_per_minute, self._pacing_window)

    def _choose_chat(self, worker: BotWorker, job: Job[Any], now: float) -> int:
        """The chat this attempt goes to: the job's own, or the storage chat
        `worker` can post to soonest (ties: the one given the fewest sends,
        then the one it posted to least lately, so chats fill evenly)."""
        if job.chat_id is not None:
            return job.chat_id
        return min(
            self._chats_of(worker, job) or self.chat_ids,
            key=lambda chat: (
                self._chat_delay(worker, chat, now),
                self.chat_sends[chat],
                len(worker.recent_sends(chat, now, self._pacing_window)),
            ),
        )

    def _drop_abandoned(self, worker: BotWorker) -> None:
        if any(job.abandoned for job in worker.queue):
            worker.queue = deque(job for job in worker.queue if not job.abandoned)

    def _steal_for(self, thief: BotWorker) -> Job[Any] | None:
        """Take the oldest waiting, unpinned, not-yet-tried job from another bot."""
        best: Job[Any] | None = None
        owner: BotWorker | None = None
        now = self._clock()
        for other in self.workers.values():
            if other is thief:
                continue
            idle = other.running is None and not other.cooling(now)
            for job in other.queue:
                if job.pinned_bot is not None or job.abandoned or thief.bot_id in job.tried:
                    continue
                if not self._serves(thief, job):
                    continue
                if idle and self._send_delay(other, job, now) == 0:
                    break  # an owner free to run its jobs runs them itself
                if self._send_delay(thief, job, now) > 0:
                    continue  # the thief's own budget for that chat is spent
                if best is None or job.enqueued_at < best.enqueued_at:
                    best, owner = job, other
                break
        if best is None or owner is None:
            return None
        owner.queue.remove(best)
        return best

    async def _run_attempt(self, worker: BotWorker, job: Job[Any]) -> None:
        worker.running = job
        job.attempts += 1
        started = self._clock()
        chat_id = self._choose_chat(worker, job, started) if job.is_send else self.chat_ids[0]
        sent_at: deque[float] | None = None
        job.last_chat = chat_id if job.is_send else None
        if job.is_send:
            sent_at = worker.recent_sends(chat_id, started, self._pacing_window)
            sent_at.append(started)
            if chat_id in self.chat_sends:
                self.chat_sends[chat_id] += 1
        try:
            try:
                result = await job.run(worker.client, chat_id)
            except TelegramError as exc:
                outcome = self._outcome_name(exc)
                worker.errors[outcome] = worker.errors.get(outcome, 0) + 1
                await self._on_error(worker, job, exc)
            except Exception as exc:  # a bug: surface it to the caller, keep the worker
                outcome = "crashed"
                worker.errors[outcome] = worker.errors.get(outcome, 0) + 1
                log.exception("job_crashed", bot_id=worker.bot_id, job_id=job.id, kind=job.kind)
                self._fail(job, exc)
            else:
                outcome = "ok"
                self._succeed(worker, job, result)
        except asyncio.CancelledError:
            # Only stop() cancels a worker; the caller must not wait forever.
            self._fail(job, DispatcherClosed("the dispatcher stopped during the call"))
            raise
        finally:
            if sent_at is not None:
                # Telegram counts a message when it is posted, at the end of
                # the upload, not when the call starts. (A call longer than
                # the window may have seen its start pruned meanwhile.)
                if sent_at:
                    sent_at[-1] = self._clock()
                else:
                    sent_at.append(self._clock())
            worker.running = None
            worker.changed.set()
            self._wake_all()
        seconds = self._clock() - started
        log.debug(
            "job_attempt",
            bot_id=worker.bot_id,
            job_id=job.id,
            kind=job.kind,
            attempt=job.attempts,
            outcome=outcome,
            seconds=round(seconds, 3),
        )
        if self.on_attempt is not None:
            self.on_attempt(worker.bot_id, job.kind, outcome, seconds)

    @staticmethod
    def _outcome_name(exc: TelegramError) -> str:
        if isinstance(exc, RateLimited):
            return "rate_limited"
        if isinstance(exc, CallAbandoned):
            return "abandoned"
        if isinstance(exc, TransientError):
            return "transient"
        if isinstance(exc, BotUnusable):
            return "bot_unusable"
        return "permanent"

    async def _on_error(self, worker: BotWorker, job: Job[Any], exc: TelegramError) -> None:
        if isinstance(exc, RateLimited):
            self._on_rate_limited(worker, job, exc)
        elif isinstance(exc, CallAbandoned):
            self._on_abandoned(worker, job, exc)
        elif isinstance(exc, TransientError):
            await self._on_transient(worker, job, exc)
        elif isinstance(exc, BotUnusable):
            self._on_unusable(worker, job, exc)
        else:
            self._fail(job, exc)

    # --- outcomes -----------------------------------------------------------------

    def _succeed(self, worker: BotWorker, job: Job[Any], result: Any) -> None:
        if isinstance(result, StoredDocument):
            worker.sends += 1
            worker.bytes_sent += max(result.size, 0)
        if job.future.done():
            # The caller left while the call ran: the message exists but nobody
            # will record it. Hand it to whoever deletes orphans.
            if isinstance(result, StoredDocument):
                log.warning("orphaned_document", bot_id=worker.bot_id, message_id=result.message_id)
                if self.on_orphan is not None:
                    self.on_orphan(result)
            return
        job.future.set_result(result)

    def _fail(self, job: Job[Any], exc: BaseException) -> None:
        if not job.future.done():
            job.future.set_exception(exc)

    def _budget_left(self, job: Job[Any], exc: TelegramError) -> bool:
        job.last_error = exc
        if job.attempts >= self.max_attempts:
            log.warning(
                "job_failed_attempts_exhausted",
                job_id=job.id,
                kind=job.kind,
                attempts=job.attempts,
                error=str(exc),
            )
            exc.pool_wait = self.seconds_until_free()
            self._fail(job, exc)
            return False
        return True

    def _on_rate_limited(self, worker: BotWorker, job: Job[Any], exc: RateLimited) -> None:
        worker.rate_limited += 1
        log.warning("bot_rate_limited", bot_id=worker.bot_id, retry_after=exc.retry_after)
        self._cool_down(worker, job, exc, exc.retry_after, avoid=False)

    def _on_abandoned(self, worker: BotWorker, job: Job[Any], exc: CallAbandoned) -> None:
        worker.abandoned += 1
        log.warning(
            "bot_call_abandoned",
            bot_id=worker.bot_id,
            job_id=job.id,
            kind=job.kind,
            hold=self._abandoned_hold,
            error=str(exc),
        )
        if job.is_send and self.on_abandoned_send is not None:
            self.on_abandoned_send(worker.bot_id)
        # Its own call may still be running there: the retry must go elsewhere.
        self._cool_down(worker, job, exc, self._abandoned_hold, avoid=True)

    def _cool_down(
        self, worker: BotWorker, job: Job[Any], exc: TelegramError, seconds: float, *, avoid: bool
    ) -> None:
        """Keep `worker` out of use for `seconds` and send the job elsewhere
        (`avoid`: never back to this bot in this round); a pinned job waits."""
        worker.cooldown_until = max(worker.cooldown_until, self._clock() + seconds)
        # Jobs queued behind this bot do not wait out its cooldown.
        self._move_queue_away(worker)
        if not self._budget_left(job, exc):
            return
        if job.pinned_bot is not None:
            self._enqueue(worker, job, front=True)
            return
        if avoid:
            job.tried.add(worker.bot_id)
        self._route(job)

    async def _on_transient(self, worker: BotWorker, job: Job[Any], exc: TransientError) -> None:
        log.info("bot_transient_error", bot_id=worker.bot_id, job_id=job.id, error=str(exc))
        if not self._budget_left(job, exc):
            return
        tries_here = job.transient_tries.get(worker.bot_id, 0) + 1
        job.transient_tries[worker.bot_id] = tries_here
        if tries_here < TRANSIENT_TRIES_PER_BOT or job.pinned_bot is not None:
            # The worker itself backs off: this bot just failed, so it takes no
            # other job meanwhile; jobs queued behind it can be taken by idle bots.
            delay = self._transient_backoff * 2 ** (tries_here - 1)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            if not job.abandoned:
                self._enqueue(worker, job, front=True)
            return
        job.tried.add(worker.bot_id)
        self._route(job)

    def _on_unusable(self, worker: BotWorker, job: Job[Any], exc: BotUnusable) -> None:
        chat = job.last_chat
        if exc.status == 403 and chat is not None and worker.chats - {chat}:
            # Kicked from one chat (or its rights taken): the bot still works
            # in its other chats, and the send goes elsewhere.
            worker.chats.discard(chat)
            log.error(
                "bot_removed_from_chat",
                bot_id=worker.bot_id,
                chat_id=chat,
                reason=exc.description,
                chats_left=len(worker.chats),
            )
            self._move_queue_away(worker)
            if self._budget_left(job, exc):
                self._route(job)
            return
        if worker.usable:
            worker.usable = False
            log.error(
                "bot_removed_from_pool",
                bot_id=worker.bot_id,
                status=exc.status,
                reason=exc.description,
                usable_bots=len(self.usable_bots()),
            )
        self._move_queue_away(worker, include_pinned=True)
        if job.pinned_bot is not None:
            self._fail(job, exc)
        elif self._budget_left(job, exc):
            self._route(job)

    def _move_queue_away(self, worker: BotWorker, *, include_pinned: bool = False) -> None:
        """Re-route the waiting jobs of a bot that cannot serve them now."""
        staying: deque[Job[Any]] = deque()
        moving: list[Job[Any]] = []
        for job in worker.queue:
            if job.pinned_bot is None or include_pinned:
                moving.append(job)
            else:
                staying.append(job)
        worker.queue = staying
        for job in moving:
            self._route(job)
