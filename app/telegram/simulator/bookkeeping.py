"""The bookkeeping the simulator's HTTP layer (`http`) does around each call.

`CallBookkeeping` sits between Telegram's rules (`TelegramRules`, in
`rules`) and the test hooks (`TelegramSimulator`, in `state`): it counts
calls and downloads in flight, wakes whoever waits on them, holds calls a
test asked to hold, keeps each connection droppable by `kill`, and draws
the random faults. Apart from both because it is neither a rule of
Telegram's nor a hook: it is what serving the rules over HTTP needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator

from app.telegram.simulator.config import SMALL_METHODS, SimulatorConfig
from app.telegram.simulator.model import OVERLAPS_KEPT, ApiError, _Call
from app.telegram.simulator.rules import TelegramRules


class CallBookkeeping(TelegramRules):
    """Telegram's rules plus the in-flight accounting, waiters, holds and
    fault draws of the HTTP layer."""

    def __init__(self, config: SimulatorConfig) -> None:
        super().__init__(config)
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._call_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._holds: dict[str, asyncio.Event] = {}  # method -> released when set
        self._held: dict[str, int] = {}  # method -> calls waiting at its hold now
        self._held_waiters: list[tuple[str, int, asyncio.Future[None]]] = []
        self._connections: dict[int, Callable[[], None]] = {}  # in flight, for `kill`
        self._connection_ids = itertools.count()

    @contextlib.contextmanager
    def _connection(self, abort: Callable[[], None] | None) -> Iterator[None]:
        """Make a request's connection droppable by `kill` while it runs."""
        if abort is None:
            yield
            return
        key = next(self._connection_ids)
        self._connections[key] = abort
        try:
            yield
        finally:
            self._connections.pop(key, None)

    def _bot_for_token(self, token: str) -> int | None:
        """The bot a token belongs to, revoked or not; None for an unknown token."""
        return self._bot_by_token.get(token)

    def _check_token(self, bot_id: int) -> None:
        if self._bots[bot_id].revoked:
            raise ApiError(401, "Unauthorized")

    @contextlib.contextmanager
    def _calling(self, bot_id: int, method: str) -> Iterator[_Call]:
        """Account for one method call from its first byte to its last."""
        bot = self._bots[bot_id]
        stats = bot.stats
        stats.calls[method] = stats.calls.get(method, 0) + 1
        call = _Call(bot_id, method, arrived=time.monotonic())
        # Decided when the call arrives, before its body is read: that is when
        # Telegram sees two calls on one token. Small calls and the others
        # are counted apart (config.max_concurrent_calls_per_bot), and a call
        # whose client has given up but whose work is still running counts.
        small = method in SMALL_METHODS
        alike = (
            bot.small_calls_in_flight if small else bot.calls_in_flight - bot.small_calls_in_flight
        )
        limit = self.config.max_concurrent_calls_per_bot
        call.collided = limit is not None and alike >= limit
        if bot.running and len(stats.overlaps) < OVERLAPS_KEPT:
            others = ", ".join(other.method for other in bot.running)
            into = call.arrived - bot.running[0].arrived
            stats.overlaps.append(f"{method} during {others} ({into:.3f} s into it)")
        bot.running.append(call)
        bot.calls_in_flight += 1
        stats.max_concurrent_calls = max(stats.max_concurrent_calls, bot.calls_in_flight)
        if small:
            bot.small_calls_in_flight += 1
        small_calls = bot.small_calls_in_flight
        stats.max_concurrent_small_calls = max(stats.max_concurrent_small_calls, small_calls)
        stats.max_concurrent_posting_calls = max(
            stats.max_concurrent_posting_calls, bot.calls_in_flight - small_calls
        )
        self._wake_call_waiters(bot_id)
        uploading = method == "sendDocument"
        if uploading:
            bot.uploads_in_flight += 1
            stats.max_concurrent_uploads = max(stats.max_concurrent_uploads, bot.uploads_in_flight)
        try:
            yield call
        finally:
            bot.running.remove(call)
            bot.calls_in_flight -= 1
            if small:
                bot.small_calls_in_flight -= 1
            if uploading:
                bot.uploads_in_flight -= 1
            self._wake_if_idle()

    @contextlib.contextmanager
    def _downloading(self, bot_id: int) -> Iterator[None]:
        bot = self._bots[bot_id]
        bot.stats.downloads += 1
        bot.downloads_in_flight += 1
        bot.stats.max_concurrent_downloads = max(
            bot.stats.max_concurrent_downloads, bot.downloads_in_flight
        )
        try:
            yield
        finally:
            bot.downloads_in_flight -= 1
            self._wake_if_idle()

    def _wake_call_waiters(self, bot_id: int) -> None:
        waiting = []
        for waited_bot, waiter in self._call_waiters:
            if waited_bot != bot_id:
                waiting.append((waited_bot, waiter))
            elif not waiter.done():
                waiter.set_result(None)
        self._call_waiters = waiting

    def _busy(self) -> bool:
        return any(bot.calls_in_flight or bot.downloads_in_flight for bot in self._bots.values())

    def _wake_if_idle(self) -> None:
        if self._busy():
            return
        for waiter in self._idle_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._idle_waiters.clear()

    async def _wait_if_held(self, method: str) -> None:
        gate = self._holds.get(method)
        if gate is None:
            return
        self._held[method] = self._held.get(method, 0) + 1
        for waiting in list(self._held_waiters):
            name, calls, waiter = waiting
            if name == method and self._held[method] >= calls:
                self._held_waiters.remove(waiting)
                if not waiter.done():
                    waiter.set_result(None)
        try:
            await gate.wait()
        finally:
            self._held[method] -= 1

    def _count_received(self, bot_id: int, size: int) -> None:
        self._bots[bot_id].stats.bytes_received += size

    def _count_sent(self, bot_id: int, size: int) -> None:
        self._bots[bot_id].stats.bytes_sent += size

    def _count_spacing(self, bot_id: int, wait: float) -> None:
        stats = self._bots[bot_id].stats
        stats.spaced_uploads += 1
        stats.spacing_wait_seconds += wait

    def _count_error(self, bot_id: int, status: int) -> None:
        stats = self._bots[bot_id].stats
        stats.errors[status] = stats.errors.get(status, 0) + 1
        if status == 429:
            stats.rate_limited += 1

    def _inject(self, bot_id: int, rate: float) -> bool:
        """Whether a fault with this probability strikes now (and count it if so)."""
        # Rate 0 draws nothing, so one knob does not shift another's seeded sequence.
        if rate <= 0.0 or self._rng.random() >= rate:
            return False
        self._bots[bot_id].stats.faults_injected += 1
        return True

    def _coin(self) -> bool:
        return self._rng.random() < 0.5
