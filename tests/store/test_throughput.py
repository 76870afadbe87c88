"""The status screen's memory of the counters: rates between samples, each
bot's recent sends, and a window that forgets what is older than it."""

from __future__ import annotations

import pytest

from app.store.throughput import BotTotals, Sample, ThroughputHistory


class Counters:
    """A hand-driven clock and counters, read as the service's would be."""

    def __init__(self) -> None:
        self.at = 1000.0
        self.uploaded = 0.0
        self.downloaded = 0.0
        self.sends = 0

    def read(self) -> Sample:
        return Sample(
            self.at, self.uploaded, self.downloaded, {7: BotTotals(self.sends, self.sends * 10)}
        )


def test_rates_are_bytes_per_second_between_samples_up_to_now() -> None:
    counters = Counters()
    history = ThroughputHistory(counters.read, interval=5, window=600)
    history.sample()
    counters.at += 5
    counters.uploaded += 500
    history.sample()
    counters.at += 2
    counters.downloaded += 100

    rates = history.rates()

    assert [(r.at, r.upload_bytes_per_second, r.download_bytes_per_second) for r in rates] == [
        (1005.0, 100.0, 0.0),
        (1007.0, 0.0, 50.0),
    ]


def test_the_window_forgets_older_samples_and_recent_sends_follow_it() -> None:
    counters = Counters()
    history = ThroughputHistory(counters.read, interval=5, window=20)
    for _ in range(10):
        history.sample()
        counters.at += 5
        counters.sends += 1

    seconds, recent = history.recent_bots()

    # 5 samples kept (20 s / 5 s + 1) and the one taken now.
    assert len(history.samples()) == 6
    assert seconds == pytest.approx(25.0)
    assert recent == {7: BotTotals(5, 50)}


def test_a_clock_that_goes_back_gives_no_rate() -> None:
    counters = Counters()
    history = ThroughputHistory(counters.read, interval=5, window=600)
    history.sample()
    counters.at -= 30
    counters.uploaded += 1000

    assert history.rates() == []
