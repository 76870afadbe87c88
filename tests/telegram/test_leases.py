"""Bot leases across several instances (app/telegram/leases.py): three
dispatchers, each with its own clients and lease keeper, share one database
(SQLite and Postgres through pgbouncer) and the Telegram simulator, which
enforces Telegram's rule that a token runs one call at a time and counts the
calls it sees in flight per token."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import BotToken
from app.db.leases import LeaseRepository
from app.db.session import session_scope
from app.db.spool import InstanceRepository
from app.db.types import utcnow
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.leases import BotLeases, shares
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument

Sessions = async_sessionmaker[AsyncSession]
CHAT_ID = -1001234567890
LEASE = 1.5  # seconds; rounds every 0.3 s
BOTS = 6


def chunk(index: int, size: int = 128 * 1024) -> bytes:
    return random.Random(index).randbytes(size)


async def eventually(check: Callable[[], bool], within: float) -> float:
    """Seconds until `check` holds; fails after `within`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            raise AssertionError(f"not true within {within} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


@dataclass
class Member:
    name: str
    dispatcher: Dispatcher
    leases: BotLeases
    sessionmaker: Sessions
    stopped: bool = False

    async def stop(self) -> None:
        """A clean stop, in the order the service stops."""
        self.stopped = True
        await self.dispatcher.stop(grace=5)
        await self.leases.stop()
        async with session_scope(self.sessionmaker) as session:
            await InstanceRepository(session).remove(self.name)

    async def die(self) -> None:
        """Like kill -9 on a remote host: no release, its row stays."""
        task = self.leases._task
        assert task is not None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


Fleet = Callable[..., Awaitable[Member]]


@pytest.fixture
def sim() -> TelegramSimulator:
    return TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(BOTS),
            chat_ids=[CHAT_ID],
            max_concurrent_calls_per_bot=1,
            collision_retry_after=30,
            upload_bandwidth=2 * 1024 * 1024,
            seed=11,
        )
    )


@pytest.fixture
async def fleet(sim: TelegramSimulator, sessionmaker: Sessions) -> AsyncIterator[Fleet]:
    members: list[Member] = []
    async with run_simulator(sim) as url:

        async def join(name: str, lease: float = LEASE) -> Member:
            async with session_scope(sessionmaker) as session:
                await InstanceRepository(session).register(name, "test-host", 0)
            clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
            dispatcher = Dispatcher(
                clients, chat_ids=[CHAT_ID], transient_backoff=0.01, all_failed_pause=0.2
            )
            dispatcher.require_leases()
            await dispatcher.start()
            leases = BotLeases(
                dispatcher,
                sessionmaker,
                name,
                {c.bot_id: c.token.value for c in clients},
                lease_seconds=lease,
            )
            await leases.round()
            leases.start()
            member = Member(name, dispatcher, leases, sessionmaker)
            members.append(member)
            return member

        yield join
        for member in members:
            if not member.stopped:
                await member.stop()


def disjoint(members: list[Member]) -> bool:
    held = [set(m.dispatcher.leased_bots()) for m in members]
    return sum(len(h) for h in held) == len(set().union(*held))


