"""What the dispatcher works with: jobs, and the state of each bot's worker.

A `Job` is one Telegram call that can be run again on every attempt (its
payload is bytes, not a stream), on whichever bot routing gives it to. A
`BotWorker` is one bot token: its queue, whether this instance may call
Telegram with it now, its cooldown, and its pacing.

Lanes: a bot runs one call at a time in each of its two lanes. The worker
itself is the first: uploads, forwards and pins, routed and stolen between
bots. Its small-call lane (`BotWorker.small`) runs the bot's small calls
(`SMALL_CALLS`: they carry no file and post nothing) one at a time beside
them, so that a reader's getFile does not wait behind a 19 MiB upload. The
official Bot API server serialises nothing per token but bursts of uploads
of one size (tdlib/telegram-bot-api, Client.cpp, `on_cmd`); the lanes are
our own promise: at most one upload-lane call and one small call in flight
per token. With the lane off (`SMALL_CALL_LANE=false`), every call takes
the worker's one lane. Every call on a bot, its getMe check included, goes
through one of these lanes: nothing else calls Telegram with its client.

Pacing: Telegram counts a bot's posts per chat (about 20 a minute per bot
and channel) and answers more with a 429. So each worker remembers when its
recent sends were posted, per storage chat, and `pacing_delay` says how long
until it may post into a chat again; with several storage chats each bot
has that budget in every chat. A send is counted when it is posted, at the
end of its upload, because that is when Telegram counts it.

A 429 is the one limit that is not kept per chat: it cools the bot down in
every chat (`cooldown_until`), not only in the chat the call went to.
Telegram's flood wait does not say which limit was hit (the per-chat post
rate, or one of the bot's own), and a call on a token still inside its wait
draws a longer one, so trying the same token in another chat would risk
exactly the wait the cooldown is there to avoid.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app.telegram.client import BotClient

T = TypeVar("T")

PACING_WINDOW = 60.0

# Calls that carry no file and post nothing: the official Bot API server
# neither throttles nor spaces them (Client.cpp, `on_cmd`), so they run in a
# bot's small-call lane, beside its uploads. forwardMessage is not one: it
# posts a message, which counts against the chat's posting limits as a send
# does (it is paced and routed like one), so it stays in the upload lane.
SMALL_CALLS = frozenset(
    {"getMe", "getFile", "deleteMessage", "getChatMember", "getChat", "editMessageCaption"}
)


@dataclass(eq=False)
class ReplicaGroup:
    """The sends of one chunk's copies: each goes to a bot no other copy was
    given, where the pool has one free (a bot that stored two copies is a
    single point of failure for both: a revoked token, a ban)."""

    # Job id -> the bot routing gave it last.
    bots: dict[int, int] = field(default_factory=dict)

    def others(self, job_id: int) -> set[int]:
        """The bots the group's other jobs were given."""
        return {bot for job, bot in self.bots.items() if job != job_id}


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
    # The other copies of the same chunk, whose bots this send avoids.
    replicas: ReplicaGroup | None = None
    # Runs in the bot's small-call lane (SMALL_CALLS, with the lane on).
    small: bool = False
    # A call of the bot's check (getMe, getChatMember): it may run before the
    # bot is admitted to the pool, while this instance holds its lease.
    check: bool = False
    attempts: int = 0
    tried: set[int] = field(default_factory=set)
    transient_tries: dict[int, int] = field(default_factory=dict)
    last_error: BaseException | None = None
    enqueued_at: float = 0.0

    @property
    def abandoned(self) -> bool:
        """The caller went away (its await was cancelled) or the job is settled."""
        return self.future.done()

    def avoided(self) -> set[int]:
        """Bots this job should rather not run on: its replicas' bots."""
        return self.replicas.others(self.id) if self.replicas is not None else set()

    def fail(self, exc: BaseException) -> None:
        """Give the caller `exc`, unless the job is settled already."""
        if not self.future.done():
            self.future.set_exception(exc)


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


class Lane:
    """Calls on one token, one at a time: their queue, the one running, and
    the task that runs them (the dispatcher's)."""

    def __init__(self) -> None:
        self.queue: deque[Job[Any]] = deque()
        self.running: Job[Any] | None = None
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        # The running call's cut (app.telegram.attempts): moved on at each
        # renewal of the lease, it fires only if the lease would end first.
        self.deadline: asyncio.Timeout | None = None


class BotWorker(Lane):
    """State of one bot. It is its own upload lane (uploads, forwards, pins:
    every call with the small-call lane off); `small` runs its small calls."""

    def __init__(self, client: BotClient, index: int, chats: set[int]) -> None:
        super().__init__()
        self.client = client
        self.bot_id = client.bot_id
        self.index = index
        # The storage chats this bot may post to (those its check passed in).
        self.chats = chats
        self.small = Lane()
        self.usable = True
        # Held back until its getMe check passes (app.telegram.probe), and why
        # its latest check did not.
        self.probing = False
        self.check_problem: str | None = None
        self.cooldown_until = 0.0
        # Several instances: whether this one holds the bot's lease, the
        # monotonic time past which it must not start a call, and the one at
        # which a call still running is cut, before the lease can pass on
        # (app.store.leases).
        self.leased = True
        self.lease_until = math.inf
        self.cut_at = math.inf
        # Set when a call ends or a lease is granted: what `revoke` and a
        # check waiting for its lease wait for.
        self.changed = asyncio.Event()
        self.last_assigned = 0
        # When this bot's recent sends were posted, per chat (pacing).
        self.send_times: dict[int, deque[float]] = {}
        # Counters for /ready and /metrics.
        self.sends = 0
        self.bytes_sent = 0
        self.rate_limited = 0
        self.abandoned = 0
        self.errors: dict[str, int] = {}

    @property
    def load(self) -> int:
        """Upload-lane jobs queued or running: what routing balances."""
        return len(self.queue) + (1 if self.running is not None else 0)

    @property
    def small_load(self) -> int:
        return len(self.small.queue) + (1 if self.small.running is not None else 0)

    @property
    def busy(self) -> bool:
        """A call runs in one of its lanes."""
        return self.running is not None or self.small.running is not None

    def lane_of(self, job: Job[Any]) -> Lane:
        return self.small if job.small else self

    def cooling(self, now: float) -> bool:
        return self.cooldown_until > now

    def held(self, now: float) -> bool:
        """This instance may start a call with the bot now (its lease)."""
        return self.leased and now < self.lease_until

    def serving(self, now: float) -> bool:
        """Usable, and this instance may call Telegram with it now."""
        return self.usable and self.held(now)

    def drop_abandoned(self, lane: Lane) -> None:
        """Forget the lane's queued jobs whose callers went away."""
        if any(job.abandoned for job in lane.queue):
            lane.queue = deque(job for job in lane.queue if not job.abandoned)

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
