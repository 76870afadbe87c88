"""How often a client may fail a key check, counted in the database so that
every instance applies one count (docs/security.md, "Failed key checks",
has the reasoning).

A check is a key presented: an API key (`Authorization: Bearer`, the web
page's sign-in) or an S3 signature (by its access key id). Failures count
per client (its address; an IPv6 address by its /64, what one host gets),
in windows of WINDOW_SECONDS that begin at a failure:

- per client and credential (the first CREDENTIAL_PREFIX characters of an
  API key, `tu_` and five of the secret; an S3 access key id): past
  FAILURES_PER_CREDENTIAL, that client's checks of that credential are
  refused until the window ends, unchecked, the right key included (so no
  guess can be tested from there). Nobody elsewhere is refused for it, nor
  this client with another key: only someone at the owner's address who
  knows the start of the owner's key can have the owner refused, and only
  there, for a minute.
- per client, whatever the credential: past FAILURES_PER_CLIENT, its failed
  checks are refused and no longer counted (no more writes); a key that
  passes still passes.

Only failures write (an upsert: app/db/key_failures.py), and only up to the
limit: this process counts each failure in memory before it asks the
database, so a burst of failures at once (or a database too busy to count
them) is refused past the limit all the same, with no more writes. A key
that passes costs a look into this process's memory of limited clients,
empty unless someone is being limited. Each instance learns a client is limited from the
count its own failure returns: across N instances a limited client gets at
most N - 1 more checks per window. Web sessions (cookies) are not counted:
their tokens are the service's own 256 random bits, and a failure is
nearly always a session that expired.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta
from typing import Final, TypeVar

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.key_failures import KeyFailureRepository
from app.db.session import session_scope
from app.store.errors import TooManyFailedChecks

log = structlog.get_logger("app.store.key_failures")

WINDOW_SECONDS: Final = 60
FAILURES_PER_CREDENTIAL: Final = 10
FAILURES_PER_CLIENT: Final = 100
#: The characters of an API key that name it for the count: `tu_` and five.
CREDENTIAL_PREFIX: Final = 8
#: Limited clients (and, apart, client and credential pairs) this process
#: remembers at once, the oldest forgotten first (they are in the database
#: too: a forgotten one is learnt again at its next failure).
MAX_REMEMBERED: Final = 10_000
#: The credential of a client's count over every credential.
_ANY: Final = ""

K = TypeVar("K", bound=Hashable)


def api_key_credential(key: str) -> str:
    return "key:" + key[:CREDENTIAL_PREFIX]


def s3_credential(access_key: str) -> str:
    return "s3:" + access_key[:128]


def client_of(address: str) -> str:
    """The client an address counts as: an IPv6 address's /64 (one host's
    share: it may draw any address in it), any other as it is."""
    if ":" not in address:
        return address[:64]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _stored(credential: str) -> str:
    """What the database keeps of a credential: its hash, never a character."""
    return hashlib.sha256(credential.encode("utf-8", "replace")).hexdigest()


class KeyFailures:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_remembered: int = MAX_REMEMBERED,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._clock = clock
        self._max_remembered = max_remembered
        self._window = timedelta(seconds=WINDOW_SECONDS)
        # (client, credential) -> until when its checks are refused.
        self._limited: OrderedDict[tuple[str, str], datetime] = OrderedDict()
        # client -> until when its failures are refused uncounted.
        self._flooding: OrderedDict[str, datetime] = OrderedDict()
        # (client, credential or _ANY) -> (window start, failures) seen by
        # this process: counted before the database is asked, so that a
        # burst of failures at once, or a database too busy to count them,
        # cannot pass the limit here.
        self._seen: OrderedDict[tuple[str, str], tuple[datetime, int]] = OrderedDict()
        self._swept_at: datetime | None = None

    @property
    def remembered(self) -> int:
        """Limited clients and pairs, and counts of failures, this process
        remembers (tests of the bound)."""
        return len(self._limited) + len(self._flooding) + len(self._seen)

    def check(self, address: str, credential: str) -> None:
        """TooManyFailedChecks if checks of `credential` from `address` are
        refused now; else nothing (the key may be checked)."""
        if not self._limited:
            return
        until = _still(self._limited, (client_of(address), credential), self._clock())
        if until is not None:
            raise self._refusal(until, "with this key")

    async def failed(self, address: str, credential: str) -> None:
        """Count a failed check; TooManyFailedChecks if the client is past a
        limit (this failure is then answered so too)."""
        client, now = client_of(address), self._clock()
        if self._flooding:
            until = _still(self._flooding, client, now)
            if until is not None:
                raise self._refusal(until, "with any key")
        # This process's own count first: past a limit here, the failure is
        # refused without a write (the database's count is past it already,
        # or will be once the writes under way land).
        pair_seen, pair_seen_since = self._see((client, credential), now)
        total_seen, total_seen_since = self._see((client, _ANY), now)
        if pair_seen > FAILURES_PER_CREDENTIAL:
            self._remember(self._limited, (client, credential), pair_seen_since + self._window)
            raise self._refusal(pair_seen_since + self._window, "with this key")
        if total_seen > FAILURES_PER_CLIENT:
            self._remember(self._flooding, client, total_seen_since + self._window)
            raise self._refusal(total_seen_since + self._window, "with any key")
        try:
            async with session_scope(self._sessionmaker) as session:
                failures = KeyFailureRepository(session)
                pair, pair_since = await failures.count(
                    client, _stored(credential), now=now, window=self._window
                )
                total, total_since = await failures.count(
                    client, _ANY, now=now, window=self._window
                )
                if self._swept_at is None or now - self._swept_at >= self._window:
                    await failures.sweep(before=now - self._window)
                    self._swept_at = now
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            # The failure is still answered as one; the count waits for the database.
            log.warning("key_failure_not_counted", error=type(exc).__name__)
            return
        if pair >= FAILURES_PER_CREDENTIAL:
            if (client, credential) not in self._limited:
                log.warning("key_checks_limited", client=client, per="key")
            self._remember(self._limited, (client, credential), pair_since + self._window)
        if total >= FAILURES_PER_CLIENT:
            if client not in self._flooding:
                log.warning("key_checks_limited", client=client, per="client")
            self._remember(self._flooding, client, total_since + self._window)
        if pair > FAILURES_PER_CREDENTIAL:
            raise self._refusal(pair_since + self._window, "with this key")
        if total > FAILURES_PER_CLIENT:
            raise self._refusal(total_since + self._window, "with any key")

    def _see(self, name: tuple[str, str], now: datetime) -> tuple[int, datetime]:
        """One more failure of `name` in this process's count: (failures in
        its window, the window's start)."""
        since, failures = self._seen.get(name, (now, 0))
        if now - since >= self._window:
            since, failures = now, 0
        self._seen[name] = (since, failures + 1)
        self._seen.move_to_end(name)
        while len(self._seen) > self._max_remembered:
            self._seen.popitem(last=False)
        return failures + 1, since

    def _remember(self, memory: OrderedDict[K, datetime], name: K, until: datetime) -> None:
        memory[name] = until
        memory.move_to_end(name)
        while len(memory) > self._max_remembered:
            memory.popitem(last=False)

    def _refusal(self, until: datetime, which: str) -> TooManyFailedChecks:
        wait = max(1, math.ceil((until - self._clock()).total_seconds()))
        return TooManyFailedChecks(
            f"too many failed key checks from this address {which} (at most "
            f"{FAILURES_PER_CREDENTIAL} with one key and {FAILURES_PER_CLIENT} in all, "
            f"in {WINDOW_SECONDS} s): try again in {wait} s",
            retry_after=wait,
        )


def _still(memory: OrderedDict[K, datetime], name: K, now: datetime) -> datetime | None:
    """Until when `name` is limited, if it still is (a passed entry is dropped)."""
    until = memory.get(name)
    if until is None:
        return None
    if until > now:
        return until
    del memory[name]
    return None
