"""An instance stalled past the takeover time loses nothing it acknowledged
(issue 49): two `teleuploader serve` processes on one Postgres and one
spool directory; one is stopped with SIGSTOP (as a VM pause or CPU
throttling stops it) while its spooled parts wait for Telegram, the other
takes it for dead, claims it and adopts its parts, and then the stalled one
is let go on with SIGCONT, while the adopter's flush is still under way.

Every acknowledged upload must read back byte-exact through both, and no
message a chunk copy names may be deleted. Before the fix, the stalled
instance's flusher deleted the files of the parts it no longer owned: the
adopter retried them forever and the object never settled.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from sqlalchemy import func, select, text

from app.db.engine import create_engine
from app.db.models import ChunkCopy, GcEntry, Instance, MultipartUpload, SpooledPart
from tests.conftest import empty_tables, run_async
from tests.db.helpers import Database
from tests.deploy.conftest import (
    REPO,
    Processes,
    Service,
    Simulator,
    _healthy,
    base_env,
    check_one_call_per_lane,
    configure_sim,
    free_port,
    serve_command,
    sim_process,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.postgres_only]

CHAT = -1003
CHUNK = 128 * 1024
PART = 60 * 1024  # eight parts: two chunks in flight leave the last four uncut
PARTS = 8
ACCESS_KEY = "stall-takeover"
SECRET_KEY = "stall-takeover-secret-0123456789"
# Short timers, so that the takeover comes within seconds: the stalled
# instance is taken for dead after 5 s, the other sweeps every 12 beats (3 s).
# The stalled instance's sends are cut off: its tokens are held after them
# (Telegram may still be storing the upload). The simulator has answered them
# all by the time it goes on, so 5 s stand for Telegram's 60.
TUNING = {
    "bot_lease_seconds": 3.0,
    "heartbeat_seconds": 0.25,
    "instance_stale_seconds": 5.0,
    "s3_min_part_size": 0,
    "abandoned_call_hold_seconds": 5.0,
}
SETTLE = 60.0
GC_SETTLE = 60.0
TAKEOVER = 20.0  # stale after 5 s, swept every 3 s, on a loaded machine
STOPS = 3
START_WITHIN = 60.0  # a loaded machine takes its time to import the service


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    with sim_process(tmp_path_factory.mktemp("telegram-sim-stall"), 2, CHAT) as simulator:
        configure_sim(simulator, max_getfile_bytes=CHUNK)
        yield simulator


@pytest.fixture
def database(postgres_database: Database) -> Database:
    empty_tables(postgres_database)
    return postgres_database


def start(
    processes: Processes, sim: Simulator, database: Database, tmp_path: Path, *, ready: bool
) -> Service:
    """An instance; `ready`: wait for /ready (its bots leased), else for /health
    (the first instance holds every bot until it stalls)."""
    port = free_port()
    settings = base_env(
        tmp_path,
        BOT_TOKENS=",".join(sim.tokens),
        STORAGE_CHAT_ID=str(sim.chat_id),
        TELEGRAM_API_BASE=sim.url,
        # Postgres itself, not pgbouncer: a process stopped inside its
        # transactions keeps their server connections, and the tests' pool
        # of 5 would leave the other instance none.
        DATABASE_URL=database.migration_url,
        HOST="127.0.0.1",
        PORT=str(port),
        SENDS_PER_MINUTE="0",
        SHUTDOWN_GRACE_SECONDS="5",
        LOG_FORMAT="json",
        CHUNK_SIZE=str(CHUNK),
        INLINE_THRESHOLD="1024",
        SPOOL_DIR=str(tmp_path / "spool"),  # one machine: the adopter reads the files
        S3_CREDENTIALS=f"{ACCESS_KEY}:{SECRET_KEY}",
        PYTHONPATH=str(REPO),
    )
    proc = processes.start("teleuploader-serve", serve_command(TUNING), env=settings)
    service = Service(proc=proc, url=f"http://127.0.0.1:{port}", port=port, env=settings)
    check = _healthy if ready else _alive
    wait_for(lambda: check(service.url), within=START_WITHIN, what="the service", proc=proc)
    return service


def _alive(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def s3(service: Service) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def gate(sim: Simulator, action: str) -> None:
    httpx.post(f"{sim.url}/_sim/{action}/sendDocument", timeout=5).raise_for_status()


def held(sim: Simulator) -> int:
    answer: int = httpx.get(f"{sim.url}/_sim/hold/sendDocument", timeout=5).json()["held"]
    return answer


def query(database: Database, statement: Any) -> list[Any]:
    async def run() -> list[Any]:
        engine = create_engine(database.migration_url)
        try:
            async with engine.connect() as connection:
                return list(await connection.execute(statement))
        finally:
            await engine.dispose()

    return run_async(run)


def count(database: Database, model: Any) -> int:
    return int(query(database, select(func.count()).select_from(model))[0][0])


def row_locks(database: Database) -> int:
    """Sessions waiting for a lock (the claim's DELETE of a row the stopped
    process holds)."""
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    return int(query(database, waiting)[0][0])


def logged(service: Service, event: str) -> bool:
    for line in service.proc.stdout().splitlines():
        with_event = line.startswith("{") and json.loads(line).get("event") == event
        if with_event:
            return True
    return False


def test_an_instance_stalled_past_the_takeover_loses_nothing_it_acknowledged(
    sim: Simulator, database: Database, tmp_path: Path
) -> None:
    processes = Processes(tmp_path)
    try:
        run(processes, sim, database, tmp_path)
    finally:
        gate(sim, "release")
        for proc in processes.started:
            proc.signal(signal.SIGCONT)
        processes.stop_all()
    check_one_call_per_lane(sim.url)


def run(processes: Processes, sim: Simulator, database: Database, tmp_path: Path) -> None:
    stalled = start(processes, sim, database, tmp_path, ready=True)
    (stalled_id,) = query(database, select(Instance.id))[0]
    adopter = start(processes, sim, database, tmp_path, ready=False)
    client = s3(stalled)
    client.create_bucket(Bucket="box")
    # Stored in Telegram before the stall: reconciliation must leave it be.
    before = os.urandom(3 * CHUNK)
    client.put_object(Bucket="box", Key="before", Body=before)

    parts = [os.urandom(PART) for _ in range(PARTS)]
    gate(sim, "hold")
    upload = client.create_multipart_upload(Bucket="box", Key="spooled")
    listed = [
        {
            "PartNumber": n,
            "ETag": client.upload_part(
                Bucket="box", Key="spooled", UploadId=upload["UploadId"], PartNumber=n, Body=data
            )["ETag"],
        }
        for n, data in enumerate(parts, start=1)
    ]
    client.complete_multipart_upload(
        Bucket="box", Key="spooled", UploadId=upload["UploadId"], MultipartUpload={"Parts": listed}
    )
    wait_for(lambda: held(sim) >= 1, within=10, what="the stalled instance's flush")

    def adopted() -> bool:
        owners = {owner for (owner,) in query(database, select(SpooledPart.owner))}
        alive = {instance for (instance,) in query(database, select(Instance.id))}
        return stalled_id not in alive and bool(owners) and stalled_id not in owners

    # Its sends finish at Telegram while it is stopped (their answers wait
    # for it); the adopter's wait at the gate again. A stop that lands inside
    # one of its transactions on its instance row (a heartbeat) holds the
    # row's lock, and the claim waits for it, as it should: then it is let go
    # on for a moment and stopped again.
    for attempt in range(STOPS):
        stalled.proc.signal(signal.SIGSTOP)
        if attempt == 0:
            gate(sim, "release")
            gate(sim, "hold")
        try:
            wait_for(adopted, within=TAKEOVER, what="the other instance to adopt the parts")
            break
        except AssertionError:
            if attempt == STOPS - 1:
                raise
            stalled.proc.signal(signal.SIGCONT)
            wait_for(lambda: row_locks(database) == 0, within=10, what="its transactions")
    stalled.proc.signal(signal.SIGCONT)
    wait_for(
        lambda: logged(stalled, "instance_registered_anew"),
        within=SETTLE,
        what="the stalled instance to register anew",
        proc=stalled.proc,
    )
    gate(sim, "release")

    def settled() -> bool:
        return count(database, SpooledPart) == 0 and count(database, MultipartUpload) == 0

    def collected() -> bool:
        return count(database, GcEntry) == 0

    try:
        wait_for(settled, within=SETTLE, what="the spool to flush")
        # The stalled instance's cut-off sends keep its bots for the
        # abandoned-call hold: its orphans' deletions wait that long.
        wait_for(collected, within=GC_SETTLE, what="the GC to settle")
    except AssertionError as exc:
        left = {m.__name__: count(database, m) for m in (SpooledPart, MultipartUpload, GcEntry)}
        outputs = stalled.proc.output(20000) + adopter.proc.output(20000)
        raise AssertionError(f"{exc}: left {left}\n{outputs}") from None
    whole = b"".join(parts)
    for service in (stalled, adopter):
        reader = s3(service)
        assert reader.get_object(Bucket="box", Key="spooled")["Body"].read() == whole
        assert reader.get_object(Bucket="box", Key="before")["Body"].read() == before
    assert not list((tmp_path / "spool").rglob("*.part"))

    # No message a chunk copy names was deleted.
    live = set(httpx.get(f"{sim.url}/_sim/messages", timeout=10).json()["chats"][str(CHAT)])
    named = {message for (message,) in query(database, select(ChunkCopy.message_id))}
    assert named <= live, sorted(named - live)
    # The stalled one works again.
    client.put_object(Bucket="box", Key="after", Body=b"x" * (CHUNK + 1))
    assert s3(adopter).get_object(Bucket="box", Key="after")["Body"].read() == b"x" * (CHUNK + 1)
