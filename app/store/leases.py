"""Bot leases: which bots this instance may run, when several share a database.

One call per token must hold across the whole fleet, so a bot works only on
the instance that holds its lease (a row in `bot_leases`, app/db/leases.py).
Every `BALANCE_SECONDS` (every `WATCH_SECONDS` while it holds fewer bots
than its share), and at once when this instance starts to lack bots or to
have idle ones, a round here:

* publishes this instance's backlog (jobs waiting or running in its
  dispatcher) when it changed, and reads everyone's: bots follow work within
  a second or so, where a round per renewal (3 s by default) took several;
* renews each lease it holds every `BOT_LEASE_SECONDS / 5`, and grants it to
  the dispatcher up to a deadline a third of the lease before the row
  expires: if renewals keep failing, the bot starts no call after that, and a
  call already running has most of that third to end; one still running a
  tenth of the lease before the row expires is cut (`CUT_MARGIN`), so that
  no call of this instance's runs on once another may take the bot. A 429
  cooldown begun since the last renewal is written at once, so the next
  holder honours it even if this instance dies next;
* works out its share of the bots (`shares`: bots go where the work is) and
  hands surplus bots over when another instance wants more (`_hand_over`):
  the dispatcher stops the bot and, in a task of its own, waits for its
  running call (`Dispatcher.revoke`); the lease stays renewed until that call
  has ended and is released only then, so the next holder never overlaps it
  and the rounds go on meanwhile;
* takes free leases (expired or released) up to its share. Not the leases
  of an instance whose row is gone: a live instance's row can be deleted by
  mistake (taken for dead), and its calls go on until it learns of it; its
  leases pass when they expire, as any other's.

A lease is keyed by a hash of the token: the token itself is a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.leases import LeaseRepository, LeaseRow
from app.db.session import session_scope
from app.db.spool import InstanceRepository
from app.db.types import utcnow
from app.kit.periodic import Periodic
from app.store.blocks import READABLE
from app.telegram.dispatcher import Dispatcher

log = structlog.get_logger("app.store.leases")

DEFAULT_LEASE_SECONDS = 15.0
# Renewals per lease time: a lease is renewed this many times before it expires.
ROUNDS_PER_LEASE = 5
# How often the fleet's backlogs are read (two short statements; a third
# publishes this instance's own when it changed).
BALANCE_SECONDS = 0.25
# How often the loop looks, in memory, whether this instance's need for bots
# turned (work waiting for a bot, or a bot without work): a round then.
WATCH_SECONDS = 0.1
# The part of a lease left, when its renewals fail, for a running call to end.
CALL_MARGIN = 1 / 3
# The part of a lease before its end at which a call still running is cut: room
# for the cut to reach the socket, and for two hosts' clocks to differ.
CUT_MARGIN = 1 / 10
NO_COOLDOWN = datetime(1970, 1, 1, tzinfo=UTC)
# A cooldown later than the one last written by less than this is the same
# one: read back from the lease (a wall-clock time in microseconds) and
# turned into the monotonic clock again, it may come out a microsecond
# later, which would ask for another write, and another round.
COOLDOWN_SLACK = 0.001


def token_hash(token: str) -> str:
    return hashlib.sha256(f"teleuploader:bot:{token}".encode()).hexdigest()


def shares(backlogs: dict[str, int], bots: int) -> dict[str, int]:
    """How many bots each instance should hold, from the backlogs they published.

    Nobody busy: an even split, so every instance can start work at once.
    Otherwise every busy instance gets one bot first (most work first, so a
    small job is not starved by a big one), then bots go one at a time to the
    busy instance with the most work per bot (never more bots than jobs);
    what is left over is split evenly. Deterministic, so instances reading the
    same rows agree.
    """
    ids = sorted(backlogs)
    share = dict.fromkeys(ids, 0)
    if not ids:
        return share
    left = bots
    for i in sorted((i for i in ids if backlogs[i] > 0), key=lambda i: -backlogs[i])[:bots]:
        share[i] = 1
        left -= 1
    for _ in range(left):
        busy = [i for i in ids if share[i] < backlogs[i]]
        if busy:
            chosen = max(busy, key=lambda i: (backlogs[i] / (share[i] + 1), -ids.index(i)))
        else:
            chosen = min(ids, key=lambda i: (share[i], ids.index(i)))
        share[chosen] += 1
    return share


class BotLeases:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        instance_id: str,
        tokens: dict[int, str],
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        host: str = "",
        pid: int = 0,
        clock: Callable[[], float] = time.monotonic,
        on_row_lost: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`tokens`: bot id -> token, for the lease keys (only hashes are kept);
        `on_row_lost`: what registers the instance again when its row is
        found gone (the heartbeat's fence), instead of registering here."""
        self._on_row_lost = on_row_lost
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self.instance_id = instance_id
        self._hashes = {bot_id: token_hash(token) for bot_id, token in tokens.items()}
        self.lease_seconds = lease_seconds
        self._host = host
        self._pid = pid
        self._clock = clock
        # Every lease whose row is ours, leaving ones included.
        self.held: set[int] = set()
        # Bots being handed over: stopped here, renewed until their running
        # call has ended, then released.
        self._leaving: dict[int, asyncio.Task[None]] = {}
        # Held bots whose lease another instance took: not renewed, and
        # forgotten once their calls have ended.
        self._lost: set[int] = set()
        # Per held bot: when its lease was last renewed (monotonic), and the
        # cooldown end written to it then.
        self._renewed: dict[int, tuple[float, float]] = {}
        # Held by a renewal, and by a hand-over's release with what it forgets.
        self._writing = asyncio.Lock()
        self.loop = Periodic(
            "bot_lease", self._tick, interval=lambda: min(WATCH_SECONDS, self.round_interval)
        )
        self._next_round = 0.0
        self.rounds = 0
        # The backlog last published, and when (monotonic).
        self._published: int | None = None
        self._published_at = -math.inf
        # This instance's need for bots at its last round (`_need_for`).
        self._last_need = 0
        # Whether this instance held fewer bots than its share after its round.
        self._short = False
        # Bots a dead instance held, until their first check here ended.
        self._inherited: set[int] = set()
        # Whether it was alone and held every bot it wants (`_settled_after`).
        self._settled = False
        # Live instances (this one included) at the last round: /metrics.
        self.fleet_size = 1

    @property
    def interval(self) -> float:
        """How often a held lease is renewed."""
        return self.lease_seconds / ROUNDS_PER_LEASE

    @property
    def round_interval(self) -> float:
        return min(BALANCE_SECONDS, self.interval)

    def staying(self) -> set[int]:
        """The held bots that are not being handed over."""
        return self.held - self._leaving.keys()

    def start(self) -> None:
        """Run a round every `round_interval` (call `round` once first so the
        dispatcher starts with its bots)."""
        self._next_round = self._clock() + self.round_interval
        self.loop.start()

    async def stop(self) -> None:
        """After the dispatcher stopped: give every lease up, so other
        instances take the bots at once rather than after they expire."""
        await self.loop.stop()
        # The dispatcher has stopped: no call runs, so these end at once.
        await asyncio.gather(*self._leaving.values(), return_exceptions=True)
        held, self.held = self.held, set()
        with contextlib.suppress(Exception):
            async with session_scope(self._sessionmaker) as session:
                repo = LeaseRepository(session)
                for bot_id in sorted(held):
                    await repo.release(
                        self._hashes[bot_id],
                        self.instance_id,
                        cooldown_until=self._cooldown_wall(bot_id, utcnow(), self._clock()),
                    )
        log.info("bot_leases_released", bots=len(held))

    def _need_for(self, backlog: int) -> int:
        """-1: fewer jobs here than bots, 0: as many, 1: more."""
        bots = len(self.staying())
        return (backlog > bots) - (backlog < bots)

    async def _tick(self) -> None:
        """Every WATCH_SECONDS: a round when one is due, or at once when this
        instance's need for bots turned or a cooldown waits to be written."""
        need = self._need_for(self._dispatcher.backlog())
        turned = need != self._last_need and not self._settled
        if self._clock() < self._next_round and not turned and not self._cooldown_unwritten():
            return
        # Short of its share, an instance looks again soon: bots another
        # one releases for it are free from that moment. Settled, it
        # looks at each renewal only (see `_settled_after`).
        if self._short:
            gap = WATCH_SECONDS
        elif self._settled:
            gap = self.interval
        else:
            gap = self.round_interval
        self._next_round = self._clock() + gap
        # A failed round (the database may be down) is logged by the loop:
        # the held bots stop by themselves at their deadline, and the next
        # round tries again.
        await self.round()

    # --- one round ------------------------------------------------------------

    async def round(self) -> None:
        self.rounds += 1
        started = self._clock()
        now = utcnow()
        backlog = self._dispatcher.backlog()
        self._last_need = self._need_for(backlog)
        # Published at least every renewal interval (it is this instance's
        # heartbeat too), and at once when it changed while other instances
        # may want to know (a lone one would write for nobody).
        publish = started - self._published_at >= self.interval or (
            self._dispatcher.in_fleet and backlog != self._published
        )
        async with session_scope(self._sessionmaker) as session:
            repo = LeaseRepository(session)
            present = await repo.publish_backlog(self.instance_id, backlog) if publish else True
            backlogs = await repo.backlogs(self.lease_seconds)
            rows = await repo.all()
        if not present:
            self._published = None
            await self._lost_instance_row()
            return
        if publish:
            self._published, self._published_at = backlog, started
        elif self.instance_id not in backlogs:
            # Our row is gone or stale: the next round finds out by publishing.
            self._published = None
        backlogs[self.instance_id] = backlog
        self.fleet_size = len(backlogs)
        self._dispatcher.in_fleet = len(backlogs) > 1
        of_the_dead = {r.bot_id for r in rows if r.owner not in backlogs and r.expires_at > now}
        self._inherited |= of_the_dead
        self._dispatcher.held_elsewhere = frozenset(
            r.bot_id
            for r in rows
            if r.owner != self.instance_id and r.expires_at > now and r.owner in backlogs
        )
        wanted = self._wanted_bots()
        target = shares(backlogs, len(wanted))
        await self._renew(now, started)
        self._hand_over(rows, backlogs, target, now)
        share = target.get(self.instance_id, 0)
        await self._take(rows, share, wanted, now, started)
        # A dead instance's bots come once its leases expire and, taken
        # here, once their first check passes: a job meanwhile waits for
        # them. (Without the second, one that came between the expiry and
        # the check failed at once: "no bot has passed its check yet".)
        self._dispatcher.bots_expected = bool(of_the_dead) or self._inherited_under_check()
        self._short = len(self.staying()) < share
        self._settled = self._settled_after(backlogs, wanted)

    def _settled_after(self, backlogs: dict[str, int], wanted: list[int]) -> bool:
        """Alone, holding every bot it wants: no backlog of another instance
        to balance against and no lease to take over, so rounds every
        `BALANCE_SECONDS` (each a short transaction: ~2 % of a CPU when idle)
        would find nothing. An instance that joins is seen at the next
        renewal, within `interval`, and bots are handed over to it then."""
        return len(backlogs) == 1 and set(wanted) <= self.staying()

    def _inherited_under_check(self) -> bool:
        """Whether a bot a dead instance held is here, under its first check
        (none failed yet); those whose check ended are forgotten. At a fresh
        start there are none: a job is told at once that no bot passed yet."""
        workers = self._dispatcher.workers
        self._inherited = {
            b
            for b in self._inherited
            if b in workers and workers[b].probing and workers[b].check_problem is None
        }
        return bool(self._inherited & self.staying())

    def _wanted_bots(self) -> list[int]:
        """The bots worth a lease: not rejected by their check. One that
        every chat refused is wanted too: only its holder re-checks it
        (app.telegram.probe), and it comes back when a chat takes it again."""
        rechecked = self._dispatcher.chats_to_recheck()
        return [
            w.bot_id
            for w in self._dispatcher.workers.values()
            if w.usable or w.probing or w.bot_id in self.held or w.bot_id in rechecked
        ]

    def _cooldown_unwritten(self) -> bool:
        """Whether a held bot began a cooldown (a 429) since its lease was
        last written: written at once, even by a settled instance, so that
        the next holder honours it should this one die now."""
        workers = self._dispatcher.workers
        return any(
            workers[bot_id].cooldown_until > written + COOLDOWN_SLACK
            for bot_id, (_renewed_at, written) in self._renewed.items()
            if bot_id in workers
        )

    def _renewal_due(self, bot_id: int, started: float) -> bool:
        last = self._renewed.get(bot_id)
        if last is None:
            return True
        renewed_at, cooldown_written = last
        cooldown = self._dispatcher.workers[bot_id].cooldown_until
        return started - renewed_at >= self.interval or cooldown > cooldown_written + COOLDOWN_SLACK

    async def _renew(self, now: datetime, started: float) -> None:
        # Not while a handed-over lease is being released: renewed after its
        # release, it would be ours again, unknown to this instance.
        async with self._writing:
            await self._renew_due(now, started)

    async def _renew_due(self, now: datetime, started: float) -> None:
        due = [
            bot_id
            for bot_id in sorted(self.held - self._lost)
            if self._renewal_due(bot_id, started)
        ]
        if not due:
            return
        for bot_id in due:
            written = self._dispatcher.workers[bot_id].cooldown_until
            cooldown = await self._take_one(bot_id, self._cooldown_wall(bot_id, now, started), now)
            if cooldown is None:
                # Renewed too late: another instance holds it now. It stays
                # in `held` (so it is not taken again) until its calls end.
                log.warning("bot_lease_lost", bot_id=bot_id)
                self._lost.add(bot_id)
                self._renewed.pop(bot_id, None)
                if bot_id not in self._leaving:
                    self._let_go(bot_id, release=False)
                continue
            self._renewed[bot_id] = (started, written)
            if bot_id in self.staying():
                self._grant(bot_id, cooldown, now, started)
            else:
                # Handed over, its call still running: it may run on.
                self._dispatcher.extend_cut(bot_id, self._cut_at(started))

    async def _take_one(self, bot_id: int, cooldown: datetime, now: datetime) -> datetime | None:
        """Take or renew one lease, in a transaction of its own: two
        instances' rounds each locking several rows (the renewals of one,
        the takes of the other, from rows it read a moment before) would
        deadlock, and the round Postgres aborts renews nothing."""
        async with session_scope(self._sessionmaker) as session:
            return await LeaseRepository(session).take(
                self._hashes[bot_id],
                bot_id,
                self.instance_id,
                seconds=self.lease_seconds,
                cooldown_until=cooldown,
                now=now,
            )

    def _hand_over(
        self, rows: list[LeaseRow], backlogs: dict[str, int], target: dict[str, int], now: datetime
    ) -> None:
        """Hand the bots held beyond this instance's share over while another
        live instance holds fewer than its own.

        Idle bots go first: their hand-over waits for no call. A busy bot
        moves only when another instance has no bot at all or lacks more
        than one: while it finishes its call and the other instance's next
        round takes it, it serves nobody, which is not worth evening out a
        difference of one bot that the backlogs' next swing may undo."""
        staying = self.staying()
        surplus = len(staying) - target.get(self.instance_id, 0)
        if surplus <= 0:
            return
        holding = {
            owner: sum(1 for r in rows if r.owner == owner and r.expires_at > now)
            for owner in backlogs
            if owner != self.instance_id
        }
        short = {
            owner: target.get(owner, 0) - count
            for owner, count in holding.items()
            if target.get(owner, 0) > count
        }
        count = min(surplus, sum(short.values()))
        if count <= 0:
            return
        workers = self._dispatcher.workers
        idle = sorted(b for b in staying if workers[b].load == 0)
        busy = sorted(
            (b for b in staying if workers[b].load > 0), key=lambda b: (workers[b].load, b)
        )
        urgent = any(holding[owner] == 0 or lack > 1 for owner, lack in short.items())
        giving = (idle + busy if urgent else idle)[:count]
        for bot_id in giving:
            self._let_go(bot_id, release=True)
        if giving:
            log.info("bot_leases_handed_over", bots=giving, backlog=backlogs[self.instance_id])

    def _let_go(self, bot_id: int, *, release: bool) -> None:
        """Stop the bot here at once; once its running calls have ended,
        give its lease up (`release`) and forget it."""
        self._dispatcher.withdraw(bot_id)
        self._leaving[bot_id] = asyncio.create_task(
            self._leave(bot_id, release), name=f"bot-lease-leave-{bot_id}"
        )

    async def _leave(self, bot_id: int, release: bool) -> None:
        try:
            await self._dispatcher.revoke(bot_id)
        finally:
            async with self._writing:
                try:
                    if release:
                        await self._release(bot_id)
                except Exception as exc:
                    # Unreleased, the lease expires by itself (no call runs on it).
                    log.warning("bot_lease_release_failed", bot_id=bot_id, error=str(exc))
                finally:
                    self.held.discard(bot_id)
                    self._lost.discard(bot_id)
                    self._renewed.pop(bot_id, None)
                    self._leaving.pop(bot_id, None)

    async def _release(self, bot_id: int) -> None:
        async with session_scope(self._sessionmaker) as session:
            released_at = utcnow()
            await LeaseRepository(session).release(
                self._hashes[bot_id],
                self.instance_id,
                cooldown_until=self._cooldown_wall(bot_id, released_at, self._clock()),
                now=released_at,
            )

    async def _take(
        self, rows: list[LeaseRow], share: int, wanted: Iterable[int], now: datetime, started: float
    ) -> None:
        missing = share - len(self.staying())
        if missing <= 0:
            return
        by_hash = {r.token_hash: r for r in rows}
        free: list[tuple[datetime, int]] = []
        for bot_id in wanted:
            if bot_id in self.held:
                continue
            row = by_hash.get(self._hashes[bot_id])
            if row is None:
                free.append((NO_COOLDOWN, bot_id))
            elif row.expires_at <= now:
                free.append((row.cooldown_until, bot_id))
        # Bots that are not cooling down first.
        free.sort()
        taken: list[int] = []
        for _, bot_id in free:
            if len(taken) >= missing:
                break
            cooldown = await self._take_one(bot_id, NO_COOLDOWN, now)
            if cooldown is None:
                continue
            taken.append(bot_id)
            self.held.add(bot_id)
            self._grant(bot_id, cooldown, now, started)
            self._renewed[bot_id] = (started, self._dispatcher.workers[bot_id].cooldown_until)
        if taken:
            log.info("bot_leases_taken", bots=taken, held=len(self.held))

    async def _lost_instance_row(self) -> None:
        """Another instance took this one for dead and claimed it (its
        heartbeat was stale, or it registered while that one was looking).
        Its leases are still its own: none passes before it expires or is
        released, whatever became of the instance's row. Register again;
        the renewals go on."""
        log.error("instance_row_lost", instance_id=self.instance_id, bots=len(self.held))
        if self._on_row_lost is not None:
            await self._on_row_lost()
            return
        async with session_scope(self._sessionmaker) as session:
            await InstanceRepository(session).register_again(
                self.instance_id, self._host, self._pid, block_digests=READABLE
            )

    # --- clocks ---------------------------------------------------------------

    def _grant(self, bot_id: int, cooldown: datetime, now: datetime, started: float) -> None:
        """Monotonic deadlines from a round that began at `started` (`now`)."""
        until = started + self.lease_seconds * (1 - CALL_MARGIN)
        cooling = started + (cooldown - now).total_seconds()
        self._dispatcher.grant(bot_id, until, cooling, cut_at=self._cut_at(started))

    def _cut_at(self, started: float) -> float:
        """When a call still running on a lease renewed at `started` is cut."""
        return started + self.lease_seconds * (1 - CUT_MARGIN)

    def _cooldown_wall(self, bot_id: int, now: datetime, mono: float) -> datetime:
        left = self._dispatcher.workers[bot_id].cooldown_until - mono
        return now + timedelta(seconds=left) if left > 0 else NO_COOLDOWN
