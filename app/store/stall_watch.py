"""A timer that notices a stream stuck waiting, on either side of it.

Apart from the range reader (app.store.reader), which drives it, because
it is plain timing: it knows nothing of pieces, budgets or Telegram, only
who the stream is waiting for and since when.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StallWatch:
    """Notices a stream stuck for `seconds`: its client holding a block without
    asking for the next (`on_client`), or its client waiting for a byte that
    does not come (`on_source`). One timer per stall period, not per block."""

    def __init__(
        self, seconds: float, *, on_client: Callable[[], None], on_source: Callable[[], None]
    ) -> None:
        self._seconds = seconds
        self._on_client = on_client
        self._on_source = on_source
        self._loop = asyncio.get_running_loop()
        self._waiting_for: Callable[[], None] | None = None
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def waiting_for_client(self) -> None:
        self._wait(self._on_client)

    def waiting_for_source(self) -> None:
        self._wait(self._on_source)

    def running(self) -> None:
        self._waiting_for = None

    def stop(self) -> None:
        self._waiting_for = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wait(self, on_stall: Callable[[], None]) -> None:
        self._waiting_for = on_stall
        self._since = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_later(self._seconds, self._check)

    def _check(self) -> None:
        self._timer = None
        on_stall = self._waiting_for
        if on_stall is None:
            return
        left = self._since + self._seconds - self._loop.time()
        if left > 0:
            self._timer = self._loop.call_later(left, self._check)
            return
        self._waiting_for = None
        on_stall()
