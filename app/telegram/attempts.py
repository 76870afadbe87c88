"""One attempt of a job on a bot, and what its outcome does.

* Success: the caller gets the result. A document posted for a caller that
  has gone away is handed to `on_orphan`, to be deleted.
* 429 (`RateLimited`): the bot cools down for `retry_after` seconds; the job,
  and every job queued behind it, moves to other bots at once. If every bot
  is cooling down, the job waits for the one whose cooldown ends first.
* A call cut off by its time budget (`CallAbandoned`) may still be running at
  Telegram, so the token counts as busy for `abandoned_hold` seconds (it
  cools down, like after a 429) and the job moves to another bot at once.
  Retrying on the same token would put two calls on it: the very collision
  the dispatcher exists to prevent. A send given up this way may still post
  its message; it is counted (`on_abandoned_send`) for the reconciliation of
  orphans. So is a send that `Dispatcher.stop` cuts off in flight.
* Transient error (5xx, connection): retry on the same bot with exponential
  backoff, up to `TRANSIENT_TRIES_PER_BOT` tries, then another bot.
* Permanent error: the job fails at once with Telegram's description.
* A chat refuses the bot (`ChatForbidden`: a 403 on a call into it, or a 400
  such as "chat not found" or "not enough rights to send documents", see
  app/telegram/errors.py): the bot leaves that chat alone while it has
  others, and the job goes elsewhere (a job pinned to the bot, like the
  delete of its own message, fails, and its caller asks another bot that
  serves the chat). Refused in its last chat, it leaves the pool; a
  periodic re-check (app/telegram/probe.py) brings it back into the chats
  that take it again.
* 401, or a 403 on a call that names no chat (`BotUnusable`): the bot
  leaves the pool for good (logged once).
* At most `max_attempts` attempts per job across all bots (429s count too, so
  a job cannot loop forever), then it fails with the last error.

Several instances: a call still running when this instance's lease on the
bot is about to end (`BotWorker.cut_at`, moved on at every renewal) is cut,
as a call abandoned, so that it never runs on past the lease into the next
holder's calls. A call cut by a stop of the dispatcher counts as abandoned
too. Either way, when Telegram may have the request whole (its body was all
written: `client.REQUEST_SENT`) and may so still be carrying it out, the
token cools down, and the cooldown goes with the lease released after it.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from app.kit import jitter
from app.telegram.client import REQUEST_SENT
from app.telegram.errors import (
    BotUnusable,
    CallAbandoned,
    ChatForbidden,
    DispatcherClosed,
    RateLimited,
    TelegramError,
    TransientError,
)
from app.telegram.routing import Router
from app.telegram.types import StoredDocument
from app.telegram.worker import BotWorker, Job, Lane

# The dispatcher's logger: its events keep the name they always had.
log = structlog.get_logger("app.telegram.dispatcher")

TRANSIENT_TRIES_PER_BOT = 3
TRANSIENT_BACKOFF_BASE = 0.5

OrphanHandler = Callable[[StoredDocument], None]
# (bot_id, method, outcome, seconds) after every attempt, for metrics.
AttemptObserver = Callable[[int, str, str, float], None]
# (bot_id) when a send was given up while Telegram may still post it.
AbandonedSendHandler = Callable[[int], None]


class Attempts:
    """Runs attempts for the workers and acts on how each one ended."""

    def __init__(
        self,
        router: Router,
        *,
        clock: Callable[[], float],
        max_attempts: int,
        transient_backoff: float,
        abandoned_hold: float,
    ) -> None:
        self._router = router
        self._clock = clock
        self.max_attempts = max_attempts
        self._transient_backoff = transient_backoff
        self._abandoned_hold = abandoned_hold
        # Set by the service after construction (app/runtime/startup.py).
        self.on_orphan: OrphanHandler | None = None
        self.on_attempt: AttemptObserver | None = None
        self.on_abandoned_send: AbandonedSendHandler | None = None

    async def run(self, worker: BotWorker, job: Job[Any]) -> None:
        router = self._router
        lane = worker.lane_of(job)
        lane.running = job
        job.attempts += 1
        started = self._clock()
        chat_id = router.choose_chat(worker, job, started) if job.is_send else router.chat_ids[0]
        sent_at: deque[float] | None = None
        if job.is_send:
            sent_at = worker.recent_sends(chat_id, started, router.pacing_window)
            sent_at.append(started)
            router.count_send(chat_id)
        try:
            try:
                result = await self._call(worker, lane, job, chat_id, started)
            except TelegramError as exc:
                outcome = self._outcome_name(exc)
                worker.errors[outcome] = worker.errors.get(outcome, 0) + 1
                await self._on_error(worker, job, exc)
            except Exception as exc:  # a bug: surface it to the caller, keep the worker
                outcome = "crashed"
                worker.errors[outcome] = worker.errors.get(outcome, 0) + 1
                log.exception("job_crashed", bot_id=worker.bot_id, job_id=job.id, kind=job.kind)
                job.fail(exc)
            else:
                outcome = "ok"
                self._succeed(worker, job, result)
        except asyncio.CancelledError:
            # Only stop() cancels a worker; the caller must not wait forever.
            job.fail(DispatcherClosed("the dispatcher stopped during the call"))
            # Cut off at Telegram's end too: a send may still be posted there,
            # so it is reported like any other abandoned call (reconciliation),
            # and the token cools down as after one: the lease released next
            # carries the cooldown to whoever holds the bot after this instance.
            worker.errors["abandoned"] = worker.errors.get("abandoned", 0) + 1
            self._count_abandoned(worker, job)
            worker.cooldown_until = max(worker.cooldown_until, self._clock() + self._abandoned_hold)
            self._observe(worker, job, "abandoned", started)
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
            lane.running = None
            lane.deadline = None
            worker.changed.set()
            router.wake_all()
        self._observe(worker, job, outcome, started)

    async def _call(
        self, worker: BotWorker, lane: Lane, job: Job[Any], chat_id: int, started: float
    ) -> Any:
        """The job's call, cut if it would outlast this instance's lease."""
        left = worker.cut_at - started
        deadline = asyncio.timeout(None if math.isinf(left) else left)
        lane.deadline = deadline
        try:
            async with deadline:
                return await job.run(worker.client, chat_id)
        except TimeoutError:
            if not deadline.expired():
                raise
            what = f"{job.kind} cut at the end of this instance's lease on the bot"
            if REQUEST_SENT.get() is False:
                # Cut while its body was still being written: Telegram
                # drops such a request, nothing of it goes on.
                raise TransientError(what, bot_id=worker.bot_id) from None
            raise CallAbandoned(what, bot_id=worker.bot_id) from None
        finally:
            # The call is over: a lease round must not move its deadline
            # (a finished Timeout refuses it) while the job backs off.
            lane.deadline = None

    def _observe(self, worker: BotWorker, job: Job[Any], outcome: str, started: float) -> None:
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
        if isinstance(exc, ChatForbidden):
            # Out of one chat only: an operator reading `bot_unusable` would
            # look for a revoked token.
            return "chat_refused"
        if isinstance(exc, BotUnusable):
            return "bot_unusable"
        return "permanent"

    async def _on_error(self, worker: BotWorker, job: Job[Any], exc: TelegramError) -> None:
        if job.check:
            self._on_check_failed(worker, job, exc)
        elif isinstance(exc, RateLimited):
            self._on_rate_limited(worker, job, exc)
        elif isinstance(exc, CallAbandoned):
            self._on_abandoned(worker, job, exc)
        elif isinstance(exc, TransientError):
            await self._on_transient(worker, job, exc)
        elif isinstance(exc, BotUnusable):
            self._on_unusable(worker, job, exc)
        else:
            job.fail(exc)

    def _on_check_failed(self, worker: BotWorker, job: Job[Any], exc: TelegramError) -> None:
        """A call of the bot's check failed: the check (app.telegram.probe)
        retries with its own pauses and decides which chats refuse the bot;
        the token still cools down after a 429 or an abandoned call."""
        if isinstance(exc, RateLimited):
            worker.rate_limited += 1
            wait = exc.retry_after
        elif isinstance(exc, CallAbandoned):
            self._count_abandoned(worker, job)
            wait = self._abandoned_hold
        else:
            wait = 0.0
        worker.cooldown_until = max(worker.cooldown_until, self._clock() + wait)
        if isinstance(exc, BotUnusable) and not isinstance(exc, ChatForbidden):
            self._on_unusable(worker, job, exc)  # a revoked token: out of the pool
        job.fail(exc)

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
            exc.pool_wait = self._router.seconds_until_free()
            job.fail(exc)
            return False
        return True

    def _on_rate_limited(self, worker: BotWorker, job: Job[Any], exc: RateLimited) -> None:
        worker.rate_limited += 1
        log.warning("bot_rate_limited", bot_id=worker.bot_id, retry_after=exc.retry_after)
        self._cool_down(worker, job, exc, exc.retry_after, avoid=False)

    def _on_abandoned(self, worker: BotWorker, job: Job[Any], exc: CallAbandoned) -> None:
        self._count_abandoned(worker, job)
        log.warning(
            "bot_call_abandoned",
            bot_id=worker.bot_id,
            job_id=job.id,
            kind=job.kind,
            hold=self._abandoned_hold,
            error=str(exc),
        )
        # Its own call may still be running there: the retry must go elsewhere.
        self._cool_down(worker, job, exc, self._abandoned_hold, avoid=True)

    def _count_abandoned(self, worker: BotWorker, job: Job[Any]) -> None:
        """A call given up while Telegram may still carry it out: a send
        among them may post a message no row will know of."""
        worker.abandoned += 1
        if job.is_send and self.on_abandoned_send is not None:
            self.on_abandoned_send(worker.bot_id)

    def _cool_down(
        self, worker: BotWorker, job: Job[Any], exc: TelegramError, seconds: float, *, avoid: bool
    ) -> None:
        """Keep `worker` out of use for `seconds` and send the job elsewhere
        (`avoid`: never back to this bot in this round); a pinned job waits."""
        worker.cooldown_until = max(worker.cooldown_until, self._clock() + seconds)
        # Jobs queued behind this bot do not wait out its cooldown.
        self._router.move_queue_away(worker)
        if not self._budget_left(job, exc):
            return
        if job.pinned_bot is not None:
            self._router.enqueue(worker, job, front=True)
            return
        if avoid:
            job.tried.add(worker.bot_id)
        self._router.route(job)

    async def _on_transient(self, worker: BotWorker, job: Job[Any], exc: TransientError) -> None:
        log.info("bot_transient_error", bot_id=worker.bot_id, job_id=job.id, error=str(exc))
        if not self._budget_left(job, exc):
            return
        tries_here = job.transient_tries.get(worker.bot_id, 0) + 1
        job.transient_tries[worker.bot_id] = tries_here
        if tries_here < TRANSIENT_TRIES_PER_BOT or job.pinned_bot is not None:
            # The worker itself backs off: this bot just failed, so it takes no
            # other job meanwhile; jobs queued behind it can be taken by idle bots.
            # The backoff is the job's: once its caller has left (a download
            # given up), the bot is free for the next job, which may well
            # succeed, rather than held for a retry that will never be made.
            delay = self._transient_backoff * 2 ** (tries_here - 1)
            if not job.abandoned:
                await asyncio.wait((job.future,), timeout=delay * jitter.uniform(0.8, 1.2))
            if not job.abandoned:
                self._router.enqueue(worker, job, front=True)
            return
        job.tried.add(worker.bot_id)
        self._router.route(job)

    def _on_unusable(self, worker: BotWorker, job: Job[Any], exc: BotUnusable) -> None:
        router = self._router
        if isinstance(exc, ChatForbidden) and worker.chats != {exc.chat_id}:
            self._on_chat_refused(worker, job, exc)
            return
        if isinstance(exc, ChatForbidden):
            # Its last chat refused it: no chat is left to post to. It stays
            # out of the pool until a re-check finds a chat that takes it
            # again (app.telegram.probe).
            worker.chats.clear()
        if worker.usable:
            worker.usable = False
            log.error(
                "bot_removed_from_pool",
                bot_id=worker.bot_id,
                status=exc.status,
                reason=exc.description,
                usable_bots=sum(1 for w in router.workers.values() if w.usable),
            )
        router.move_queue_away(worker, include_pinned=True)
        if job.pinned_bot is not None:
            job.fail(exc)
        elif self._budget_left(job, exc):
            router.route(job)

    def _on_chat_refused(self, worker: BotWorker, job: Job[Any], exc: ChatForbidden) -> None:
        """One chat refused the bot (kicked, or its rights taken): the bot
        still works in its other chats, and the job goes elsewhere."""
        router = self._router
        if exc.chat_id in worker.chats:
            worker.chats.discard(exc.chat_id)
            log.error(
                "bot_removed_from_chat",
                bot_id=worker.bot_id,
                chat_id=exc.chat_id,
                status=exc.status,
                reason=exc.description,
                chats_left=len(worker.chats),
            )
            if not any(exc.chat_id in w.chats for w in router.workers.values() if w.usable):
                router.last_refusal[exc.chat_id] = exc
            router.move_queue_away(worker)
        if job.pinned_bot is not None:
            # Only this bot may run it (a delete of its own message, a
            # check): its caller picks another bot that serves the chat.
            job.fail(exc)
            return
        if job.chat_id is not None:
            # The job must go into that very chat: this bot cannot run it.
            job.tried.add(worker.bot_id)
        if self._budget_left(job, exc):
            router.route(job)
