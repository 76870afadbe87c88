"""Random spread for the waits between retries and pauses, so that bots and
instances that failed together do not retry in step.

Drawn from a generator of its own: the module-level functions of `random`
share one global state, which belongs to whoever seeds it (a property-based
test drawing its cases in another thread, say) and which our waits must
neither disturb nor depend on.
"""

from __future__ import annotations

import random

_RNG = random.Random()


def uniform(low: float, high: float) -> float:
    """A number between `low` and `high`, as `random.uniform`."""
    return _RNG.uniform(low, high)
