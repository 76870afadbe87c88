"""The simulated Telegram as tests and the HTTP layer drive it.

`TelegramSimulator` is Telegram's rules (`TelegramRules`, in `rules`) plus
hooks for tests and benchmarks and the bookkeeping the HTTP layer does around
each call (`CallBookkeeping`, in `bookkeeping`: in-flight accounting, waiters,
fault draws). The hooks here change its settings, fault rates, holds and
clock, and wait for calls; the damage tests do on Telegram's side is in
`damage`, and what they read of it in `inspection`. Synchronous, so that
every check-and-update is atomic on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog

from app.telegram.simulator.config import MUTABLE_KNOBS, SimulatorConfig
from app.telegram.simulator.damage import SimulatedDamage
from app.telegram.simulator.methods import _canonical_method

log = structlog.get_logger("app.telegram.simulator.state")


# --- the simulator ------------------------------------------------------------------


class TelegramSimulator(SimulatedDamage):
    """The simulated Telegram: its rules, plus hooks for tests."""

    def __init__(self, config: SimulatorConfig) -> None:
        super().__init__(config)
        # Its own generator, so that damage done by tests does not shift the
        # seeded sequence of random faults.
        self._damage_rng = random.Random(config.seed)

    # --- hooks for tests and benchmarks ----------------------------------------------

    @property
    def tokens(self) -> list[str]:
        return [bot.token for bot in self._bots.values()]

    @property
    def bot_ids(self) -> list[int]:
        return list(self._bots)

    @property
    def chat_ids(self) -> list[int]:
        return list(self._chats)

    def configure(self, **changes: Any) -> None:
        """Change knobs while running; the new config is validated as a whole."""
        unknown = set(changes) - MUTABLE_KNOBS
        if unknown:
            raise ValueError(f"not a changeable setting: {', '.join(sorted(unknown))}")
        updated = dataclasses.replace(self.config, **changes)  # runs validate()
        for name in changes:
            setattr(self.config, name, getattr(updated, name))
        if "seed" in changes:
            self._rng.seed(self.config.seed)
            self._damage_rng.seed(self.config.seed)

    def set_faults(
        self,
        *,
        fault_5xx_rate: float | None = None,
        fault_drop_rate: float | None = None,
        fault_429_rate: float | None = None,
        fault_download_drop_rate: float | None = None,
        seed: int | None = None,
    ) -> None:
        """Set the random fault rates; arguments left out keep their value."""
        changes = {
            "fault_5xx_rate": fault_5xx_rate,
            "fault_drop_rate": fault_drop_rate,
            "fault_download_drop_rate": fault_download_drop_rate,
            "fault_429_rate": fault_429_rate,
            "seed": seed,
        }
        self.configure(**{name: value for name, value in changes.items() if value is not None})

    def set_method_faults(
        self,
        method: str,
        *,
        fault_5xx_rate: float | None = None,
        fault_429_rate: float | None = None,
        fault_drop_rate: float | None = None,
    ) -> None:
        """Give one Bot API method fault rates of its own (the others keep the
        global ones); arguments left out keep the method's current value."""
        method = _canonical_method(method)
        rates = {method: dict(kinds) for method, kinds in self.config.method_fault_rates.items()}
        changes = {
            "fault_5xx_rate": fault_5xx_rate,
            "fault_429_rate": fault_429_rate,
            "fault_drop_rate": fault_drop_rate,
        }
        rates.setdefault(method, {}).update(
            {kind: rate for kind, rate in changes.items() if rate is not None}
        )
        self.configure(method_fault_rates=rates)

    def fault_rate(self, method: str | None, kind: str) -> float:
        """The rate of one kind of fault (a SimulatorConfig field name) for a
        method; `None` (file downloads) has the global rates only."""
        rates = self.config.method_fault_rates.get(method or "", {})
        rate: float = rates.get(kind, getattr(self.config, kind))
        return rate

    def hold(self, method: str) -> None:
        """Calls of `method` from now on wait, their body read and every check
        passed, just before Telegram would do the work, until `release(method)`."""
        self._holds.setdefault(_canonical_method(method), asyncio.Event())

    def release(self, method: str) -> None:
        """Let the held calls of `method` go on, and stop holding new ones."""
        gate = self._holds.pop(_canonical_method(method), None)
        if gate is not None:
            gate.set()

    @contextlib.contextmanager
    def holding(self, method: str) -> Iterator[None]:
        """`hold(method)` for the `with` block, then `release(method)`, also
        when the block fails: a test whose check failed leaves no call
        waiting for a release that never comes."""
        self.hold(method)
        try:
            yield
        finally:
            self.release(method)

    def held_calls(self, method: str) -> int:
        """How many calls of `method` are waiting at its hold right now."""
        return self._held.get(_canonical_method(method), 0)

    async def wait_held(self, method: str, calls: int = 1) -> None:
        """Wait until at least `calls` calls of `method` wait at its hold.
        Bound it with `asyncio.timeout`."""
        method = _canonical_method(method)
        if self.held_calls(method) >= calls:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._held_waiters.append((method, calls, waiter))
        await waiter

    def local_files(self) -> list[Path]:
        """Every file a `--local` server keeps on its disk now, where it is
        on this machine (getFile wrote them)."""
        return self._local.files() if self._local is not None else []

    def clean_local_storage(self) -> int:
        """A `--local` server's storage clean-up: the files its getFiles
        downloaded are removed (td's storage manager keeps one at least an
        hour, then may; td StorageManager.h, files/FileGcParameters.cpp), and
        the paths given for them lead nowhere. Returns how many went."""
        removed = self.local_files()
        for path in removed:
            path.unlink()
        return len(removed)

    def advance_clock(self, seconds: float) -> None:
        """Move the simulated time forward (message ages, path expiry, send windows)."""
        self._clock_offset += seconds

    async def wait_until_idle(self) -> None:
        """Wait until no call or download is in flight, e.g. after a client gave
        up mid-call (the server notices only at its next read). Bound it with
        `asyncio.timeout`."""
        if not self._busy():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        await waiter

    async def wait_for_call(self, bot_id: int) -> None:
        """Wait until a method call on `bot_id` is in flight (now or later), so
        a test can act while Telegram is busy with it. Bound it with
        `asyncio.timeout`."""
        if self._bots[bot_id].calls_in_flight:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._call_waiters.append((bot_id, waiter))
        await waiter
