"""The limits on failed key checks (app/store/key_failures.py), on a clock
the test moves, over the database every instance shares: per client and
key start, per client in all, across instances, the window, and what is
never written or never refused.

Both backends: the count is an upsert with CASE and RETURNING, SQL that
differs between SQLite and Postgres, and instances race on one row."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.models import KeyCheckFailure
from app.db.session import session_scope
from app.store.access import AccessStore
from app.store.errors import TooManyFailedChecks
from app.store.key_failures import (
    FAILURES_PER_CLIENT,
    FAILURES_PER_CREDENTIAL,
    WINDOW_SECONDS,
    KeyFailures,
    api_key_credential,
    client_of,
    s3_credential,
)

pytestmark = pytest.mark.both_backends

Sessions = async_sessionmaker[AsyncSession]
GUESS = api_key_credential("tu_AbCdEfGhIj")
OTHER = api_key_credential("tu_ZyXwVuTsRq")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def rows(sessionmaker: Sessions) -> list[KeyCheckFailure]:
    async with session_scope(sessionmaker) as session:
        return list(await session.scalars(select(KeyCheckFailure)))


async def fail(failures: KeyFailures, address: str, credential: str) -> int | None:
    """One failed check as a caller makes it: None if it was answered as a
    failure (401), else the Retry-After of its refusal (429)."""
    try:
        failures.check(address, credential)
        await failures.failed(address, credential)
    except TooManyFailedChecks as refused:
        return refused.retry_after
    return None


async def test_a_client_is_refused_a_key_start_it_failed_with_and_nobody_else_is(
    sessionmaker: Sessions,
) -> None:
    clock = Clock()
    failures = KeyFailures(sessionmaker, clock=clock)
    answers = []
    for _ in range(FAILURES_PER_CREDENTIAL + 1):
        answers.append(await fail(failures, "203.0.113.7", GUESS))
        clock.now += timedelta(seconds=1)
    assert answers[:-1] == [None] * FAILURES_PER_CREDENTIAL
    # Refused from memory, unchecked, until the window that began at the
    # first failure ends.
    assert answers[-1] == WINDOW_SECONDS - FAILURES_PER_CREDENTIAL
    with pytest.raises(TooManyFailedChecks) as refused:
        failures.check("203.0.113.7", GUESS)  # the right key too: no oracle
    assert f"try again in {WINDOW_SECONDS - FAILURES_PER_CREDENTIAL - 1} s" in str(refused.value)
    # The same key from elsewhere, another key from there: checked as ever.
    failures.check("203.0.113.8", GUESS)
    failures.check("203.0.113.7", OTHER)
    clock.now += timedelta(seconds=WINDOW_SECONDS - FAILURES_PER_CREDENTIAL)
    failures.check("203.0.113.7", GUESS)
    # The next failure begins a new window.
    assert await fail(failures, "203.0.113.7", GUESS) is None
    [pair] = [row for row in await rows(sessionmaker) if row.credential]
    assert (pair.failures, pair.started_at) == (1, clock.now)


async def test_instances_share_one_count(sessionmaker: Sessions) -> None:
    clock = Clock()
    first, second = (KeyFailures(sessionmaker, clock=clock) for _ in range(2))
    half = FAILURES_PER_CREDENTIAL // 2
    for instance in (first, second):
        for _ in range(half):
            assert await fail(instance, "203.0.113.7", GUESS) is None
    # The second counted the last failure allowed: it refuses at once. The
    # first learns from its next failure's count, and refuses that one.
    with pytest.raises(TooManyFailedChecks):
        second.check("203.0.113.7", GUESS)
    first.check("203.0.113.7", GUESS)
    assert await fail(first, "203.0.113.7", GUESS) is not None
    with pytest.raises(TooManyFailedChecks):
        first.check("203.0.113.7", GUESS)


async def test_concurrent_failures_are_each_counted_once(sessionmaker: Sessions) -> None:
    clock = Clock()
    instances = [KeyFailures(sessionmaker, clock=clock) for _ in range(3)]
    await asyncio.gather(
        *(
            instances[n % 3].failed("203.0.113.7", api_key_credential(f"tu_{n:05d}"))
            for n in range(30)
        )
    )
    [total] = [row for row in await rows(sessionmaker) if not row.credential]
    assert total.failures == 30


async def test_past_its_bound_a_clients_failures_are_refused_uncounted_and_good_keys_pass(
    sessionmaker: Sessions,
) -> None:
    clock = Clock()
    failures = KeyFailures(sessionmaker, clock=clock)
    answers = [
        await fail(failures, "2001:db8:1:2::7", api_key_credential(f"tu_{n:05d}"))
        for n in range(FAILURES_PER_CLIENT + 1)
    ]
    assert answers[:-1] == [None] * FAILURES_PER_CLIENT
    assert answers[-1] == WINDOW_SECONDS
    written = len(await rows(sessionmaker))
    # Another address of the same /64, with a start of key never tried: its
    # failure is refused and written nowhere...
    assert await fail(failures, "2001:db8:1:2::8", api_key_credential("tu_fresh")) is not None
    assert len(await rows(sessionmaker)) == written
    # ...but a key is still checked: one that passes, passes.
    failures.check("2001:db8:1:2::8", api_key_credential("tu_fresh"))
    # Another /64 is another client.
    assert await fail(failures, "2001:db8:1:3::8", api_key_credential("tu_fresh")) is None


async def test_the_database_keeps_no_character_of_a_key_and_old_windows_are_swept(
    sessionmaker: Sessions,
) -> None:
    clock = Clock()
    failures = KeyFailures(sessionmaker, clock=clock)
    await failures.failed("203.0.113.7", api_key_credential("tu_SeCrEtXyZ"))
    await failures.failed("203.0.113.7", s3_credential("AKIAEXAMPLE"))
    stored = [(row.client, row.credential) for row in await rows(sessionmaker)]
    assert len(stored) == 3  # two credentials and the client's total
    assert not any("SeCrE" in credential or "AKIA" in credential for _, credential in stored)
    clock.now += timedelta(seconds=WINDOW_SECONDS + 1)
    await failures.failed("198.51.100.1", GUESS)
    assert {row.client for row in await rows(sessionmaker)} == {"198.51.100.1"}


async def test_what_a_process_remembers_is_bounded(sessionmaker: Sessions) -> None:
    clock = Clock()
    failures = KeyFailures(sessionmaker, clock=clock, max_remembered=3)
    for n in range(5):
        for _ in range(FAILURES_PER_CREDENTIAL):
            await failures.failed(f"198.51.100.{n}", GUESS)
    # Three limited pairs, and three counts of failures: each memory at its bound.
    assert failures.remembered == 6
    failures.check("198.51.100.0", GUESS)  # forgotten here; still in the database
    assert await fail(failures, "198.51.100.0", GUESS) is not None


def test_a_client_is_its_address_and_an_ipv6_one_its_64() -> None:
    assert client_of("203.0.113.7") == "203.0.113.7"
    assert client_of("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_of("::ffff:203.0.113.7") == "203.0.113.7"
    assert client_of("") == ""


async def test_a_key_that_passes_writes_nothing(sessionmaker: Sessions) -> None:
    access = AccessStore(sessionmaker, refused_key_ttl=5.0)
    async with session_scope(sessionmaker) as session:
        _key, plaintext = await ApiKeyRepository(session).create("registry", scope="write")
    for _ in range(20):
        assert await access.verify_key(plaintext, "203.0.113.7") is not None
    assert await rows(sessionmaker) == []
    assert await access.verify_key("tu_" + "b" * 43, "203.0.113.7") is None
    assert len(await rows(sessionmaker)) == 2
    await access.close()


async def test_a_burst_is_limited_even_when_the_database_cannot_count_it(
    sessionmaker: Sessions,
) -> None:
    """Failures at once, and a database too busy to take their counts
    ("database is locked" on a loaded SQLite): this process's own count still
    refuses every one past the limit."""

    def busy() -> object:
        raise OperationalError("UPSERT", {}, Exception("database is locked"))

    failures = KeyFailures(busy)  # type: ignore[arg-type]
    outcomes = await asyncio.gather(
        *(fail(failures, "198.51.100.9", GUESS) for _ in range(3 * FAILURES_PER_CREDENTIAL))
    )
    assert outcomes.count(None) == FAILURES_PER_CREDENTIAL
    with pytest.raises(TooManyFailedChecks):
        failures.check("198.51.100.9", GUESS)
