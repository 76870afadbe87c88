"""Bot leases across several instances (app/store/leases.py): three
dispatchers, each with its own clients and lease keeper, share one database
(SQLite and Postgres through pgbouncer) and the Telegram simulator, which
enforces Telegram's rule that a token runs one call at a time and counts the
calls it sees in flight per token."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config.settings import BotToken
from app.db.leases import LeaseRepository, LeaseRow
from app.db.models import BotLease
from app.db.session import session_scope
from app.db.spool import InstanceRepository
from app.db.types import utcnow
from app.store.blocks import READABLE
from app.store.leases import BotLeases, shares, token_hash
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import DispatcherClosed, NoUsableBot
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument
from tests.running_service import eventually

# Postgres too: leases are rows every instance races for (tests/README.md, "Which
# backend"). Serial: 1.5 s leases are renewed every 0.3 s, and a CPU starved by
# other tests' workers renews them late (the design's known limit).
pytestmark = [pytest.mark.both_backends, pytest.mark.serial]

Sessions = async_sessionmaker[AsyncSession]
CHAT_ID = -1001234567890
T = TypeVar("T")
LEASE = 1.5  # seconds; rounds every 0.3 s
BOTS = 6


def chunk(index: int, size: int = 128 * 1024) -> bytes:
    return random.Random(index).randbytes(size)


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
        # Running until now (a round's error is logged, never ends the loop);
        # stopping it raises whatever else ended it.
        assert self.leases.loop.running
        await self.leases.loop.stop()


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
                await InstanceRepository(session).register(
                    name, "test-host", 0, block_digests=READABLE
                )
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


async def lease_rows(sessionmaker: Sessions) -> dict[int, LeaseRow]:
    async with session_scope(sessionmaker) as session:
        return {row.bot_id: row for row in await LeaseRepository(session).all()}


async def latest_expiry(sessionmaker: Sessions) -> datetime:
    return max(row.expires_at for row in (await lease_rows(sessionmaker)).values())


def observe_rounds(leases: BotLeases, observe: Callable[[], Awaitable[T]]) -> list[T]:
    """From now on, `observe()` runs after each round of `leases` ends; the
    list it returns fills with what it gave, one item per round."""
    seen: list[T] = []
    round_once = leases.round

    async def observed_round() -> None:
        await round_once()
        seen.append(await observe())

    leases.round = observed_round  # type: ignore[method-assign]
    return seen


def disjoint(members: list[Member]) -> bool:
    held = [set(m.dispatcher.leased_bots()) for m in members]
    return sum(len(h) for h in held) == len(set().union(*held))


class OverlapWatch:
    """Looks every 10 ms, while its `async with` body runs, whether a bot is
    held by two of `holders` at once (each gives the bots one instance holds;
    members: the bots leased to them), and counts the times it was. (An
    assert in a background task proves nothing: its error dies with the
    task.) An error in the watch itself fails the test when the body ends."""

    def __init__(
        self,
        holders: list[Member] | list[Callable[[], list[int]]],
        also: Callable[[], None] = lambda: None,
    ) -> None:
        self._holders = [h.dispatcher.leased_bots if isinstance(h, Member) else h for h in holders]
        self._also = also
        self.looks = 0
        self.overlaps = 0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            self._also()
            self.looks += 1
            held = [set(holder()) for holder in self._holders]
            self.overlaps += sum(len(h) for h in held) != len(set().union(*held))
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
    fleet: Fleet, sessionmaker: Sessions
) -> None:
    """Alone and holding every bot, an instance has nothing to balance or
    take over: it reads the fleet's rows at each renewal only, not every
    BALANCE_SECONDS (an idle service's CPU went mostly to those rounds). An
    instance that joins is seen at the next renewal and gets its share."""
    # Renewed every 0.6 s: a round every BALANCE_SECONDS would be two per renewal.
    lone = await fleet("a", lease=3.0)
    await eventually(lambda: len(lone.leases.held) == BOTS)
    expiries = observe_rounds(lone.leases, lambda: latest_expiry(sessionmaker))
    # After the loop's first round, each round is a renewal: it moves the
    # leases' expiry.
    await eventually(lambda: len(expiries) > 3)
    assert all(later > earlier for earlier, later in itertools.pairwise(expiries)), (
        f"rounds that renewed nothing: {expiries}"
    )

    newcomer = await fleet("b", lease=3.0)
    await eventually(lambda: len(newcomer.dispatcher.leased_bots()) == BOTS // 2)
    assert disjoint([lone, newcomer])


async def test_a_dead_instances_bots_are_taken_over_and_never_run_on_two_instances(
    fleet: Fleet,
) -> None:
    """An instance that dies stops its bots before their leases expire; the
    others take them once they have (how soon: bench/scaleout_bench.py)."""
    members = [await fleet(name) for name in ("a", "b", "c")]
    await eventually(lambda: all(len(m.dispatcher.leased_bots()) == 2 for m in members))
    dead, *alive = members
    orphaned = set(dead.dispatcher.leased_bots())

    # A bot the dead instance could still call with may be held by no other.
    holders = [dead.dispatcher.serving_bots, *(m.dispatcher.leased_bots for m in alive)]
    async with OverlapWatch(holders) as watch:
        await dead.die()
        # Unrenewed, its bots stop taking calls...
        await eventually(lambda: not dead.dispatcher.serving_bots())
        # ...and the others hold all of them.
        await eventually(
            lambda: len(set().union(*(m.dispatcher.serving_bots() for m in alive))) == BOTS
        )
    assert watch.looks > 10
    assert watch.overlaps == 0
    assert orphaned <= set().union(*(m.leases.held for m in alive))
    assert disjoint(alive)


async def test_an_instance_whose_row_was_claimed_registers_again_as_what_it_is(
    fleet: Fleet, sessionmaker: Sessions
) -> None:
    """Taken for dead and its row claimed, a live instance registers again:
    with the block digests it checks, or the fleet would give every new chunk
    SHA-256 (app.store.blocks.digest_for_new_chunks) until it restarts."""
    member = await fleet("a")
    async with session_scope(sessionmaker) as session:
        await InstanceRepository(session).remove("a")  # another instance's claim

    async def row() -> list[str]:
        async with session_scope(sessionmaker) as session:
            return await InstanceRepository(session).block_digests({"a"})

    async def registered_again() -> bool:
        return bool(await row())

    await eventually(registered_again)
    assert await row() == [READABLE]
    assert member.leases.loop.running


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


async def test_a_job_waits_for_a_dead_instances_bots_through_their_first_check_here(
    sim: TelegramSimulator, sessionmaker: Sessions
) -> None:
    """A restart after kill -9: the dead instance's leases expire, this one
    takes the bots, and each is checked before it works. An upload that
    came then failed at once, 503 "no bot has passed its check yet" (CI,
    tests/deploy/test_tus_crash.py), where one a moment earlier waited for
    the leases. It waits now while their first check is under way; once
    every check failed, it is told why, at once, as at a fresh start
    (tests/runtime/test_startup.py)."""
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        tokens = {c.bot_id: c.token.value for c in clients}
        async with session_scope(sessionmaker) as session:
            # The dead instance's leases, its row already claimed.
            leases = LeaseRepository(session)
            for bot_id, value in tokens.items():
                taken = await leases.take(
                    token_hash(value), bot_id, "dead", seconds=LEASE, cooldown_until=utcnow()
                )
                assert taken is not None
            await InstanceRepository(session).register("a", "test-host", 0, block_digests=READABLE)
        dispatcher = Dispatcher(clients, chat_ids=[CHAT_ID], checked=False, all_failed_pause=0.2)
        dispatcher.require_leases()
        await dispatcher.start()
        leases_here = BotLeases(dispatcher, sessionmaker, "a", tokens, lease_seconds=LEASE)
        try:
            await leases_here.round()  # the dead one's leases, not expired yet
            assert not leases_here.held

            async def all_taken() -> bool:
                await leases_here.round()
                return leases_here.held == set(sim.bot_ids)

            await eventually(all_taken)
            assert dispatcher.probing_bots() == sim.bot_ids  # none checked yet
            waiting = asyncio.ensure_future(dispatcher.send_document(b"x", "x.bin"))
            await asyncio.sleep(0.5)
            assert not waiting.done()  # before the fix: NoUsableBot at once

            for bot_id in sim.bot_ids:
                dispatcher.note_check_problem(bot_id, "getMe: 401 Unauthorized")
            await leases_here.round()
            with pytest.raises(NoUsableBot, match="401 Unauthorized"):
                async with asyncio.timeout(5):
                    await waiting

            # A check passes: the bot works.
            dispatcher.admit(sim.bot_ids[0])
            async with asyncio.timeout(10):
                document = await dispatcher.send_document(b"x", "y.bin")
            assert document.bot_id == sim.bot_ids[0]
        finally:
            await dispatcher.stop(grace=1)
            await leases_here.stop()


async def test_a_hand_over_waits_for_the_running_call_and_the_rounds_go_on(
    sim: TelegramSimulator, fleet: Fleet, sessionmaker: Sessions
) -> None:
    """Calls that outlast the lease: the giver keeps renewing the bots it
    hands over until their calls end (so the taker never overlaps them), and
    its other leases stay renewed meanwhile."""
    giver = await fleet("a")
    assert len(giver.leases.held) == BOTS
    sim.reset_stats()
    # Telegram holds every upload until the checks below are done, so the
    # calls last as long as the test needs on any machine.
    with sim.holding("sendDocument"):
        long_calls = [
            asyncio.ensure_future(giver.dispatcher.send_document(chunk(i), f"{i}"))
            for i in range(BOTS)
        ]
        async with asyncio.timeout(10):
            await sim.wait_held("sendDocument", BOTS)
        taker = await fleet("b")

        async with OverlapWatch([giver, taker]) as watch:
            # Work waits at the taker, which holds no bot yet: it wants half the pool.
            small = [
                asyncio.ensure_future(taker.dispatcher.send_document(chunk(100 + i), f"s{i}"))
                for i in range(BOTS)
            ]
            rounds = giver.leases.rounds
            await eventually(lambda: len(giver.leases.staying()) < BOTS)
            handing = giver.leases.held - giver.leases.staying()
            at_hand_over = await lease_rows(sessionmaker)
            # While the handed-over bots finish their calls, the giver's rounds go
            # on and renew their leases too: the taker cannot take them yet.

            async def renewed_since() -> bool:
                rows = await lease_rows(sessionmaker)
                return all(
                    rows[b].owner == "a" and rows[b].expires_at > at_hand_over[b].expires_at
                    for b in handing
                )

            await eventually(renewed_since)
            await eventually(lambda: giver.leases.rounds >= rounds + 3)
            assert not handing & taker.leases.held
            assert not any(long.done() for long in long_calls)
            sim.release("sendDocument")  # the calls end: the hand-over completes
            documents = await asyncio.gather(*long_calls, *small)

    assert len(documents) == 2 * BOTS
    assert taker.leases.held
    # Never was a bot leased to both.
    assert watch.looks > 10
    assert watch.overlaps == 0
    stats = sim.stats()
    assert all(bot.max_concurrent_calls <= 1 for bot in stats.values())
    assert sum(bot.rate_limited for bot in stats.values()) == 0


async def test_a_cooldown_reaches_the_lease_before_the_next_renewal(
    fleet: Fleet, sessionmaker: Sessions
) -> None:
    """A 429 begun after a renewal is written at once, not at the next
    renewal, even by a lone instance that rounds at its renewals only:
    should the instance die now, the next holder still waits it out."""
    # A lease of an hour: the next renewal is 12 minutes away, so nothing
    # but the cooldown can write it within this test.
    member = await fleet("a", lease=3600.0)
    # After the loop's first round it holds every bot and rounds at renewals only.
    finished = observe_rounds(member.leases, lambda: asyncio.sleep(0))
    await eventually(lambda: len(finished) == 1)
    assert member.leases.rounds == 2 and len(member.leases.held) == BOTS
    bot_id = sorted(member.leases.held)[0]
    member.dispatcher.workers[bot_id].cooldown_until = time.monotonic() + 40

    async def cooldown_written() -> bool:
        row = (await lease_rows(sessionmaker))[bot_id]
        return (row.cooldown_until - utcnow()).total_seconds() > 35

    await eventually(cooldown_written)
    # One round did it: the one the cooldown asked for.
    assert member.leases.rounds == 3


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


async def test_a_call_that_would_outlast_its_lease_is_cut_before_the_lease_can_pass(
    sim: TelegramSimulator, fleet: Fleet, sessionmaker: Sessions
) -> None:
    """Renewals stop (the database is away): a call still running is cut
    before the lease expires, so it never runs on into the calls of the
    instance that takes the bot next (issue 56)."""
    member = await fleet("a")
    await member.leases.loop.stop()  # no renewal from now on
    cut_at: list[datetime] = []

    def observe(bot_id: int, method: str, outcome: str, seconds: float) -> None:
        if outcome == "abandoned":
            cut_at.append(utcnow())

    member.dispatcher.on_attempt = observe
    with sim.holding("sendDocument"):
        send = asyncio.ensure_future(member.dispatcher.send_document(chunk(1), "long"))
        try:
            async with asyncio.timeout(10):
                await sim.wait_held("sendDocument")
            (worker,) = [w for w in member.dispatcher.workers.values() if w.running is not None]
            await eventually(lambda: bool(cut_at), 10)
            # Cut while the lease was still this instance's: no one else
            # could have called with the bot before the call ended here.
            row = (await lease_rows(sessionmaker))[worker.bot_id]
            assert row.owner == "a"
            assert cut_at[0] < row.expires_at
            assert worker.running is None
            # Telegram may still be finishing it: the token cools down.
            assert worker.cooldown_until > time.monotonic() + 30
        finally:
            send.cancel()


async def test_a_call_cut_by_a_stop_leaves_its_cooldown_on_the_released_lease(
    sim: TelegramSimulator, fleet: Fleet
) -> None:
    """A stop cuts a call whose end it cannot wait for, and releases the
    lease at once: the next holder must not call with the bot while
    Telegram may still be working on that call."""
    first = await fleet("a")
    with sim.holding("sendDocument"):
        send = asyncio.ensure_future(first.dispatcher.send_document(chunk(2), "cut"))
        async with asyncio.timeout(10):
            await sim.wait_held("sendDocument")
        (bot_id,) = [w.bot_id for w in first.dispatcher.workers.values() if w.running is not None]
        first.stopped = True
        await first.dispatcher.stop(grace=0)
        await first.leases.stop()
        async with session_scope(first.sessionmaker) as session:
            await InstanceRepository(session).remove("a")
        with pytest.raises(DispatcherClosed):
            await send
        second = await fleet("b")
        assert bot_id in second.leases.held
        assert second.dispatcher.workers[bot_id].cooldown_until > time.monotonic() + 30
        assert second.dispatcher.pick_bot(exclude=set(second.leases.held) - {bot_id}) is None


@pytest.mark.postgres_only
async def test_a_renewal_held_up_on_one_lease_renews_the_others_meanwhile(
    fleet: Fleet, sessionmaker: Sessions
) -> None:
    """Each lease is renewed in a transaction of its own. In one transaction
    for all, a round that waits on one row (another instance's round locked
    it, taking it) renewed none until then; two such rounds locking rows in
    different orders deadlocked, and Postgres aborted one: nothing renewed."""
    member = await fleet("a")
    await member.leases.loop.stop()  # rounds by hand from now on
    bots = sorted(member.leases.held)
    before = await lease_rows(sessionmaker)
    for bot_id in bots:  # a cooldown to write: every lease is due for renewal
        member.dispatcher.workers[bot_id].cooldown_until = time.monotonic() + 1
    async with sessionmaker() as other:
        # Another instance's transaction holds the last lease's row (the
        # round renews in the bots' order: the others come first).
        await other.execute(select(BotLease).where(BotLease.bot_id == bots[-1]).with_for_update())
        renewal = asyncio.ensure_future(member.leases.round())
        try:

            async def others_renewed() -> bool:
                rows = await lease_rows(sessionmaker)
                return all(rows[b].expires_at > before[b].expires_at for b in bots[:-1])

            await eventually(others_renewed, 10)
            assert not renewal.done()
        finally:
            await other.rollback()
    await renewal
    assert (await lease_rows(sessionmaker))[bots[-1]].expires_at > before[bots[-1]].expires_at
