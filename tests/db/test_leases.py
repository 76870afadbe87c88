"""Bot lease rows (app/db/leases.py) on both backends: one holder at a time,
takeover after expiry or release only (not when the holder's instance row is
gone), and the cooldown that travels with a lease."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.leases import LeaseRepository
from app.db.session import session_scope
from app.db.spool import InstanceRepository
from app.store.blocks import READABLE

Sessions = async_sessionmaker[AsyncSession]
T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
NO_COOLDOWN = datetime(1970, 1, 1, tzinfo=UTC)


async def register(sessionmaker: Sessions, *names: str) -> None:
    async with session_scope(sessionmaker) as session:
        for name in names:
            await InstanceRepository(session).register(name, "host", 1, block_digests=READABLE)


async def take(
    sessionmaker: Sessions,
    owner: str,
    now: datetime,
    *,
    cooldown: datetime = NO_COOLDOWN,
    token_hash: str = "h1",
) -> datetime | None:
    async with session_scope(sessionmaker) as session:
        return await LeaseRepository(session).take(
            token_hash, 1, owner, seconds=15, cooldown_until=cooldown, now=now
        )


async def test_a_lease_has_one_holder_until_it_expires(sessionmaker: Sessions) -> None:
    await register(sessionmaker, "a", "b")
    assert await take(sessionmaker, "a", T0) == NO_COOLDOWN
    # Held: another instance cannot take it; the holder renews it.
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=10)) is None
    assert await take(sessionmaker, "a", T0 + timedelta(seconds=10)) is not None
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=20)) is None
    # Not renewed for its whole length: free for the taking.
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=26)) is not None
    assert await take(sessionmaker, "a", T0 + timedelta(seconds=27)) is None
    async with session_scope(sessionmaker) as session:
        (row,) = await LeaseRepository(session).all()
    assert (row.owner, row.bot_id, row.expires_at) == ("b", 1, T0 + timedelta(seconds=41))


async def test_a_released_lease_is_free_at_once_and_keeps_its_cooldown(
    sessionmaker: Sessions,
) -> None:
    await register(sessionmaker, "a", "b")
    cooldown = T0 + timedelta(seconds=40)
    assert await take(sessionmaker, "a", T0, cooldown=cooldown) == cooldown
    async with session_scope(sessionmaker) as session:
        # Only the holder can release it.
        assert not await LeaseRepository(session).release(
            "h1", "b", cooldown_until=NO_COOLDOWN, now=T0
        )
        assert await LeaseRepository(session).release(
            "h1", "a", cooldown_until=NO_COOLDOWN, now=T0 + timedelta(seconds=1)
        )
    # The new holder learns the 429 cooldown it must honour.
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=1)) == cooldown


async def test_the_later_cooldown_wins(sessionmaker: Sessions) -> None:
    await register(sessionmaker, "a")
    late = T0 + timedelta(seconds=50)
    assert await take(sessionmaker, "a", T0, cooldown=late) == late
    assert await take(sessionmaker, "a", T0 + timedelta(seconds=1)) == late
    later = T0 + timedelta(seconds=90)
    assert await take(sessionmaker, "a", T0 + timedelta(seconds=2), cooldown=later) == later


async def test_instances_racing_for_a_free_lease_get_it_once(sessionmaker: Sessions) -> None:
    owners = [f"i{n}" for n in range(8)]
    await register(sessionmaker, *owners)
    for round_start in (T0, T0 + timedelta(minutes=1)):  # a new lease, then an expired one
        results = await asyncio.gather(*(take(sessionmaker, o, round_start) for o in owners))
        assert sum(r is not None for r in results) == 1


async def test_a_lease_of_an_instance_whose_row_is_gone_is_held_until_it_expires(
    sessionmaker: Sessions,
) -> None:
    """An instance's row can be claimed while it lives (taken for dead by
    one that registered beside it) and its calls go on meanwhile: its
    leases pass only when they expire or it releases them (issue 56)."""
    await register(sessionmaker, "claimed", "b")
    assert await take(sessionmaker, "claimed", T0) is not None
    async with session_scope(sessionmaker) as session:
        await InstanceRepository(session).remove("claimed")
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=2)) is None
    # Its holder renews it still.
    assert await take(sessionmaker, "claimed", T0 + timedelta(seconds=3)) is not None
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=17)) is None
    # Unrenewed for a whole lease: free.
    assert await take(sessionmaker, "b", T0 + timedelta(seconds=18)) is not None
    async with session_scope(sessionmaker) as session:
        (row,) = await LeaseRepository(session).all()
    assert (row.owner, row.owner_registered) == ("b", True)
