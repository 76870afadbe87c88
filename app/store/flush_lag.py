"""How far the spool's flush to Telegram lags: the bytes acknowledged and
not yet in Telegram, and the age of the oldest of them.

Until the flush, those bytes (and the objects completed from them) live on
this machine's disk only (deploy/README.md, "The spool window"). /metrics
shows both numbers (refreshed every LAG_INTERVAL: a scrape cannot await the
database), as do the status screen and `teleuploader check`; /ready says
`degraded` once the oldest byte has waited FLUSH_LAG_ALERT seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.pending import PendingRepository
from app.db.session import session_scope
from app.db.types import utcnow
from app.kit.periodic import Periodic

#: Seconds between two measures for /metrics.
LAG_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class FlushLag:
    #: Bytes spooled and not yet in Telegram.
    unflushed_bytes: int
    #: Seconds since the oldest of them was spooled (0 when there is none).
    oldest_seconds: float


async def measure_lag(
    sessionmaker: async_sessionmaker[AsyncSession], owner: str | None = None
) -> FlushLag:
    """The lag of `owner`'s spool (None: of every instance's)."""
    async with session_scope(sessionmaker) as session:
        size, oldest = await PendingRepository(session).lag(owner)
    return FlushLag(size, _age(oldest))


def _age(oldest: datetime | None) -> float:
    if oldest is None:
        return 0.0
    return max(0.0, (utcnow() - oldest).total_seconds())


class FlushLagWatch:
    """This instance's lag, measured now (`measure`) or from the last
    measure (`current`, what /metrics reads: the age counts on between
    measures), and whether it is past the alert."""

    def __init__(
        self, sessionmaker: async_sessionmaker[AsyncSession], *, owner: str, alert: float
    ) -> None:
        self._sessionmaker = sessionmaker
        self._owner = owner
        self.alert = alert
        self._size = 0
        self._oldest: datetime | None = None
        self.loop = Periodic("flush_lag", self._round, interval=LAG_INTERVAL, run_at_start=True)

    async def measure(self) -> FlushLag:
        async with session_scope(self._sessionmaker) as session:
            self._size, self._oldest = await PendingRepository(session).lag(self._owner)
        return self.current()

    def current(self) -> FlushLag:
        return FlushLag(self._size, _age(self._oldest))

    def degraded_reason(self, lag: FlushLag) -> str | None:
        """Why /ready says degraded, or None."""
        if lag.oldest_seconds <= self.alert:
            return None
        return (
            f"spooled bytes have waited {lag.oldest_seconds:.0f} s for Telegram "
            f"(FLUSH_LAG_ALERT {self.alert:g} s): {lag.unflushed_bytes} bytes live on "
            "this machine's disk only"
        )

    async def _round(self) -> float | None:
        await self.measure()
        return None
