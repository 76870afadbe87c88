"""Who may call: API keys, and the web page's sign-ins, which trade a key for
a session token (app/db/web_sessions.py keeps only its hash).

A key sent with a request is checked through the memory of refused keys
(app/store/key_checks.py). Signing in asks the database every time: it reads
the key in the transaction that writes the session row. Both count a failed
check against the client's address, and refuse to check a key from a client
past the limits (app/store/key_failures.py).

Every call is a short session of its own: an upload must not hold a database
connection for as long as its body takes to arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.locking import lock_database_for_write
from app.db.session import session_scope
from app.db.web_sessions import WebSessionRepository
from app.store.callers import Caller
from app.store.key_checks import KeyChecks
from app.store.key_failures import KeyFailures, api_key_credential


@dataclass(frozen=True, slots=True)
class SignedIn:
    key: Caller
    # The cookie's value; only its hash is stored.
    token: str


class AccessStore:
    def __init__(
        self, sessionmaker: async_sessionmaker[AsyncSession], *, refused_key_ttl: float
    ) -> None:
        self._sessionmaker = sessionmaker
        self._key_checks = KeyChecks(sessionmaker, ttl=refused_key_ttl)
        # Shared with the S3 API, which checks its signatures itself.
        self.failures = KeyFailures(sessionmaker)

    async def verify_key(self, plaintext: str, address: str) -> Caller | None:
        """The active key `plaintext` is, or None (a recent refusal from
        memory); TooManyFailedChecks past the limits of `address`, the
        client's."""
        credential = api_key_credential(plaintext)
        self.failures.check(address, credential)
        found = await self._key_checks.verify(plaintext)
        if found is None:
            await self.failures.failed(address, credential)
        return found

    async def sign_in(
        self,
        plaintext: str,
        lifetime: timedelta,
        *,
        address: str,
        replacing: str | None = None,
    ) -> SignedIn | None:
        """A new web session for the active key `plaintext`, or None if there
        is no such key; the session `replacing` names (the browser's old one)
        ends with it. TooManyFailedChecks past the limits of `address`."""
        # A wrong key is refused through the memory of refused keys first,
        # without a turn at SQLite's write lock.
        if await self.verify_key(plaintext, address) is None:
            return None
        async with session_scope(self._sessionmaker) as session:
            # It reads the key, then writes the session row: on SQLite a
            # transaction that read may not write once another connection has
            # (a lease heartbeat, an upload), so it takes the write lock first.
            await lock_database_for_write(session)
            key = await ApiKeyRepository(session).verify(plaintext)
            if key is None:
                return None
            sessions = WebSessionRepository(session)
            if replacing is not None:
                await sessions.close(replacing)
            token = await sessions.open(key, lifetime)
        return SignedIn(Caller.of(key), token)

    async def signed_in_key(self, token: str) -> Caller | None:
        """The active key a live web session was opened with, or None."""
        async with session_scope(self._sessionmaker) as session:
            key = await WebSessionRepository(session).key_of(token)
        return None if key is None else Caller.of(key)

    async def sign_out(self, token: str) -> None:
        """End the web session `token` names, if there is one."""
        async with session_scope(self._sessionmaker) as session:
            await WebSessionRepository(session).close(token)

    async def close(self) -> None:
        """Wait for the key lookups in flight (they hold database connections)."""
        await self._key_checks.close()
