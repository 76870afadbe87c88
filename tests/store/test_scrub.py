"""The scrub's background rounds (app/store/scrub.py) against the simulator:
what a round costs Telegram stays within SCRUB_READ_BYTES_PER_DAY, since a
getFile is a download on the server's side (telegram-bot-api Client.cpp,
do_get_file: the whole file is fetched before the answer)."""

from __future__ import annotations

from app.store.locator import ChunkLocator
from app.store.scrub import DAY, Scrub
from app.store.services import Services
from tests.running_service import CHUNK, Service, ServiceFactory, payload

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


def scrub_of(service: Service, bytes_per_day: float, clock: Clock | None = None) -> Scrub:
    """A scrub of the service's parts whose period makes every copy due
    each round, and whose budget is `bytes_per_day`."""
    services = services_of(service)
    return Scrub(
        services.dispatcher,
        services.sessionmaker,
        services.gc,
        ChunkLocator(services.dispatcher, services.gc),
        services.buffers,
        replicas=1,
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