class OverlapWatch:
    """Looks every 10 ms, while its `async with` body runs, whether a bot is
    leased to two members at once, and counts the times it was. (An assert in
    a background task proves nothing: its error dies with the task.) An error
    in the watch itself fails the test when the body ends."""

    def __init__(self, members: list[Member], also: Callable[[], None] = lambda: None) -> None:
        self._members = members
        self._also = also
        self.looks = 0
        self.overlaps = 0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            self._also()
            self.looks += 1
            self.overlaps += not disjoint(self._members)
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> OverlapWatch:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def test_shares_follow_the_backlog() -> None:
    # Nobody busy: an even split.
    assert shares({"a": 0, "b": 0, "c": 0}, 6) == {"a": 2, "b": 2, "c": 2}
    assert shares({"a": 0, "b": 0}, 3) == {"a": 2, "b": 1}
    # One busy instance with work for the whole pool takes the whole pool.
    assert shares({"a": 40, "b": 0, "c": 0}, 6) == {"a": 6, "b": 0, "c": 0}
    # Never more bots than jobs; the rest is split evenly.
    assert shares({"a": 2, "b": 0, "c": 0}, 6) == {"a": 2, "b": 2, "c": 2}
    assert shares({"a": 3, "b": 0, "c": 0}, 7) == {"a": 3, "b": 2, "c": 2}
    # Every busy one gets a bot, then the most work per bot wins the next.
    assert shares({"a": 30, "b": 10, "c": 0}, 6) == {"a": 5, "b": 1, "c": 0}
    assert shares({"a": 30, "b": 20, "c": 0}, 6) == {"a": 4, "b": 2, "c": 0}
    assert shares({"a": 100, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 0}
    assert sum(shares({"a": 5, "b": 7, "c": 1}, 6).values()) == 6


async def test_an_idle_fleet_splits_the_bots_and_no_bot_has_two_holders(fleet: Fleet) -> None:
    members = [await fleet(name) for name in ("a", "b", "c")]

    await eventually(lambda: all(len(m.dispatcher.leased_bots()) == 2 for m in members), 10)
    assert disjoint(members)
    for member in members:
        assert set(member.dispatcher.leased_bots()) == member.leases.held
        assert set(member.dispatcher.serving_bots()) == member.leases.held


async def test_three_instances_under_concurrent_uploads_never_collide_and_bots_follow_work(
    sim: TelegramSimulator, fleet: Fleet
) -> None:
    members = [await fleet(name) for name in ("a", "b", "c")]
    await eventually(lambda: all(len(m.dispatcher.leased_bots()) == 2 for m in members), 10)
    sim.reset_stats()
    busy, light, _ = members
    held_by_busy: set[int] = set()

    async with OverlapWatch(
        members, also=lambda: held_by_busy.update(busy.dispatcher.leased_bots())
    ) as watch:
        # Most of the work arrives at one instance, a little at another.
        heavy = [busy.dispatcher.send_document(chunk(i), f"h{i}.bin") for i in range(120)]
        little = [light.dispatcher.send_document(chunk(1000 + i), f"l{i}.bin") for i in range(6)]
        documents: list[StoredDocument] = await asyncio.gather(*heavy, *little)

    # Never was a bot leased to two instances at once.
    assert watch.looks > 10
    assert watch.overlaps == 0, f"a bot had two holders in {watch.overlaps} of {watch.looks} looks"
    stats = sim.stats()
    assert all(bot.max_concurrent_calls <= 1 for bot in stats.values())
    assert sum(bot.rate_limited for bot in stats.values()) == 0
    # Bots went where the work was: the busy instance used most of the pool.
    assert len(held_by_busy) >= 5
    assert len({d.bot_id for d in documents[:120]}) >= 5
    assert len(documents) == 126


async def test_a_lone_instance_with_every_bot_looks_only_at_its_renewals_and_sees_a_newcomer(
    fleet: Fleet,
) -> None:
    """Alone and holding every bot, an instance has nothing to balance or
    take over: it reads the fleet's rows at each renewal only, not every
    BALANCE_SECONDS (an idle service's CPU went mostly to those rounds). An
    instance that joins is seen at the next renewal and gets its share."""
    lone = await fleet("a", lease=10.0)  # renewed every 2 s
    await eventually(lambda: len(lone.leases.held) == BOTS, 5)
    rounds = lone.leases.rounds
    await asyncio.sleep(3.0)
    assert lone.leases.rounds - rounds <= 2  # every 0.25 s: 12

    newcomer = await fleet("b", lease=10.0)
    await eventually(
        lambda: len(newcomer.dispatcher.leased_bots()) == BOTS // 2, lone.leases.interval * 2 + 1
    )
    assert disjoint([lone, newcomer])


async def test_a_dead_instances_bots_are_taken_over_within_the_lease_time(
    fleet: Fleet,
) -> None:
    members = [await fleet(name) for name in ("a", "b", "c")]
    await eventually(lambda: all(len(m.dispatcher.leased_bots()) == 2 for m in members), 10)
    dead, *alive = members
    orphaned = set(dead.dispatcher.leased_bots())

    await dead.die()
    # Unrenewed, its bots stop taking calls before the lease expires...
    stopped = await eventually(lambda: not dead.dispatcher.serving_bots(), LEASE)
    assert stopped < LEASE
    # ...and the others hold all of them within the lease time (plus a round).
    taken = await eventually(
        lambda: len(set().union(*(m.dispatcher.serving_bots() for m in alive))) == BOTS,
        LEASE * 2 + 1,
    )
    assert taken <= LEASE * 2 + 1
    assert orphaned <= set().union(*(m.leases.held for m in alive))
    assert disjoint(alive)


async def test_a_rate_limit_cooldown_travels_with_the_lease(fleet: Fleet) -> None:
    first = await fleet("a")
    bot_id = sorted(first.leases.held)[0]
    worker = first.dispatcher.workers[bot_id]
    worker.cooldown_until = time.monotonic() + 40  # as after a 429 with retry_after=40
    await first.leases.round()  # written to the lease
    await first.stop()  # releases every lease

    second = await fleet("b")
    assert bot_id in second.leases.held
    left = second.dispatcher.workers[bot_id].cooldown_until - time.monotonic()
    assert 35 < left <= 40
    # It takes no job meanwhile.
    picked = second.dispatcher.pick_bot()
    assert picked is not None and picked.bot_id != bot_id


async def test_bots_held_elsewhere_count_for_the_pool_but_unchecked_ones_held_here_do_not(
    sim: TelegramSimulator,
) -> None:
    """What /ready and an upload's parallelism count: an instance holding no
    bot is ready when the fleet has checked bots; one holding a bot it has not
    checked yet is not (a single instance at startup)."""
    clients = [BotClient(BotToken.parse(token), api_base="http://unused") for token in sim.tokens]
    dispatcher = Dispatcher(clients, chat_ids=[CHAT_ID], checked=False)
    dispatcher.require_leases()
    await dispatcher.start()
    try:
        # None held here: the fleet's bots.
        assert dispatcher.pool_size() == BOTS
        # Held here and still being checked: not yet.
        for bot_id in sim.bot_ids:
            dispatcher.grant(bot_id, time.monotonic() + 60, 0.0)
        assert dispatcher.pool_size() == 0
        dispatcher.admit(sim.bot_ids[0])
        assert dispatcher.pool_size() == 1
    finally:
        await dispatcher.stop(grace=1)


async def test_a_hand_over_waits_for_the_running_call_and_the_rounds_go_on(
    sim: TelegramSimulator, fleet: Fleet
) -> None:
    """Calls that outlast the lease: the giver keeps renewing the bots it
    hands over until their calls end (so the taker never overlaps them), and
    its other leases stay renewed meanwhile."""
    # A lease of 3 s, twice the module's: renewals due every 0.6 s stay in
    # time on a loaded machine, which the uploads below load further.
    lease = 2 * LEASE
    giver = await fleet("a", lease=lease)
    assert len(giver.leases.held) == BOTS
    sim.reset_stats()
    # 18 MiB at 2 MiB/s: each call runs 9 s, three times the lease. The checks
    # below need the calls still running one lease after the hand-over, which
    # came up to 3 s after they began on a loaded machine (3 s calls once
    # ended before the check in CI).
    started = time.monotonic()
    long_calls = [
        asyncio.ensure_future(giver.dispatcher.send_document(chunk(i, 18 * 1024 * 1024), f"{i}"))
        for i in range(BOTS)
    ]
    await eventually(lambda: all(w.running for w in giver.dispatcher.workers.values()), 5)
    taker = await fleet("b", lease=lease)
    overlaps = 0

    async def watch() -> None:
        nonlocal overlaps
        while True:
            overlaps += not disjoint([giver, taker])
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    # Work waits at the taker, which holds no bot yet: it wants half the pool.
    small = [
        asyncio.ensure_future(taker.dispatcher.send_document(chunk(100 + i), f"s{i}"))
        for i in range(BOTS)
    ]
    rounds = giver.leases.rounds
    await eventually(lambda: len(giver.leases.staying()) < BOTS, 2)
    # While the handed-over bots finish their calls, the giver's rounds go on.
    await asyncio.sleep(lease)
    assert giver.leases.rounds >= rounds + 3
    assert not any(long.done() for long in long_calls), (
        f"the calls ended {time.monotonic() - started:.1f} s in, before the check"
    )

    documents = await asyncio.gather(*long_calls, *small)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    assert len(documents) == 2 * BOTS
    assert taker.leases.held
    # Never was a bot leased to both.
    assert overlaps == 0
    stats = sim.stats()
    assert all(bot.max_concurrent_calls <= 1 for bot in stats.values())
    assert sum(bot.rate_limited for bot in stats.values()) == 0


async def test_a_cooldown_reaches_the_lease_before_the_next_renewal(
    fleet: Fleet, sessionmaker: Sessions
) -> None:
    """A 429 begun after a renewal is written at once, not at the next
    renewal (every 12 s with a 60 s lease), even by a lone instance that
    rounds at its renewals only: should the instance die now, the next holder
    still waits it out."""
    member = await fleet("a", lease=60.0)
    # The loop's first round: from then on it holds every bot and rounds at
    # renewals only. A round takes milliseconds; the second is 12 s away, so
    # after this pause no round of the loop can be what writes the cooldown.
    await eventually(lambda: member.leases.rounds >= 2, 5)
    await asyncio.sleep(1.0)
    assert member.leases.rounds == 2 and len(member.leases.held) == BOTS
    bot_id = sorted(member.leases.held)[0]
    member.dispatcher.workers[bot_id].cooldown_until = time.monotonic() + 40

    async def cooldown_on_row() -> float:
        async with session_scope(sessionmaker) as session:
            rows = await LeaseRepository(session).all()
        row = next(r for r in rows if r.bot_id == bot_id)
        return (row.cooldown_until - utcnow()).total_seconds()

    started = time.monotonic()
    while await cooldown_on_row() < 35:
        # Half the renewal interval: room for a busy machine, none for a renewal.
        assert time.monotonic() - started < 6, "the cooldown waited for the next renewal"
        await asyncio.sleep(0.05)


async def test_a_bot_every_chat_refused_stays_leased_so_its_holder_rechecks_it(
    fleet: Fleet,
) -> None:
    """Such a bot has no work, so it is handed over first; the instance it
    goes to must still take its lease, since only a holder re-checks it."""
    first = await fleet("a")
    refused = sorted(first.leases.held)[0]

    def refuse(member: Member) -> None:
        worker = member.dispatcher.workers[refused]
        worker.usable = False  # as after a 403 in its last chat
        worker.chats.clear()
        assert refused in member.dispatcher.chats_to_recheck()

    refuse(first)
    second = await fleet("b")  # holds nothing yet: the first holds every bot
    refuse(second)
    await eventually(lambda: len(first.leases.held) == BOTS // 2, 10)
    await eventually(lambda: len(second.leases.held) == BOTS // 2, 10)
    holders = [m for m in (first, second) if refused in m.leases.held]
    assert len(holders) == 1
