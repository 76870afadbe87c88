"""Routing: which bot runs a job, and which job a free bot runs next.

* A new job goes to the serving bot with the fewest queued + running jobs
  that is not cooling down (`pick_bot`; ties: the one assigned least
  recently). If every candidate is cooling down, it queues on the one that
  frees first.
* A worker that is free takes its own queued jobs first, in order, skipping
  sends its pacing holds back; with nothing runnable it takes the oldest
  waiting job from another bot's queue (`steal_for`), so a job never waits
  behind a busy or rate-limited bot while another bot could run it.
* A send goes only to a bot that passed its check in a chat it may go to
  (`serves`), and each attempt picks its chat (`choose_chat`): the job's own,
  or the storage chat the bot can post to soonest, ties to the chat given
  the fewest chunks so far, so chats fill evenly.
* When every usable bot has failed a job (`Job.tried`), the job waits
  `all_failed_pause` and starts over; when no bot may take it here, it fails
  at once with `NoUsableBot`, unless other instances hold bots that will come
  with the work (`in_fleet`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from app.kit import jitter
from app.telegram.errors import BotUnusable, NotHeldHere, NoUsableBot, TelegramError
from app.telegram.worker import BotWorker, Job, Lane

# The dispatcher's logger: its events keep the name they always had.
log = structlog.get_logger("app.telegram.dispatcher")

# How often a job no leased bot can run looks again for one.
LEASE_WAIT = 0.5


class Router:
    """The bots' queues, and the rules that fill and drain them."""

    def __init__(
        self,
        workers: dict[int, BotWorker],
        chat_ids: list[int],
        *,
        clock: Callable[[], float],
        sends_per_minute: int,
        pacing_window: float,
        all_failed_pause: float,
    ) -> None:
        self.workers = workers
        self.chat_ids = chat_ids
        # Chunks given to each chat since the start: ties go to the least given.
        self.chat_sends: dict[int, int] = dict.fromkeys(chat_ids, 0)
        self.sends_per_minute = sends_per_minute
        self.pacing_window = pacing_window
        self.all_failed_pause = all_failed_pause
        self._clock = clock
        # Other live instances share the bots (set by app.store.leases).
        self.in_fleet = False
        # Leases held by an instance no longer alive (killed) pass when they
        # expire: their bots come to the live ones then (app.store.leases).
        self.bots_expected = False
        # Whether a chat holds CHAT_MESSAGE_LIMIT messages: a send that may
        # choose its chat avoids it (set by the dispatcher: its ChatFill).
        self.is_full: Callable[[int], bool] = lambda chat_id: False
        # The refusal that took the last bot out of a chat (a "chat not
        # found" says the chat is gone), for every job that later finds no
        # bot there, whichever job met it: forgotten once a bot is back.
        self.last_refusal: dict[int, TelegramError] = {}
        self._assignments = itertools.count(1)
        self._delayed: set[asyncio.TimerHandle] = set()
        self._delayed_jobs: set[Job[Any]] = set()
        # Set whenever no job is queued, running or waiting to be re-routed.
        self.idle = asyncio.Event()

    # --- a job to a bot -----------------------------------------------------------

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

    def route(self, job: Job[Any]) -> None:
        """Put a job in the queue of the bot that should run it next."""
        if job.abandoned:
            return
        if job.pinned_bot is not None:
            worker = self.workers.get(job.pinned_bot)
            now = self._clock()
            if worker is not None and (worker.held(now) if job.check else worker.serving(now)):
                self.enqueue(worker, job)
            elif worker is not None and job.check:
                # Not the bot's fault: another instance may call with it now.
                job.fail(
                    NotHeldHere(
                        f"bot {worker.bot_id} is not held here", status=0, bot_id=worker.bot_id
                    )
                )
            else:
                job.fail(
                    BotUnusable(
                        f"bot {job.pinned_bot} is not usable", status=0, bot_id=job.pinned_bot
                    ),
                )
            return
        usable = [w for w in self.workers.values() if w.usable]
        if not usable:
            self._no_usable_bot(job)
            return
        unable = {w.bot_id for w in usable if not self.serves(w, job)}
        if len(unable) == len(usable):
            where = "a storage chat" if job.chat_id is None else f"chat {job.chat_id}"
            error = NoUsableBot(f"no usable bot may post in {where}")
            # What refused the last bot there, if that is why ("chat not
            # found": the chat is gone), for callers that must tell.
            error.__cause__ = job.last_error or (
                self.last_refusal.get(job.chat_id) if job.chat_id is not None else None
            )
            job.fail(error)
            return
        now = self._clock()
        if not any(w.serving(now) for w in usable if w.bot_id not in unable):
            # Every such bot's lease is held elsewhere for now: the lease
            # rounds bring bots here once this backlog is published.
            self.route_later(job, LEASE_WAIT)
            return
        usable = [w for w in usable if w.serving(now)]
        untried = [w for w in usable if w.bot_id not in job.tried | unable]
        if not untried:
            # Every usable bot failed this job: pause, forget, start over.
            job.tried.clear()
            delay = self.all_failed_pause * jitter.uniform(1.0, 1.2)
            log.warning("all_bots_failed_job", job_id=job.id, kind=job.kind, pause=round(delay, 2))
            self.route_later(job, delay)
            return
        # A bot another copy of the same chunk has is taken only when no
        # other one can run the job now.
        worker = self.pick_bot(exclude=job.tried | unable | job.avoided()) or self.pick_bot(
            exclude=job.tried | unable
        )
        if worker is None:
            # Every candidate is cooling down: queue on the one that frees first.
            # Its worker waits out the cooldown; an idle bot may take it earlier.
            worker = min(untried, key=lambda w: w.cooldown_until)
        self.enqueue(worker, job)

    def _no_usable_bot(self, job: Job[Any]) -> None:
        """No bot is in the pool: wait for one the fleet brings, or fail."""
        probing = [w for w in self.workers.values() if w.probing]
        if (self.in_fleet or self.bots_expected) and probing:
            # Bots other instances hold (and checked) come here with the
            # work once this backlog is published, and a dead instance's
            # once its leases expire (BOT_LEASE_SECONDS; a restart after
            # kill -9 meets this); each is checked here on arrival: wait for
            # one. (Otherwise every bot is held here: the caller hears at
            # once that none passed its check yet.)
            self.route_later(job, LEASE_WAIT)
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
            error.pool_wait = self.all_failed_pause
        else:
            error = NoUsableBot("no usable bot is left in the pool")
        job.fail(error)

    def enqueue(self, worker: BotWorker, job: Job[Any], *, front: bool = False) -> None:
        """Queue the job in the lane of `worker` that runs it."""
        lane = worker.lane_of(job)
        if not job.small:
            worker.last_assigned = next(self._assignments)
        if job.replicas is not None:
            job.replicas.bots[job.id] = worker.bot_id
        if front:
            lane.queue.appendleft(job)
        elif job.priority:
            ahead = sum(1 for _ in itertools.takewhile(lambda q: q.priority, lane.queue))
            lane.queue.insert(ahead, job)
        else:
            lane.queue.append(job)
        self.wake_all()

    def route_later(self, job: Job[Any], delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._delayed_jobs.add(job)

        def fire() -> None:
            self._delayed.discard(handle)
            self._delayed_jobs.discard(job)
            self.route(job)
            self.update_idle()

        handle = loop.call_later(delay, fire)
        self._delayed.add(handle)
        self.update_idle()

    def move_queue_away(self, worker: BotWorker, *, include_pinned: bool = False) -> None:
        """Re-route the waiting jobs of a bot that cannot serve them now
        (with `include_pinned`, its small calls too: every one is pinned)."""
        lanes = [worker, worker.small] if include_pinned else [worker]
        for lane in lanes:
            self._move_away(lane, lambda job: job.pinned_bot is None or include_pinned)

    def _move_away(self, lane: Lane, moves: Callable[[Job[Any]], bool]) -> None:
        staying: deque[Job[Any]] = deque()
        moving: list[Job[Any]] = []
        for job in lane.queue:
            (moving if moves(job) else staying).append(job)
        lane.queue = staying
        for job in moving:
            self.route(job)

    def cancel_delayed(self) -> list[Job[Any]]:
        """Stop every pending re-route; the jobs that were waiting for one."""
        for handle in self._delayed:
            handle.cancel()
        self._delayed.clear()
        jobs = list(self._delayed_jobs)
        self._delayed_jobs.clear()
        return jobs

    def wake_all(self) -> None:
        for worker in self.workers.values():
            worker.wake.set()
            worker.small.wake.set()
        self.update_idle()

    def update_idle(self) -> None:
        if self.pending_jobs() == 0:
            self.idle.set()
        else:
            self.idle.clear()

    def pending_jobs(self) -> int:
        queued = sum(w.load + w.small_load for w in self.workers.values())
        return queued + len(self._delayed_jobs)

    def seconds_until_free(self) -> float:
        """How long until some usable bot is likely to take a new job: the
        shortest cooldown left, counting a bot that is not cooling down (it
        failed transiently) as the pause the pool waits after such failures."""
        now = self._clock()
        waits = [
            w.cooldown_until - now if w.cooling(now) else self.all_failed_pause
            for w in self.workers.values()
            if w.usable
        ]
        return min(waits, default=self.all_failed_pause)

    # --- a bot to a job -----------------------------------------------------------

    def next_job(self, worker: BotWorker, lane: Lane) -> tuple[Job[Any] | None, float | None]:
        """The job this lane of the worker should run now, or how long to
        wait for one (None: until something changes)."""
        now = self._clock()
        if not worker.held(now):
            # Not leased here (or the lease ran out unrenewed): no new call.
            self.move_queue_away(worker, include_pinned=True)
            return None, None if not worker.leased else 0.5
        if worker.cooling(now):
            # Jitter so that bots freed at the same moment do not all fire at once.
            return None, worker.cooldown_until - now + jitter.uniform(0, 0.1)
        worker.drop_abandoned(lane)
        if not worker.usable:
            # Not in the pool (yet, or any more): only its check's calls run.
            self._move_away(lane, lambda job: not job.check)
            return self._first(lane), None
        if lane is worker.small:
            return self._first(lane), None
        pacing: float | None = None  # the shortest wait of a queued send
        for job in worker.queue:
            delay = self.send_delay(worker, job, now)
            if delay == 0:
                worker.queue.remove(job)
                return job, None
            pacing = delay if pacing is None else min(pacing, delay)
        if pacing is not None:
            return None, pacing
        return self.steal_for(worker), None

    @staticmethod
    def _first(lane: Lane) -> Job[Any] | None:
        return lane.queue.popleft() if lane.queue else None

    def steal_for(self, thief: BotWorker) -> Job[Any] | None:
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
                if thief.bot_id in job.avoided():
                    continue  # another copy of the chunk is the thief's already
                if not self.serves(thief, job):
                    continue
                if idle and self.send_delay(other, job, now) == 0:
                    break  # an owner free to run its jobs runs them itself
                if self.send_delay(thief, job, now) > 0:
                    continue  # the thief's own budget for that chat is spent
                if best is None or job.enqueued_at < best.enqueued_at:
                    best, owner = job, other
                break
        if best is None or owner is None:
            return None
        owner.queue.remove(best)
        if best.replicas is not None:
            best.replicas.bots[best.id] = thief.bot_id
        return best

    # --- chats and pacing ---------------------------------------------------------

    def serves(self, worker: BotWorker, job: Job[Any]) -> bool:
        """Whether `worker` may run `job`: a send needs a chat the bot passed
        its check in (a chat that is no storage chat any more was not checked)."""
        if not job.is_send:
            return True
        if job.chat_id is None:
            return bool(self.chats_of(worker, job))
        return job.chat_id in worker.chats or job.chat_id not in self.chat_ids

    def chats_of(self, worker: BotWorker, job: Job[Any]) -> list[int]:
        """The chats `worker` may send `job` to."""
        if job.chat_id is not None:
            return [job.chat_id]
        return [chat for chat in self.chat_ids if chat in worker.chats and not self.is_full(chat)]

    def send_delay(self, worker: BotWorker, job: Job[Any], now: float) -> float:
        """Seconds until `worker` may run `job` as far as pacing goes (0: now)."""
        if not job.is_send:
            return 0.0
        chats = self.chats_of(worker, job)
        if not chats:  # routing never gives it such a job
            return self.pacing_window
        return min(self.chat_delay(worker, chat, now) for chat in chats)

    def chat_delay(self, worker: BotWorker, chat_id: int, now: float) -> float:
        return worker.pacing_delay(chat_id, now, self.sends_per_minute, self.pacing_window)

    def choose_chat(self, worker: BotWorker, job: Job[Any], now: float) -> int:
        """The chat this attempt goes to: the job's own, or the storage chat
        `worker` can post to soonest (ties: the one given the fewest sends,
        then the one it posted to least lately, so chats fill evenly)."""
        if job.chat_id is not None:
            return job.chat_id
        return min(
            self.chats_of(worker, job) or self.chat_ids,
            key=lambda chat: (
                self.chat_delay(worker, chat, now),
                self.chat_sends[chat],
                len(worker.recent_sends(chat, now, self.pacing_window)),
            ),
        )

    def count_send(self, chat_id: int) -> None:
        """A send went to `chat_id` (for `choose_chat`'s ties)."""
        if chat_id in self.chat_sends:
            self.chat_sends[chat_id] += 1
