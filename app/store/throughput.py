"""A short memory of the service's own counters, for the web page's status
screen: every SAMPLE_SECONDS the process notes the bytes uploaded and
downloaded so far and each bot's sends, keeping the last WINDOW_SECONDS.

Rates are differences between samples, so the page can draw the last ten
minutes and say what each bot did lately without a Prometheus server.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.kit.periodic import Periodic

if TYPE_CHECKING:
    from app.store.metrics import Metrics
    from app.telegram.dispatcher import BotStatus

SAMPLE_SECONDS = 5.0
WINDOW_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class BotTotals:
    sends: int
    bytes_sent: int


@dataclass(frozen=True, slots=True)
class Sample:
    """Counter values at one moment (`at` in seconds since the epoch)."""

    at: float
    uploaded: float
    downloaded: float
    bots: dict[int, BotTotals] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rate:
    at: float
    upload_bytes_per_second: float
    download_bytes_per_second: float


class ThroughputHistory:
    def __init__(
        self,
        read: Callable[[], Sample],
        *,
        interval: float = SAMPLE_SECONDS,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self._read = read
        self.interval = interval
        self._samples: deque[Sample] = deque(maxlen=int(window / interval) + 1)
        self.loop = Periodic("throughput_sample", self._sample_round, interval=interval)

    def start(self) -> None:
        self.sample()
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    def sample(self) -> None:
        """Note the counters now (the oldest sample goes once the window is full)."""
        self._samples.append(self._read())

    async def _sample_round(self) -> None:
        self.sample()

    def samples(self) -> list[Sample]:
        """The stored samples, oldest first, and one taken now."""
        return [*self._samples, self._read()]

    def rates(self) -> list[Rate]:
        """Bytes per second between consecutive samples, ending now."""
        samples = self.samples()
        rates = []
        for before, after in itertools.pairwise(samples):
            seconds = after.at - before.at
            if seconds <= 0:
                continue
            rates.append(
                Rate(
                    at=after.at,
                    upload_bytes_per_second=(after.uploaded - before.uploaded) / seconds,
                    download_bytes_per_second=(after.downloaded - before.downloaded) / seconds,
                )
            )
        return rates

    def recent_bots(self) -> tuple[float, dict[int, BotTotals]]:
        """Each bot's sends and bytes over the window (and its length in seconds)."""
        samples = self.samples()
        first, last = samples[0], samples[-1]
        recent = {}
        for bot_id, now in last.bots.items():
            then = first.bots.get(bot_id, BotTotals(0, 0))
            recent[bot_id] = BotTotals(now.sends - then.sends, now.bytes_sent - then.bytes_sent)
        return last.at - first.at, recent


def sampler(metrics: Metrics, bots: Callable[[], list[BotStatus]]) -> Callable[[], Sample]:
    """Reads a Sample from the service's metrics and its dispatcher."""

    def read() -> Sample:
        uploaded, downloaded = metrics.byte_totals()
        return Sample(
            at=time.time(),
            uploaded=uploaded,
            downloaded=downloaded,
            bots={status.bot_id: BotTotals(status.sends, status.bytes_sent) for status in bots()},
        )

    return read
