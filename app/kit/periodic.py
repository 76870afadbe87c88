"""One way to run work every so often: the service's background loops.

The GC, the instance heartbeat, the lease rounds, the shared-path answers,
the tus clean-up, the bots' re-checks, the throughput samples (and the scrub)
each run a round, wait, and run again. `Periodic` is that loop, written
once, so that each of them behaves alike:

* a round that raises is logged (``<name>_round_failed``, with the error)
  and counted; the loop goes on, since the usual cause (the database or
  Telegram away for a while) heals by itself;
* the wait is `interval` seconds, spread by `jitter` (a fraction) so that
  several instances do not run their rounds in step, or what the round
  returned, when it knows better (0: again at once);
* `wake()` ends the wait early, for work that arrives between rounds;
* `stop()` cancels the round in progress and waits for it: after it, the
  loop runs nothing.

Each round's outcome and length go to `on_round`, which the service points
at its metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from app.kit import jitter

log = structlog.get_logger("app.periodic")

#: What a round may return: seconds until the next one, or None for `interval`.
Round = Callable[[], Awaitable[float | None]]
#: (loop name, "ok" or "failed", seconds the round took)
RoundObserver = Callable[[str, str, float], None]


class Periodic:
    def __init__(
        self,
        name: str,
        body: Round,
        *,
        interval: float | Callable[[], float],
        jitter: float = 0.0,
        run_at_start: bool = False,
        on_round: RoundObserver | None = None,
    ) -> None:
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter is a fraction of the interval in [0, 1), not {jitter}")
        self.name = name
        self._body = body
        self._interval = interval
        self._jitter = jitter
        self._run_at_start = run_at_start
        self.on_round = on_round
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.failures = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self.name)

    def wake(self) -> None:
        """Run the next round now (or right after the one in progress)."""
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def next_wait(self) -> float:
        interval = self._interval() if callable(self._interval) else self._interval
        if self._jitter:
            interval *= jitter.uniform(1.0 - self._jitter, 1.0 + self._jitter)
        return max(0.0, interval)

    async def _loop(self) -> None:
        wait = 0.0 if self._run_at_start else self.next_wait()
        while True:
            await self._sleep(wait)
            asked = await self.run_once()
            wait = self.next_wait() if asked is None else max(0.0, asked)

    async def run_once(self) -> float | None:
        """One round, now; its failure is logged and counted, not raised."""
        self._wake.clear()
        started = time.monotonic()
        outcome = "ok"
        asked: float | None = None
        try:
            asked = await self._body()
        except Exception as exc:
            outcome = "failed"
            self.failures += 1
            log.warning(f"{self.name}_round_failed", error=str(exc) or type(exc).__name__)
        self.rounds += 1
        if self.on_round is not None:
            self.on_round(self.name, outcome, time.monotonic() - started)
        return asked

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0 or self._wake.is_set():
            # Still one turn of the event loop: a round that awaits nothing
            # must not starve everything else.
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()
