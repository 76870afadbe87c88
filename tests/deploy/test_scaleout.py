"""Several real `teleuploader serve` processes on one Postgres (through
pgbouncer, transaction mode) and one Telegram simulator with six bots
(issue 12): bots are leased, never used by two instances at once, taken over
when an instance dies by kill -9, and a file uploaded through one instance
downloads through any other.

The simulator is this module's own (six bots, one call per lane and token
enforced); at the end of each test no token may have had two calls of one
lane in flight at once (one upload-lane call, one small call beside it).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update

from app.cli.demo import create_api_key
from app.db.engine import create_engine
from app.db.models import BotLease, Chunk, GcEntry, Instance, SharedFilePath
from app.store.leases import NO_COOLDOWN
from tests.conftest import empty_tables, run_async
from tests.db.helpers import Database
from tests.deploy.conftest import (
    REPO,
    START_TIMEOUT,
    Processes,
    Service,
    Simulator,
    _healthy,
    base_env,
    caddy_env,
    check_one_call_per_lane,
    configure_sim,
    free_port,
    metrics,
    serve_command,
    sim_process,
    sim_stats,
    wait_for,
)
from tests.running_service import assert_one_call_per_lane, payload

pytestmark = [pytest.mark.postgres, pytest.mark.postgres_only]

BOTS = 6
CHAT = -1002
CHUNK = 256 * 1024
LEASE = 4  # Tuning.bot_lease_seconds: short, so takeover is quick to watch
# Tuning.heartbeat_seconds: a dead instance's uploads are swept every 12 beats.
HEARTBEAT = 1.0


@pytest.fixture(scope="module")
def six_bots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    with sim_process(tmp_path_factory.mktemp("telegram-sim-6"), BOTS, CHAT) as sim:
        yield sim


@pytest.fixture
def sim(six_bots: Simulator, processes: Processes) -> Iterator[Simulator]:
    configure_sim(six_bots, max_getfile_bytes=CHUNK, latency=0.0, upload_bandwidth=None)
    httpx.post(f"{six_bots.url}/_sim/reset-stats", timeout=10).raise_for_status()
    yield six_bots
    processes.stop_all()
    httpx.post(f"{six_bots.url}/_sim/release/sendDocument", timeout=10).raise_for_status()
    configure_sim(six_bots, latency=0.0)
    check_one_call_per_lane(six_bots.url)


@pytest.fixture
def database(postgres_database: Database) -> Database:
    empty_tables(postgres_database)
    return postgres_database


Starter = Callable[..., Service]


@pytest.fixture
def start(sim: Simulator, database: Database, processes: Processes, tmp_path: Path) -> Starter:
    key = run_async(lambda: create_api_key(database.url, name="scaleout"))

    def start_one(
        port: int | None = None, *, wait: bool = True, env: dict[str, str] | None = None
    ) -> Service:
        """An instance on `port`; `wait`: return once it answers /ready."""
        port = port or free_port()
        settings = base_env(
            tmp_path,
            BOT_TOKENS=",".join(sim.tokens),
            STORAGE_CHAT_ID=str(sim.chat_id),
            TELEGRAM_API_BASE=sim.url,
            DATABASE_URL=database.url,
            HOST="127.0.0.1",
            PORT=str(port),
            SENDS_PER_MINUTE="0",
            SHUTDOWN_GRACE_SECONDS="5",
            LOG_FORMAT="json",
            CHUNK_SIZE=str(CHUNK),
            SPOOL_DIR=str(tmp_path / f"spool-{port}"),
            PYTHONPATH=str(REPO),
        )
        settings.update(env or {})
        command = serve_command({"bot_lease_seconds": LEASE, "heartbeat_seconds": HEARTBEAT})
        proc = processes.start("teleuploader-serve", command, env=settings)
        service = Service(
            proc=proc, url=f"http://127.0.0.1:{port}", port=port, env=settings, key=key
        )
        if wait:
            wait_ready(service)
        return service

    return start_one


def wait_ready(service: Service, within: float = START_TIMEOUT) -> None:
    wait_for(
        lambda: _healthy(service.url),
        within=within,
        what="teleuploader serve to answer /ready",
        proc=service.proc,
    )


def query(database: Database, statement: object) -> list[tuple[object, ...]]:
    async def run() -> list[tuple[object, ...]]:
        engine = create_engine(database.url)
        try:
            async with engine.connect() as connection:
                return [tuple(row) for row in await connection.execute(statement)]  # type: ignore[arg-type]
        finally:
            await engine.dispose()

    return run_async(run)


def lease_owners(database: Database) -> dict[int, str]:
    """Bot id -> owner of every lease not expired."""
    now = datetime.now(UTC)
    rows = query(database, select(BotLease.bot_id, BotLease.owner, BotLease.expires_at))
    return {int(bot): str(owner) for bot, owner, expires in rows if expires > now}  # type: ignore[call-overload, operator]


def upload(service: Service, name: str, data: bytes, outcomes: dict[str, object]) -> None:
    try:
        response = httpx.put(
            f"{service.url}/api/files/{name}", content=data, headers=service.auth, timeout=120
        )
        outcomes[name] = (response.status_code, response.json().get("public_id"))
    except (httpx.HTTPError, ValueError) as exc:
        outcomes[name] = type(exc).__name__


def upload_all(jobs: list[tuple[Service, str, bytes]]) -> dict[str, object]:
    outcomes: dict[str, object] = {}
    threads = [threading.Thread(target=upload, args=(*job, outcomes)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    return outcomes


def test_three_instances_share_six_bots_and_read_each_others_files(
    start: Starter, sim: Simulator, database: Database
) -> None:
    services = [start() for _ in range(3)]
    # Every bot is leased, and to one instance only (a lease row per bot).
    wait_for(lambda: len(lease_owners(database)) == BOTS, within=LEASE * 3, what="6 leases")
    # Idle, they converge on an even split (the last to start gets its share
    # once the others have seen it and handed bots over).
    wait_for(
        lambda: sorted(Counter(lease_owners(database).values()).values()) == [2, 2, 2],
        within=LEASE * 3,
        what="an even split of the bots",
    )

    jobs = [
        (service, f"i{index}-f{n}.bin", payload(5 * CHUNK + 7, seed=index * 10 + n))
        for index, service in enumerate(services)
        for n in range(4)
    ]
    outcomes = upload_all(jobs)
    assert all(isinstance(o, tuple) and o[0] == 201 for o in outcomes.values()), outcomes

    # Any instance serves any file, whichever instance's bots stored it.
    for index, (_, name, data) in enumerate(jobs):
        reader = services[(index + 1) % 3]
        outcome = outcomes[name]
        assert isinstance(outcome, tuple)
        body = httpx.get(f"{reader.url}/f/{outcome[1]}", timeout=60)
        assert body.status_code == 200, body.text
        assert body.content == data
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()
    assert all(bot["rate_limited"] == 0 for bot in stats["bots"].values())
    # Chunks whose uploading bot another instance held were read through a
    # path that instance got (app/store/shared_paths.py), not by forwarding
    # them: no new post.
    forwards = sum(bot["calls"].get("forwardMessage", 0) for bot in stats["bots"].values())
    assert forwards == 0
    shared = query(database, select(func.count()).select_from(SharedFilePath))
    assert shared[0][0] > 0
    # (The fixture checks that no token had two calls in flight at once.)


REPETITIONS = 2


def held_calls(sim: Simulator) -> int:
    """sendDocument calls waiting at the simulator's hold (holding them)."""
    response = httpx.post(f"{sim.url}/_sim/hold/sendDocument", timeout=10)
    response.raise_for_status()
    held: int = response.json()["held"]
    return held


