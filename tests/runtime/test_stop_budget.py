"""The steps of a stop that wait on Telegram (spool flush, final journal,
final snapshot, the dispatcher's drain) share one SHUTDOWN_GRACE_SECONDS,
so that the whole stop fits the systemd unit's TimeoutStopSec (each given
the whole grace, they took up to four of them: 5 + 35 + 120 s against 90)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from app.runtime import startup
from app.runtime.stop_budget import StopBudget


class RecordingBudget(StopBudget):
    """What each step was allowed, in order."""

    def __init__(self, grace: float) -> None:
        super().__init__(grace)
        self.given: list[tuple[str, float]] = []

    def _note(self, step: str, seconds: float) -> float:
        self.given.append((step, seconds))
        return seconds

    def flush(self) -> float:
        return self._note("flush", super().flush())

    def journal(self) -> float:
        return self._note("journal", super().journal())

    def snapshot(self) -> float:
        return self._note("snapshot", super().snapshot())

    def drain(self) -> float:
        return self._note("drain", super().drain())


async def hang(*_args: Any, **_kwargs: Any) -> Any:
    await asyncio.Event().wait()


async def take_all(grace: float) -> None:
    await asyncio.sleep(grace)


async def test_the_stop_steps_share_one_grace_when_each_would_take_all_of_it() -> None:
    grace = 0.5
    budget = RecordingBudget(grace)
    budget.start()
    # Each step as slow as it may be: sends that never end, a snapshot that
    # never pins, calls in flight to the last.
    flusher: Any = SimpleNamespace(stop=take_all)
    journal: Any = SimpleNamespace(ship=hang)
    snapshots: Any = SimpleNamespace(take=hang)
    dispatcher: Any = SimpleNamespace(stop=take_all)

    # In the order the stack runs them.
    await startup._stop_flusher(flusher, budget)
    await startup._final_journal(journal, budget)
    await startup._final_snapshot(snapshots, budget)
    await startup._drain_dispatcher(dispatcher, budget)

    assert [step for step, _ in budget.given] == ["flush", "journal", "snapshot", "drain"]
    assert sum(seconds for _, seconds in budget.given) <= grace
    # The flush cannot starve the journal: it has a share, not the whole grace.
    assert dict(budget.given)["flush"] < grace


def test_a_step_that_ends_early_leaves_its_time_to_the_next() -> None:
    now = [0.0]
    budget = StopBudget(30.0, clock=lambda: now[0])
    budget.start()
    assert budget.flush() == 9.0  # its share
    now[0] += 1.0  # the spool was nearly empty
    assert budget.journal() == 6.0
    now[0] += 6.0
    assert budget.snapshot() == 17.0  # what is left but the drain's reserve
    now[0] += 17.0
    assert budget.drain() == 6.0
    now[0] += 60.0
    assert budget.left() == 0.0
