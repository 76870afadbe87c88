"""One shutdown grace shared by the steps of a stop that wait on Telegram.

Once the server has drained (SHUTDOWN_DELAY_SECONDS, then
SHUTDOWN_GRACE_SECONDS + 5 for requests), the lifespan's stop flushes the
spool, ships the journal, takes a final snapshot and drains the dispatcher.
Each of them given the whole grace, a stop could take 5 + 35 + 4 x 30 s,
past the systemd unit's TimeoutStopSec=90: SIGKILL then falls anywhere, even
between a snapshot's record and its pin. Here they share ONE grace, each
taking at most its share of what is left, so the stop fits
delay + 2 x grace + 5 (deploy/teleuploader.service, tests/deploy/test_systemd.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

# The shares of the grace each step may take at most, in the order they
# run. What a step leaves goes to the next ones; the dispatcher's drain
# takes whatever is left, and at least DRAIN_RESERVE of the grace is kept
# for it (in-flight calls, the snapshot's pin among them).
FLUSH_SHARE = 0.3  # what is not sent stays spooled for the next start
JOURNAL_SHARE = 0.2
DRAIN_RESERVE = 0.2


class StopBudget:
    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = max(0.0, grace)
        self._clock = clock
        self._deadline: float | None = None

    def start(self) -> None:
        """The stop begins: the grace runs from now (once)."""
        if self._deadline is None:
            self._deadline = self._clock() + self.grace

    def left(self) -> float:
        self.start()
        assert self._deadline is not None
        return max(0.0, self._deadline - self._clock())

    def flush(self) -> float:
        return min(self.left(), FLUSH_SHARE * self.grace)

    def journal(self) -> float:
        return min(self.left(), JOURNAL_SHARE * self.grace)

    def snapshot(self) -> float:
        return max(0.0, self.left() - DRAIN_RESERVE * self.grace)

    def drain(self) -> float:
        return self.left()