def refusals(sim: Simulator) -> int:
    """429s the simulator has answered (a second call of a lane on a token)."""
    return sum(int(bot["rate_limited"]) for bot in sim_stats(sim)["bots"].values())


def instance_of(database: Database, service: Service) -> str:
    """The id the service registered under (its row, found by its pid)."""
    rows = query(database, select(Instance.id).where(Instance.pid == service.proc.pid))
    return str(rows[0][0])


def forget_cooldowns(database: Database) -> None:
    """Clear the cooldowns the leases keep. The stopped instance's cut-off
    uploads left its tokens the abandoned-call hold (a minute: Telegram may
    still be storing them), which every next holder honours, so the next
    repetition would wait it out. Its calls have all ended at the simulator
    (released, answered, the uploads joined): the next repetition starts as
    the first did."""

    async def run() -> None:
        engine = create_engine(database.url)
        try:
            async with engine.begin() as connection:
                await connection.execute(update(BotLease).values(cooldown_until=NO_COOLDOWN))
        finally:
            await engine.dispose()

    run_async(run)


def test_instances_started_together_never_run_two_calls_of_a_lane_on_one_token(
    start: Starter, sim: Simulator, processes: Processes, database: Database
) -> None:
    """Issue 56: three instances started together; a large upload into one
    while the others are idle, and the bots move to it; that instance stops
    (a rolling deploy) while Telegram is still working on its uploads; load
    goes to the other two, which take its bots. Again, on fresh processes,
    REPETITIONS times. At the simulator, no token ever had two upload-lane
    calls (uploads, forwards, pins) in flight at once, nor two small calls:
    its lanes hold across the fleet (app/telegram/worker.py)."""
    settings = {
        # The large upload keeps 4 chunks at once: 4 bots move to it.
        "UPLOAD_BUFFER_CHUNKS": "4",
        "SHUTDOWN_GRACE_SECONDS": "1",
        "SHUTDOWN_DELAY_SECONDS": "0",
    }
    for repetition in range(REPETITIONS):
        first, busy, third = [start(wait=False, env=settings) for _ in range(3)]
        for service in (first, busy, third):
            # Three start at once, each with a third of the CPUs.
            wait_ready(service, within=3 * START_TIMEOUT)
        busy_id = instance_of(database, busy)
        # Telegram works on every upload from now until the release below.
        assert held_calls(sim) == 0
        big = threading.Thread(
            target=upload,
            args=(busy, f"big-{repetition}.bin", payload(40 * CHUNK, seed=repetition), {}),
        )
        big.start()

        def moved() -> bool:
            # Its 4 chunks at once want 4 bots: 4 move to it, each of the
            # others keeps one, and each of the 4 has an upload at Telegram.
            held = Counter(lease_owners(database).values())
            return held[busy_id] == 4 and sorted(held.values()) == [1, 1, 4]  # noqa: B023

        wait_for(
            lambda: held_calls(sim) >= 4 and moved(),
            # Lease rounds of three processes sharing a loaded CI machine's
            # two CPUs with the parallel pass: 10-15 s here when quiet.
            within=120,
            what="4 bots to move to the busy instance, each with an upload at Telegram",
        )
        refused = refusals(sim)
        # It stops: its drain ends before Telegram has answered, its leases go.
        busy.proc.signal(signal.SIGTERM)
        assert busy.proc.wait(30) == 0
        wait_for(
            lambda: (
                len(lease_owners(database)) == BOTS
                and busy_id not in lease_owners(database).values()  # noqa: B023
            ),
            within=60,
            what="the other two instances to take its bots",
        )
        # Load on the other two, while its uploads are still at Telegram.
        spread = [
            (service, f"r{repetition}-i{index}-f{n}.bin", payload(3 * CHUNK + n, seed=n))
            for index, service in enumerate((first, third))
            for n in range(2)
        ]
        outcomes: dict[str, object] = {}
        threads = [threading.Thread(target=upload, args=(*job, outcomes)) for job in spread]
        for thread in threads:
            thread.start()
        # Its uploads still at Telegram, and one of theirs (or a token
        # refusing a second upload: a 429).
        wait_for(
            lambda: held_calls(sim) >= 5 or refusals(sim) > refused,  # noqa: B023
            within=60,
            what="their uploads at Telegram",
        )
        httpx.post(f"{sim.url}/_sim/release/sendDocument", timeout=10).raise_for_status()
        for thread in threads:
            thread.join(120)
        big.join(120)
        assert all(isinstance(o, tuple) and o[0] == 201 for o in outcomes.values()), outcomes
        processes.stop_all()
        forget_cooldowns(database)

    bots = sim_stats(sim)["bots"]
    assert_one_call_per_lane(bots)
    assert all(stats["max_concurrent_uploads"] == 1 for stats in bots.values())


