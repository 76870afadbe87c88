"""Starting and stopping the service's parts (app/runtime/startup.py): a start that
fails part-way stops what it had started, and a clean start then stop leaves
nothing running either."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from app.db.models import BotLease, Instance
from app.db.types import utcnow
from app.runtime.startup import start_services
from app.store.leases import BotLeases
from app.store.resumable import ResumableStore
from app.telegram.probe import BotProber
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from tests.db.helpers import Database
from tests.running_service import CHAT_ID, make_settings

# Postgres too: instance rows and leases at start and stop (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends


class Refused(Exception):
    pass


@pytest.fixture
async def telegram_url() -> AsyncIterator[tuple[str, list[str]]]:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID]))
    async with run_simulator(sim) as url:
        yield url, sim.tokens


@pytest.fixture
def spool_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="teleuploader-spool-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def others() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def rows(engine: AsyncEngine) -> tuple[int, int]:
    """(instance rows, leases not given up or expired)."""
    async with async_sessionmaker(engine)() as session:
        instances = await session.scalar(select(func.count()).select_from(Instance))
        held = await session.scalar(
            select(func.count()).select_from(BotLease).where(BotLease.expires_at > utcnow())
        )
    return int(instances or 0), int(held or 0)


@pytest.mark.parametrize(
    "failing",
    [
        # After the instance registered and before it holds a lease.
        (BotLeases, "round"),
        # With the leases held, the GC and the dispatcher running.
        (BotProber, "start"),
        # The last step: every other part runs.
        (ResumableStore, "start"),
    ],
    ids=lambda failing: f"{failing[0].__name__}.{failing[1]}",
)
async def test_a_start_that_fails_part_way_stops_everything_it_started(
    failing: tuple[type, str],
    database: Database,
    engine: AsyncEngine,
    telegram_url: tuple[str, list[str]],
    spool_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, tokens = telegram_url
    settings = make_settings(database, url, tokens, spool_dir=spool_dir)
    owner, method = failing
    reached = False

    def refuse(*args: object, **kwargs: object) -> None:
        nonlocal reached
        reached = True
        raise Refused(f"{owner.__name__}.{method} failed on purpose")

    monkeypatch.setattr(owner, method, refuse)
    before = others()
    with pytest.raises(Refused):
        await start_services(settings)
    assert reached
    # No loop, worker or probe of the failed start is left running...
    left = {task.get_name() for task in others() - before if not task.done()}
    assert left == set()
    # ...and it left no instance row or lease to wait out: another
    # instance (or the next start) need not wait for them to go stale.
    assert await rows(engine) == (0, 0)


async def test_a_clean_start_and_stop_leaves_nothing_running(
    database: Database,
    engine: AsyncEngine,
    telegram_url: tuple[str, list[str]],
    spool_dir: str,
) -> None:
    url, tokens = telegram_url
    settings = make_settings(database, url, tokens, spool_dir=spool_dir)
    before = others()
    services = await start_services(settings)
    await asyncio.wait_for(services.wait_ready(), 20)
    assert await rows(engine) == (1, 2)
    started = {task.get_name() for task in others() - before}
    assert {"gc", "instance_heartbeat", "bot_lease", "tus_cleanup"} <= started
    await services.close()
    left = {task.get_name() for task in others() - before if not task.done()}
    assert left == set()
    assert await rows(engine) == (0, 0)
