"""WebDAV locks as the HTTP layer sees them: taking, refreshing and
releasing one, and the rule every write obeys (RFC 4918 sections 6 and 7).

The rule: a write to a resource covered by locks goes through only if the
request submitted (in its `If` header) the token of every exclusive lock
that covers it, and of at least one of the shared ones. A token counts only
when the API key that took the lock submits it: another key that read it
from a lock discovery cannot use it. Locks live in the database
(app/db/dav_locks.py), so a lock taken through one instance binds every
other; a write checks them in the transaction that writes, under the lock
that LOCK takes to check for conflicts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.dav_locks import LockReader, LockRepository, LockRow
from app.db.listing import RowReader
from app.db.retry import in_transaction
from app.db.session import session_scope
from app.db.types import utcnow
from app.store.errors import StoreError

LockInfo = LockRow


class Locked(StoreError):
    """A lock covers what the request would change, and its token was not
    submitted (423 Locked, RFC 4918 `lock-token-submitted`)."""

    def __init__(self, lock: LockInfo) -> None:
        super().__init__(f"{lock.key} is locked")
        self.lock = lock


class LockConflict(StoreError):
    """The lock asked for conflicts with one held (423, `no-conflicting-lock`)."""

    def __init__(self, lock: LockInfo) -> None:
        super().__init__(f"{lock.key} holds a conflicting lock")
        self.lock = lock


class LockNotHeld(StoreError):
    """No lock of this token covers the resource (409 for UNLOCK, 412 for a
    refresh: RFC 4918 `lock-token-matches-request-uri`)."""


class LockOfAnotherKey(StoreError):
    """The lock was taken with another API key (403)."""


@dataclass(frozen=True, slots=True)
class Target:
    """What a write changes: the resource `key` (a folder's ends with "/"),
    and with `subtree` everything under the folder too."""

    key: str
    subtree: bool = False


@dataclass(frozen=True, slots=True)
class Submitted:
    """Who writes, and the lock tokens the request submitted."""

    api_key_id: int
    tokens: frozenset[str] = frozenset()


async def enforce(
    session: AsyncSession,
    bucket: str,
    targets: Iterable[Target],
    submitted: Submitted,
) -> None:
    """Raise Locked unless `submitted` may change every target; in the
    caller's transaction, after which no lock can be taken before it ends."""
    repo = LockRepository(session)
    await repo.serialize_shared()
    now = utcnow()
    for target in targets:
        covering = await repo.covering(bucket, target.key, now, subtree=target.subtree)
        blocking = blocking_lock(covering, submitted)
        if blocking is not None:
            raise Locked(blocking)


def blocking_lock(covering: list[LockInfo], submitted: Submitted) -> LockInfo | None:
    """The first lock of `covering` that `submitted` does not satisfy, or None."""

    def held(lock: LockInfo) -> bool:
        return lock.token in submitted.tokens and lock.api_key_id == submitted.api_key_id

    shared = [lock for lock in covering if not lock.exclusive]
    for lock in covering:
        if lock.exclusive and not held(lock):
            return lock
    if shared and not any(held(lock) for lock in shared):
        return shared[0]
    return None


def conflicting(covering: list[LockInfo], *, exclusive: bool) -> LockInfo | None:
    """A held lock that a new lock of this kind would conflict with: any,
    for an exclusive one; an exclusive one, for a shared one."""
    for lock in covering:
        if exclusive or lock.exclusive:
            return lock
    return None


class DavLocks:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], reader: RowReader) -> None:
        self._sessionmaker = sessionmaker
        self._reader = LockReader(reader)

    async def covering(self, bucket: str, key: str, *, subtree: bool = False) -> list[LockInfo]:
        """The live locks covering `key` (and, with `subtree`, under it)."""
        return await self._reader.covering(bucket, key, utcnow(), subtree=subtree)

    async def get(self, token: str) -> LockInfo | None:
        async with session_scope(self._sessionmaker) as session:
            return await LockRepository(session).get(token, utcnow())

    async def check(self, bucket: str, targets: Iterable[Target], submitted: Submitted) -> None:
        """Locked if `submitted` may not change the targets now: a check of
        the moment (a PUT's, before and after its body), taking no lock."""
        now = utcnow()
        for target in targets:
            covering = await self._reader.covering(bucket, target.key, now, subtree=target.subtree)
            blocking = blocking_lock(covering, submitted)
            if blocking is not None:
                raise Locked(blocking)

    async def lock(
        self,
        bucket: str,
        key: str,
        *,
        infinite: bool,
        exclusive: bool,
        owner: str,
        seconds: int,
        api_key_id: int,
    ) -> LockInfo:
        """A new lock on `key`; LockConflict if a held lock forbids it."""

        async def work(session: AsyncSession) -> LockInfo:
            repo = LockRepository(session)
            await repo.serialize()
            now = utcnow()
            await repo.purge_expired(now)
            held = await repo.covering(bucket, key, now, subtree=infinite and key.endswith("/"))
            clash = conflicting(held, exclusive=exclusive)
            if clash is not None:
                raise LockConflict(clash)
            lock = LockRow(
                token=f"urn:uuid:{uuid.uuid4()}",
                key=key,
                infinite=infinite,
                exclusive=exclusive,
                owner=owner,
                api_key_id=api_key_id,
                timeout_seconds=seconds,
                expires_at=now + timedelta(seconds=seconds),
                created_at=now,
            )
            await repo.add(bucket, lock)
            return lock

        return await in_transaction(self._sessionmaker, work)

    async def refresh(
        self, bucket: str, key: str, tokens: Iterable[str], api_key_id: int, seconds: int
    ) -> LockInfo:
        """Renew the lock among `tokens` that covers `key` for `seconds`
        more; LockNotHeld if none does, LockOfAnotherKey if it is another's."""

        async def work(session: AsyncSession) -> LockInfo:
            repo = LockRepository(session)
            await repo.serialize()
            now = utcnow()
            wanted = set(tokens)
            for lock in await repo.covering(bucket, key, now):
                if lock.token in wanted:
                    if lock.api_key_id != api_key_id:
                        raise LockOfAnotherKey("the lock was taken with another API key")
                    await repo.refresh(lock.token, seconds, now)
                    return lock._replace(
                        timeout_seconds=seconds, expires_at=now + timedelta(seconds=seconds)
                    )
            raise LockNotHeld("no lock of the submitted tokens covers this resource")

        return await in_transaction(self._sessionmaker, work)

    async def unlock(self, bucket: str, key: str, token: str, api_key_id: int) -> None:
        """Release the lock `token`, which must cover `key`."""

        async def work(session: AsyncSession) -> None:
            repo = LockRepository(session)
            await repo.serialize()
            now = utcnow()
            for lock in await repo.covering(bucket, key, now):
                if lock.token == token:
                    if lock.api_key_id != api_key_id:
                        raise LockOfAnotherKey("the lock was taken with another API key")
                    await repo.remove(token)
                    return
            raise LockNotHeld("no lock of this token covers this resource")

        await in_transaction(self._sessionmaker, work)
