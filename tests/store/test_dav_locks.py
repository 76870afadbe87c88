"""WebDAV locks in the database (app.store.dav_locks, app.db.dav_locks):
which locks cover a resource, which a write must hold, which conflict; and
that concurrent LOCKs never both win. On Postgres too: the serialisation is
an advisory lock there, SQLite's write lock here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.single_statements import single_statements_for
from app.store.dav_locks import (
    DavLocks,
    LockConflict,
    Locked,
    LockNotHeld,
    LockOfAnotherKey,
    Submitted,
    Target,
)

pytestmark = pytest.mark.both_backends  # the serialisation differs per backend

B = "_native"
ME, OTHER = 1, 2


@pytest.fixture
async def locks(
    engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
) -> AsyncIterator[DavLocks]:
    statements = single_statements_for(engine)
    try:
        yield DavLocks(sessionmaker, statements)
    finally:
        await statements.close()


async def _lock(
    locks: DavLocks, key: str, *, infinite: bool = False, exclusive: bool = True, who: int = ME
) -> str:
    taken = await locks.lock(
        B, key, infinite=infinite, exclusive=exclusive, owner="", seconds=60, api_key_id=who
    )
    return taken.token


async def test_a_folders_infinite_lock_covers_what_lies_under_it_and_no_neighbour(
    locks: DavLocks,
) -> None:
    token = await _lock(locks, "named/a/", infinite=True)
    shallow = await _lock(locks, "named/b/", infinite=False)
    assert [lock.token for lock in await locks.covering(B, "named/a/x/y.txt")] == [token]
    assert await locks.covering(B, "named/ab/x") == []
    assert await locks.covering(B, "named/b/x") == [], "a depth-0 lock covers the folder only"
    assert [lock.token for lock in await locks.covering(B, "named/b/")] == [shallow]
    under = await locks.covering(B, "named/", subtree=True)
    assert {lock.token for lock in under} == {token, shallow}


async def test_a_write_needs_every_exclusive_token_and_one_shared(locks: DavLocks) -> None:
    token = await _lock(locks, "named/f.txt")
    with pytest.raises(Locked) as refused:
        await locks.check(B, [Target("named/f.txt")], Submitted(ME))
    assert refused.value.lock.key == "named/f.txt"
    await locks.check(B, [Target("named/f.txt")], Submitted(ME, frozenset({token})))
    with pytest.raises(Locked):
        # The token is no good in another key's hands.
        await locks.check(B, [Target("named/f.txt")], Submitted(OTHER, frozenset({token})))

    first = await _lock(locks, "named/s.txt", exclusive=False)
    await _lock(locks, "named/s.txt", exclusive=False, who=OTHER)
    await locks.check(B, [Target("named/s.txt")], Submitted(ME, frozenset({first})))
    with pytest.raises(Locked):
        await locks.check(B, [Target("named/s.txt")], Submitted(ME))


async def test_deleting_a_folder_needs_the_tokens_of_the_locks_under_it(locks: DavLocks) -> None:
    token = await _lock(locks, "named/d/deep/f.txt")
    await locks.check(B, [Target("named/d/", subtree=False)], Submitted(ME))
    with pytest.raises(Locked):
        await locks.check(B, [Target("named/d/", subtree=True)], Submitted(ME))
    await locks.check(B, [Target("named/d/", subtree=True)], Submitted(ME, frozenset({token})))


async def test_locks_conflict_as_rfc_4918_says(locks: DavLocks) -> None:
    await _lock(locks, "named/x/", infinite=True, exclusive=False)
    await _lock(locks, "named/x/f", exclusive=False, who=OTHER)
    with pytest.raises(LockConflict):
        await _lock(locks, "named/x/f")
    with pytest.raises(LockConflict):
        # An exclusive infinite lock on a folder conflicts with locks under it.
        await _lock(locks, "named/", infinite=True)
    await _lock(locks, "named/", infinite=False)


async def test_refresh_and_unlock_take_the_lock_holders_token_only(locks: DavLocks) -> None:
    token = await _lock(locks, "named/c/", infinite=True)
    refreshed = await locks.refresh(B, "named/c/inside", [token], ME, 120)
    assert refreshed.token == token and refreshed.timeout_seconds == 120
    with pytest.raises(LockNotHeld):
        await locks.refresh(B, "named/c/inside", ["urn:uuid:other"], ME, 120)
    with pytest.raises(LockOfAnotherKey):
        await locks.unlock(B, "named/c/", token, OTHER)
    with pytest.raises(LockNotHeld):
        await locks.unlock(B, "named/elsewhere", token, ME)
    await locks.unlock(B, "named/c/", token, ME)
    assert await locks.covering(B, "named/c/inside") == []


async def test_concurrent_exclusive_locks_on_one_file_are_never_both_granted(
    locks: DavLocks,
) -> None:
    outcomes = await asyncio.gather(
        *(_lock(locks, "named/race.txt", who=n) for n in range(8)), return_exceptions=True
    )
    granted = [outcome for outcome in outcomes if isinstance(outcome, str)]
    refused = [outcome for outcome in outcomes if isinstance(outcome, LockConflict)]
    assert len(granted) == 1 and len(refused) == 7, outcomes
