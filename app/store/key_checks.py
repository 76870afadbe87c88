"""Checking presented API keys without letting bogus ones cost a query each.

A key nobody has is refused from memory for REFUSED_KEY_CACHE_SECONDS (the
TTL, 5 s by default) after the database said so, and concurrent requests
presenting the same key share one lookup. So a flood with one bogus key costs
one query per TTL, not one per request.

The refusal memory can only delay a key that becomes valid after it was
refused. Keys are created with 256 random bits by `teleuploader keys create`
(in another process), so nobody can present one before it exists; the short
TTL bounds the delay anyway, for a database restored from a backup or a key
created on another instance's database. Revoked keys are refused from memory
too, which is what revoking wants.

Memory is bounded: at most `REFUSED_KEYS_MAX` refusals are kept (32-byte
digests, never the keys), the oldest forgotten first, so a flood of distinct
bogus keys costs a query each but no unbounded memory. Lookups in flight are
bounded by the requests in flight.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.session import session_scope
from app.store.callers import Caller

# About 200 bytes each (digest, timestamp, dict slot): 2 MB at most.
REFUSED_KEYS_MAX = 10_000


class KeyChecks:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        ttl: float,
        max_refused: int = REFUSED_KEYS_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._ttl = ttl
        self._max_refused = max_refused
        self._clock = clock
        # digest -> when the database refused it, oldest first.
        self._refused: OrderedDict[bytes, float] = OrderedDict()
        self._in_flight: dict[bytes, asyncio.Task[Caller | None]] = {}

    @property
    def refused_count(self) -> int:
        return len(self._refused)

    async def verify(self, plaintext: str) -> Caller | None:
        """The active key `plaintext` is, or None. Database errors propagate
        (and are not remembered)."""
        digest = hashlib.sha256(plaintext.encode("utf-8")).digest()
        if self._recently_refused(digest):
            return None
        lookup = self._in_flight.get(digest)
        if lookup is None:
            # A task of its own: a client that disconnects must not cancel
            # the lookup the other requests with this key are waiting for.
            lookup = asyncio.create_task(self._look_up(plaintext, digest))
            self._in_flight[digest] = lookup
            lookup.add_done_callback(functools.partial(self._finished, digest))
        return await asyncio.shield(lookup)

    async def close(self) -> None:
        """Wait for the lookups in flight: they hold database connections,
        and none may outlive the engine."""
        if self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    def _finished(self, digest: bytes, lookup: asyncio.Task[Caller | None]) -> None:
        del self._in_flight[digest]
        # Retrieved here so that an error nobody waited for any more (every
        # requester gone) is not reported as "never retrieved".
        if not lookup.cancelled():
            lookup.exception()

    def _recently_refused(self, digest: bytes) -> bool:
        refused_at = self._refused.get(digest)
        if refused_at is None:
            return False
        if self._clock() - refused_at < self._ttl:
            return True
        del self._refused[digest]
        return False

    async def _look_up(self, plaintext: str, digest: bytes) -> Caller | None:
        # A short session of its own: an upload must not hold a database
        # connection for as long as its body takes to arrive.
        async with session_scope(self._sessionmaker) as session:
            found = await ApiKeyRepository(session).verify(plaintext)
        if found is not None:
            return Caller.of(found)
        if self._ttl > 0:
            self._refused[digest] = self._clock()
            self._refused.move_to_end(digest)
            while len(self._refused) > self._max_refused:
                self._refused.popitem(last=False)
        return None
