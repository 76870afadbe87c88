"""How often the web page's sign-in may fail: per client address, and per
key prefix (the start of the key tried), at most SIGN_IN_FAILURES_ALLOWED
failures in SIGN_IN_WINDOW_SECONDS. Past that, sign-ins from that address or
with that prefix are refused with 429 and Retry-After (the right key
included: a limited client learns nothing) until the oldest failure leaves the
window. Successful sign-ins are not counted.

The memory is bounded: at most MAX_TRACKED addresses and as many prefixes,
the least recently failing forgotten first, each with at most
SIGN_IN_FAILURES_ALLOWED times. It is per process: with several instances,
each counts its own.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final

SIGN_IN_FAILURES_ALLOWED: Final = 10
SIGN_IN_WINDOW_SECONDS: Final = 60
#: Addresses (and, apart, prefixes) remembered at once.
MAX_TRACKED: Final = 10_000
#: The characters of a tried key that count as its prefix ("tu_" and five more).
KEY_PREFIX_LENGTH: Final = 8


class _Failures:
    """Failure times per name, the least recently failing name first."""

    def __init__(self, clock: Callable[[], float], max_tracked: int) -> None:
        self._clock = clock
        self._max_tracked = max_tracked
        self._times: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._times)

    def wait(self, name: str) -> float:
        """Seconds until `name` may try again (0: now)."""
        times = self._times.get(name)
        if times is None or len(times) < SIGN_IN_FAILURES_ALLOWED:
            return 0.0
        return max(0.0, times[0] + SIGN_IN_WINDOW_SECONDS - self._clock())

    def add(self, name: str) -> None:
        now = self._clock()
        times = self._times.pop(name, None)
        if times is None:
            times = deque(maxlen=SIGN_IN_FAILURES_ALLOWED)
        while times and times[0] <= now - SIGN_IN_WINDOW_SECONDS:
            times.popleft()
        times.append(now)
        self._times[name] = times
        while len(self._times) > self._max_tracked:
            self._times.popitem(last=False)


class SignInLimits:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_tracked: int = MAX_TRACKED
    ) -> None:
        self._addresses = _Failures(clock, max_tracked)
        self._prefixes = _Failures(clock, max_tracked)

    @property
    def tracked(self) -> int:
        """Addresses and prefixes remembered (for tests of the bound)."""
        return len(self._addresses) + len(self._prefixes)

    def retry_after(self, address: str, key: str) -> int:
        """Whole seconds until a sign-in from `address` with `key` may be tried (0: now)."""
        wait = max(self._addresses.wait(address), self._prefixes.wait(_prefix(key)))
        return math.ceil(wait)

    def failed(self, address: str, key: str) -> None:
        self._addresses.add(address)
        self._prefixes.add(_prefix(key))


def _prefix(key: str) -> str:
    return key[:KEY_PREFIX_LENGTH]
