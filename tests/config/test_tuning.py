"""Tuning: the timers tests and benchmarks shorten refuse values outside
their range, with a message naming the knob."""

from __future__ import annotations

import pytest

from app.config.tuning import ABANDONED_CALL_HOLD_SECONDS, Tuning


def test_the_abandoned_call_hold_is_telegrams_minute_by_default() -> None:
    assert Tuning().abandoned_call_hold_seconds == ABANDONED_CALL_HOLD_SECONDS == 60.0


@pytest.mark.parametrize("seconds", [-1.0, 600.5])
def test_an_abandoned_call_hold_outside_0_to_600_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="abandoned_call_hold_seconds is 0-600"):
        Tuning(abandoned_call_hold_seconds=seconds)


@pytest.mark.parametrize("seconds", [0.0, 5.0, 600.0])
def test_an_abandoned_call_hold_within_0_to_600_is_taken(seconds: float) -> None:
    assert Tuning(abandoned_call_hold_seconds=seconds).abandoned_call_hold_seconds == seconds
