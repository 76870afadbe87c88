"""The memory of failed sign-ins (app/http/api/sign_in_limits.py), on a clock the
test moves: the window, Retry-After, and the bound on what it remembers."""

from __future__ import annotations

from app.http.api.sign_in_limits import (
    SIGN_IN_FAILURES_ALLOWED,
    SIGN_IN_WINDOW_SECONDS,
    SignInLimits,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_limited_until_its_oldest_failure_leaves_the_window() -> None:
    clock = Clock()
    limits = SignInLimits(clock)
    for n in range(SIGN_IN_FAILURES_ALLOWED):
        assert limits.retry_after("203.0.113.7", f"tu_try{n}") == 0
        limits.failed("203.0.113.7", f"tu_try{n}")
        clock.now += 1
    assert limits.retry_after("203.0.113.7", "tu_right") == SIGN_IN_WINDOW_SECONDS - 10
    assert limits.retry_after("203.0.113.8", "tu_right") == 0
    clock.now += SIGN_IN_WINDOW_SECONDS - 10.5
    assert limits.retry_after("203.0.113.7", "tu_right") == 1  # rounded up
    clock.now += 0.5
    assert limits.retry_after("203.0.113.7", "tu_right") == 0
    # One failure more limits it again, until the next oldest leaves.
    limits.failed("203.0.113.7", "tu_again")
    assert limits.retry_after("203.0.113.7", "tu_right") == 1


def test_what_it_remembers_is_bounded_and_the_least_recent_goes_first() -> None:
    clock = Clock()
    limits = SignInLimits(clock, max_tracked=100)
    for _ in range(SIGN_IN_FAILURES_ALLOWED):
        limits.failed("198.51.100.1", "tu_AAAAAAAA")
    for n in range(10_000):
        limits.failed(f"2001:db8::{n:x}", f"tu_{n:05d}xyz")
    assert limits.tracked == 200  # 100 addresses and 100 prefixes
    assert limits.retry_after("198.51.100.1", "tu_AAAAAAAA") == 0  # forgotten
    assert limits.retry_after("2001:db8::270f", "tu_x") == 0  # one failure only
