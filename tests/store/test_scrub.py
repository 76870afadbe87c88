"""The scrub's background rounds (app/store/scrub.py) against the simulator:
what a round costs Telegram stays within SCRUB_READ_BYTES_PER_DAY, since a
getFile is a download on the server's side (telegram-bot-api Client.cpp,
do_get_file: the whole file is fetched before the answer)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import select, update

from app.cli.main import main
from app.db.copies import CopyRepository
from app.db.models import Chunk, ChunkCopy
from app.db.session import session_scope
from app.sealing import CUSTOMER_KEY_ID
from app.store.locator import ChunkLocator
from app.store.scrub import DAY, Scrub
from app.store.services import Services
from app.telegram.dispatcher import Dispatcher
from tests.running_service import CHUNK, TEST_TUNING, Service, ServiceFactory, payload

COPIES = 6
ROUND = 60.0


def services_of(service: Service) -> Services:
    services: Services = service.app.state.services
    return services


class Clock:
    """The scrub's clock, moved a round at a time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scrub_of(
    service: Service, bytes_per_day: float, clock: Clock | None = None, *, replicas: int = 1
) -> Scrub:
    """A scrub of the service's parts whose period makes every copy due
    each round, and whose budget is `bytes_per_day`."""
    services = services_of(service)
    return Scrub(
        services.dispatcher,
        services.sessionmaker,
        services.gc,
        # The tests' pause between getFile retries, as the service's own locator.
        ChunkLocator(services.dispatcher, services.gc, retry_pause=TEST_TUNING.read_retry_seconds),
        services.buffers,
        replicas=replicas,
        period=ROUND,
        read_bytes_per_day=int(bytes_per_day),
        round_seconds=ROUND,
        clock=clock or Clock(),
    )


def getfiles(service: Service) -> int:
    return sum(stats.calls.get("getFile", 0) for stats in service.sim.stats().values())


async def test_a_round_has_telegram_fetch_no_more_than_its_share_of_the_days_bytes(
    start_service: ServiceFactory,
) -> None:
    """Before, past the budget of whole reads every due copy still got a
    getFile (a 'shallow' check): as much of a download for the server."""
    service = await start_service()
    async with service.client() as http:
        data = payload(COPIES * CHUNK, seed=8)
        stored = await http.put("/api/files/six.bin", content=data, headers=service.auth)
        assert stored.status_code == 201
    per_round = 2.5 * CHUNK  # two copies and a half a round
    clock = Clock()
    scrub = scrub_of(service, per_round * DAY / ROUND, clock)
    service.sim.reset_stats()

    await scrub.loop.run_once()
    first = getfiles(service)
    await scrub.loop.run_once()  # woken at once: nothing more to spend
    woken = getfiles(service) - first
    clock.now += ROUND
    await scrub.loop.run_once()
    second = getfiles(service) - first - woken

    # Three copies the first round (the third overdraws the share), none
    # in a round woken early, then two: the overdraft is paid back.
    assert (first, woken, second) == (3, 0, 2)
    assert scrub.loop.failures == 0


async def test_a_scrub_with_no_bytes_a_day_asks_telegram_nothing(
    start_service: ServiceFactory,
) -> None:
    service = await start_service()
    async with service.client() as http:
        stored = await http.put(
            "/api/files/six.bin", content=payload(COPIES * CHUNK), headers=service.auth
        )
        assert stored.status_code == 201
    scrub = scrub_of(service, 0)
    service.sim.reset_stats()

    await scrub.loop.run_once()

    assert getfiles(service) == 0


class HeldElsewhere:
    """The service's dispatcher as an instance sees it whose fleet holds
    `bots` elsewhere (their calls are another instance's to make)."""

    def __init__(self, dispatcher: Dispatcher, bots: set[int]) -> None:
        self._dispatcher = dispatcher
        self.held_elsewhere = frozenset(bots)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dispatcher, name)


async def test_scrub_wait_says_what_other_instances_hold_and_exits_non_zero(
    start_service: ServiceFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A full pass checks the copies of the bots this instance holds only:
    with several instances, `scrub --wait` exited 0 having checked a part."""
    service = await start_service(bots=2)
    for n in range(4):
        async with service.client() as http:
            answer = await http.put(
                f"/api/files/f{n}.bin", content=payload(CHUNK + n, seed=n), headers=service.auth
            )
        assert answer.status_code == 201, answer.text
    services = services_of(service)
    async with session_scope(services.sessionmaker) as session:
        bots = list(await session.scalars(select(ChunkCopy.bot_id)))
    elsewhere = bots[0]
    assert 0 < bots.count(elsewhere) < len(bots)
    monkeypatch.setattr(
        services.scrub, "_dispatcher", HeldElsewhere(services.dispatcher, {elsewhere})
    )
    capsys.readouterr()

    argv = ["scrub", "--wait", "--json", "--shallow", "--url", service.url, "--key", service.key]
    code = await asyncio.to_thread(main, argv)

    out, err = capsys.readouterr()
    report = json.loads(out.splitlines()[-1])
    assert code == 3, err
    assert report["skipped"] == bots.count(elsewhere)
    assert report["checked"] == len(bots) - bots.count(elsewhere)
    assert "were not checked: other instances hold their bots" in err


# Postgres too: the repairs' cursor and what the query leaves out.
@pytest.mark.both_backends
async def test_chunks_a_repair_cannot_read_hold_back_no_other_repair(
    start_service: ServiceFactory,
) -> None:
    """REPLICAS raised to 2 with 21 chunks or more first in the repairs'
    order that this instance cannot repair: 3 lost, the others under a
    customer key (SSE-C) or a master key not configured. Before, every round took the same 20
    of them, fewest copies first, and the chunk after them was never
    repaired; the lost ones were asked about again every round."""
    service = await start_service()
    async with service.client() as http:
        answer = await http.put(
            "/api/files/long.bin", content=payload(22 * CHUNK), headers=service.auth
        )
        assert answer.status_code == 201, answer.text
    services = services_of(service)
    async with session_scope(services.sessionmaker) as session:
        stored = list(await session.scalars(select(ChunkCopy).order_by(ChunkCopy.chunk_id)))
    assert len(stored) >= 22  # cut in equal chunks, a few more maybe
    *unrepairable, repairable = [copy.chunk_id for copy in stored]
    # A transaction of its own, whose first statement takes SQLite's write
    # lock (one that read first could find the service wrote since).
    async with session_scope(services.sessionmaker) as session:
        for copy in stored[:3]:
            service.sim.take_down(copy.chat_id, copy.message_id)
            await CopyRepository(session).mark_bad(copy.id, "missing")
        sealed = unrepairable[3:]
        for n, chunk_id in enumerate(sealed):
            key_id = CUSTOMER_KEY_ID if n % 2 else "gone"
            await session.execute(
                update(Chunk).where(Chunk.id == chunk_id).values(seal_key_id=key_id)
            )
    scrub = scrub_of(service, 0, replicas=2)

    await scrub.loop.run_once()
    asked = getfiles(service)
    await scrub.loop.run_once()  # the lost ones were found unreadable: not asked again

    async with session_scope(services.sessionmaker) as session:
        rows = await session.execute(select(Chunk.id, Chunk.copies_ok))
        copies_ok = {chunk_id: count for chunk_id, count in rows}
    assert copies_ok[repairable] == 2
    assert [copies_ok[chunk_id] for chunk_id in unrepairable] == [0] * 3 + [1] * len(sealed)
    assert getfiles(service) == asked
    assert scrub.loop.failures == 0