def test_kill_9_of_an_instance_mid_upload_hands_its_bots_over_and_ledgers_its_chunks(
    start: Starter, sim: Simulator, database: Database
) -> None:
    victim, *survivors = [start() for _ in range(3)]
    wait_for(lambda: len(lease_owners(database)) == BOTS, within=LEASE * 3, what="6 leases")
    configure_sim(sim, latency=0.3)
    posted_before = httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()["chats"][str(CHAT)]
    outcomes: dict[str, object] = {}
    threads = [
        threading.Thread(
            target=upload,
            args=(victim, f"crashed-{n}.bin", payload(8 * CHUNK, seed=500 + n), outcomes),
        )
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    wait_for(
        lambda: (
            httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()["chats"][str(CHAT)]["messages"]
            >= posted_before["messages"] + 6
        ),
        within=60,
        what="some chunks of the uploads to be posted",
        proc=victim.proc,
    )
    # Telegram holds the uploads from now on: they are still running at the
    # kill, however long the wait below takes.
    httpx.post(f"{sim.url}/_sim/hold/sendDocument", timeout=10).raise_for_status()
    # Bots went where the work is: the busy instance holds (nearly) all.
    wait_for(
        lambda: max(Counter(lease_owners(database).values()).values()) >= BOTS - 1,
        within=60,
        what="the busy instance to hold most bots",
    )
    (victim_id, _), *_ = Counter(lease_owners(database).values()).most_common()
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.proc.wait(10) == -signal.SIGKILL
    # Its held calls end before its leases can expire: a survivor that takes
    # one of its bots must find no call of the victim's still running.
    httpx.post(f"{sim.url}/_sim/release/sendDocument", timeout=10).raise_for_status()
    for thread in threads:
        thread.join(60)
    configure_sim(sim, latency=0.0)
    assert not any(isinstance(o, tuple) and o[0] == 201 for o in outcomes.values()), outcomes

    # Its bots are taken over by the survivors once its leases expire (how
    # soon: bench/scaleout_bench.py's failover). Two owners alone do not say
    # so: the victim's leases outlive it by up to the lease time, next to a
    # survivor's.
    def survivors_hold_all() -> bool:
        owners = lease_owners(database)
        return len(owners) == BOTS and victim_id not in owners.values()

    wait_for(survivors_hold_all, within=60, what="the survivors to hold all six bots")

    # Nothing of the crashed uploads is visible through the survivors...
    for service in survivors:
        listing = httpx.get(f"{service.url}/api/files", headers=service.auth, timeout=10).json()
        assert [i["file_name"] for i in listing["items"]] == []
    # ...and their chunks reach the GC ledger (a survivor's periodic sweep),
    # after which the GC deletes them.
    wait_for(
        lambda: query(database, select(func.count()).select_from(Chunk))[0][0] == 0,
        within=120,
        what="the crashed uploads' pending chunks to be swept",
    )
    wait_for(
        lambda: query(database, select(func.count()).select_from(GcEntry))[0][0] == 0,
        within=60,
        what="the GC to delete their messages",
    )
    # Survivors keep working.
    data = payload(3 * CHUNK, seed=9)
    after = upload_all([(survivors[0], "after.bin", data)])["after.bin"]
    assert isinstance(after, tuple) and after[0] == 201
    body = httpx.get(f"{survivors[1].url}/f/{after[1]}", timeout=60)
    assert body.content == data


CADDY = shutil.which("caddy")
CADDYFILE = REPO / "deploy" / "Caddyfile.instances"


def start_caddy(processes: Processes, tmp_path: Path, *upstreams: Service) -> str:
    """deploy/Caddyfile.instances in front of two instances; its site URL."""
    if CADDY is None:
        pytest.fail("caddy is not installed: scripts/test installs Debian's caddy package")
    first, second = upstreams
    port = free_port()
    caddy = processes.start(
        "caddy",
        [CADDY, "run", "--config", CADDYFILE, "--adapter", "caddyfile"],
        env=caddy_env(
            tmp_path,
            TELEUPLOADER_SITE=f"http://127.0.0.1:{port}",
            TELEUPLOADER_UPSTREAM_A=f"127.0.0.1:{first.port}",
            TELEUPLOADER_UPSTREAM_B=f"127.0.0.1:{second.port}",
            TELEUPLOADER_CADDY_ADMIN=f"127.0.0.1:{free_port()}",
        ),
    )
    site = f"http://127.0.0.1:{port}"
    wait_for(lambda: _healthy(site), within=START_TIMEOUT, what="Caddy", proc=caddy)
    return site


# (started, ended, ok, what) of a request through Caddy.
Op = tuple[float, float, bool, str]


def _uploads_served(instance: Service) -> float:
    """Uploads the instance has answered (its /metrics)."""
    return sum(
        value
        for series, value in metrics(instance).items()
        if series.startswith("teleuploader_http_requests_total{") and 'method="PUT"' in series
    )


class Traffic:
    """Three clients uploading files through Caddy and reading each back."""

    def __init__(self, site: str, auth: dict[str, str]) -> None:
        self.site = site
        self.auth = auth
        self.ops: list[Op] = []
        self.stored: dict[str, tuple[str, bytes]] = {}
        self._done = threading.Event()
        self.workers = [threading.Thread(target=self._run, args=(w,)) for w in range(3)]

    def __enter__(self) -> Traffic:
        for thread in self.workers:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        for thread in self.workers:
            thread.join(120)

    def failed(self) -> list[Op]:
        return [op for op in self.ops if not op[2]]

    def succeeded_since(self, moment: float) -> int:
        """Requests begun after `moment` (monotonic) that succeeded."""
        return sum(1 for began, _, ok, _ in list(self.ops) if ok and began > moment)

    def wait_for_successes(self, count: int, *, since: float = 0.0, what: str) -> None:
        """Until `count` requests begun after `since` have succeeded (each
        worker's requests in turn, so traffic has moved on since then)."""
        wait_for(
            lambda: self.succeeded_since(since) >= count,
            within=120,
            what=f"{count} successful requests {what}",
        )

    def _run(self, worker: int) -> None:
        with httpx.Client(base_url=self.site, headers=self.auth, timeout=60) as client:
            for n in range(10_000):
                if self._done.is_set():
                    return
                name = f"w{worker}-{n}.bin"
                data = payload(2 * CHUNK + n, seed=worker * 10_000 + n)
                began = time.monotonic()
                try:
                    response = client.put(f"/api/files/{name}", content=data)
                    ok = response.status_code == 201
                    what = f"PUT {name}: {response.status_code} {response.text[:200]}"
                    if ok:
                        self.stored[name] = (response.json()["public_id"], data)
                except httpx.HTTPError as exc:
                    ok, what = False, f"PUT {name}: {exc!r}"
                self.ops.append((began, time.monotonic(), ok, what))
                if not ok:
                    continue
                public_id, _ = self.stored[name]
                began = time.monotonic()
                try:
                    response = client.get(f"/f/{public_id}")
                    ok = response.status_code == 200 and response.content == data
                    what = f"GET {name}: {response.status_code}"
                except httpx.HTTPError as exc:
                    ok, what = False, f"GET {name}: {exc!r}"
                self.ops.append((began, time.monotonic(), ok, what))


def test_caddy_keeps_uploads_and_downloads_going_while_an_instance_is_killed_and_restarted(
    start: Starter, sim: Simulator, processes: Processes, tmp_path: Path
) -> None:
    first, second = start(), start()
    site = start_caddy(processes, tmp_path, first, second)

    with Traffic(site, first.auth) as traffic:
        traffic.wait_for_successes(6, what="before the kill")
        os.kill(first.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        first.proc.wait(10)
        traffic.wait_for_successes(6, since=killed_at, what="after the kill")
        restarted = start(first.port)  # where Caddy expects it
        restarted_at = time.monotonic()
        traffic.wait_for_successes(6, since=restarted_at, what="after the restart")

    # Only requests the killed instance was serving may fail: those in flight
    # at the kill, or sent to it before Caddy saw it was gone (Caddy retries
    # only a failed connect, and only for requests without a body: see the
    # Caddyfile). Such a failed connect is what tells Caddy (max_fails 1): no
    # request begun after one was answered fails.
    failed = traffic.failed()
    assert len(failed) <= len(traffic.workers), failed
    sent_to_the_dead = [op for op in failed if op[0] > killed_at]
    if sent_to_the_dead:
        told = min(ended for _, ended, _, _ in sent_to_the_dead)
        assert all(began < told for began, _, _, _ in sent_to_the_dead), failed
    # Everything stored, whichever instance took it, reads back through the
    # restarted one.
    for public_id, data in list(traffic.stored.values())[:10]:
        assert httpx.get(f"{restarted.url}/f/{public_id}", timeout=60).content == data


def test_a_rolling_restart_behind_caddy_loses_no_request(
    start: Starter, sim: Simulator, processes: Processes, tmp_path: Path
) -> None:
    """deploy/README.md's rolling deploy: restart the instances one at a time,
    each once the one before answers /ready and Caddy sends it requests. A
    stopping instance stays up, unready, until Caddy's health check has taken
    it out of rotation (SHUTDOWN_DELAY_SECONDS), so no client sees an error.
    (Restarted at /ready alone, the next one could be taken out by the same
    health check that was to bring this one back, a moment before it did:
    with none in rotation, Caddy answered an upload 503.)"""
    instances = [start(), start()]
    site = start_caddy(processes, tmp_path, *instances)

    with Traffic(site, instances[0].auth) as traffic:
        # Files to read back later (below), stored before the first stop.
        wait_for(lambda: len(traffic.stored) >= 6, within=120, what="6 files stored")
        for n, old in enumerate(instances):
            old.proc.signal(signal.SIGTERM)
            assert old.proc.wait(60) == 0
            instances[n] = start(old.port)  # returns once it answers /ready
            wait_for(
                lambda new=instances[n]: _uploads_served(new) > 0,
                within=30,
                what="Caddy sending uploads to the restarted instance",
            )
        restarted_at = time.monotonic()
        traffic.wait_for_successes(6, since=restarted_at, what="after the restarts")

    assert traffic.failed() == []
    # The files stored before the first stop read back from both new processes.
    for n, (public_id, data) in enumerate(list(traffic.stored.values())[:6]):
        url = instances[n % 2].url
        assert httpx.get(f"{url}/f/{public_id}", timeout=60).content == data
