"""Losing the database for real: `teleuploader serve` killed with -9, its
database and spool directory deleted, then `teleuploader migrate`,
`teleuploader restore` and `serve` again, against the Telegram simulator.

The RPO: what was committed more than JOURNAL_SECONDS before the kill comes
back (its bytes had reached Telegram) through the snapshot and the journal
after it. And a snapshot cut short by kill -9 leaves the previous one
pinned and usable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.demo import create_api_key
from tests.conftest import empty_tables, run_async
from tests.db.helpers import Database
from tests.deploy.conftest import (
    CRASH_TUNING,
    Service,
    ServiceStarter,
    Simulator,
    metrics,
    run_cli,
    wait_for,
)
from tests.deploy.test_caddy_s3 import ACCESS_KEY, SECRET, s3_client

CHUNK = 64 * 1024
INLINE = 1024


@pytest.fixture
def empty_database(database: Database) -> Database:
    """The session's Postgres database is shared by a worker's tests: emptied
    here, so that a snapshot holds this test's rows and no one else's."""
    if database.backend == "postgres":
        empty_tables(database)
    return database


def settings(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "CHUNK_SIZE": str(CHUNK),
        "INLINE_THRESHOLD": str(INLINE),
        # No periodic snapshot during the test: the one it takes is the last.
        "SNAPSHOT_INTERVAL_SECONDS": "3600",
        "JOURNAL_SECONDS": "1",
        "S3_CREDENTIALS": f"{ACCESS_KEY}:{SECRET}",
        "SPOOL_DIR": str(tmp_path / "spool"),
        **extra,
    }


def data(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def take_snapshot(service: Service) -> dict[str, Any]:
    answer = httpx.post(f"{service.url}/api/admin/snapshot", headers=service.auth, timeout=30)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def put_file(service: Service, name: str, body: bytes) -> str:
    answer = httpx.put(
        f"{service.url}/api/files/{name}", content=body, headers=service.auth, timeout=30
    )
    assert answer.status_code in (200, 201), answer.text
    public_id: str = answer.json()["public_id"]
    return public_id


def link(service: Service, public_id: str) -> httpx.Response:
    return httpx.get(f"{service.url}/f/{public_id}", timeout=30)


def kill_9(service: Service) -> None:
    os.kill(service.proc.pid, signal.SIGKILL)
    assert service.proc.wait(10) == -signal.SIGKILL


def lose_everything(database: Database, env: dict[str, str], tmp_path: Path) -> None:
    """The database and the spool directory are gone; a new, empty, migrated
    database takes the old one's place."""
    shutil.rmtree(env["SPOOL_DIR"], ignore_errors=True)
    if database.backend == "postgres":
        empty_tables(database)  # TRUNCATE ... RESTART IDENTITY: as a new database
    else:
        path = Path(database.url.removeprefix("sqlite+aiosqlite:///"))
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
    run_cli(["migrate"], env=env, cwd=tmp_path)


def restore(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        run_cli(["restore", "--json"], env=env, cwd=tmp_path).strip().splitlines()[-1]
    )
    return report


def test_after_kill_9_and_the_loss_of_database_and_spool_the_journal_brings_back_everything(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    empty_database: Database,
    tmp_path: Path,
) -> None:
    database = empty_database
    key = run_async(lambda: create_api_key(database.url, name="rpo"))
    service = start_service(database.url, env=settings(tmp_path), tuning=CRASH_TUNING)
    service.key = key
    in_snapshot = put_file(service, "before.txt", b"in the snapshot")
    take_snapshot(service)
    # After the snapshot: only the journal carries these.
    small, big = b"inline after the snapshot", data(2 * CHUNK + 7, seed=1)
    small_id, big_id = put_file(service, "small.txt", small), put_file(service, "big.bin", big)
    s3 = s3_client(service.url)
    s3.create_bucket(Bucket="box")
    s3_small, s3_big = data(100, seed=2), data(CHUNK + 5, seed=3)
    etags = {
        name: s3.put_object(Bucket="box", Key=name, Body=body, Metadata={"k": name})["ETag"]
        for name, body in (("a/small.bin", s3_small), ("a/big.bin", s3_big))
    }
    journal_rounds = 'teleuploader_background_rounds_total{loop="journal",outcome="ok"}'
    rounds = metrics(service).get(journal_rounds, 0.0)

    def all_in_the_chat() -> bool:
        # A journal round that began after the last commit ended with nothing
        # pending, and no byte waits in the spool: all of it is in the chat.
        seen = metrics(service)
        return (
            seen.get(journal_rounds, 0.0) > rounds
            and seen.get("teleuploader_journal_pending_rows", 0.0) == 0
            and seen.get('teleuploader_spool_bytes{state="used"}', 0.0) == 0
        )

    wait_for(
        all_in_the_chat,
        within=15,
        what="the journal to ship the changes after the snapshot",
        proc=service.proc,
    )
    kill_9(service)
    env = service.env
    lose_everything(database, env, tmp_path)

    report = restore(env, tmp_path)

    assert report["problems"] == [] and report["journal_batches"] >= 1, report
    assert report["last_change_at"] > report["taken_at"]
    back = start_service(database.url, env=settings(tmp_path), tuning=CRASH_TUNING)
    back.key = key  # the old key works
    assert link(back, in_snapshot).content == b"in the snapshot"
    assert link(back, small_id).content == small
    assert link(back, big_id).content == big
    s3 = s3_client(back.url)
    for name, body in (("a/small.bin", s3_small), ("a/big.bin", s3_big)):
        got = s3.get_object(Bucket="box", Key=name)
        assert got["Body"].read() == body
        assert got["Metadata"] == {"k": name}
        assert got["ETag"] == etags[name] == f'"{hashlib.md5(body).hexdigest()}"'


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_snapshot_cut_short_by_kill_9_leaves_the_previous_one_usable(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    empty_database: Database,
    tmp_path: Path,
) -> None:
    database = empty_database
    key = run_async(lambda: create_api_key(database.url, name="cut-short"))
    # No journal: what is restored is the previous snapshot, no more.
    env = settings(tmp_path, JOURNAL_SECONDS="0")
    service = start_service(database.url, env=env, tuning=CRASH_TUNING)
    service.key = key
    kept = put_file(service, "kept.txt", b"in the first snapshot")
    first = take_snapshot(service)
    lost = put_file(service, "lost.txt", b"only in the database")
    hold = f"{telegram_sim.url}/_sim/hold/sendDocument"
    httpx.post(hold, timeout=10).raise_for_status()
    try:
        second = threading.Thread(target=_snapshot_until_killed, args=(service,))
        second.start()
        # The second snapshot's first piece waits at Telegram's door.
        wait_for(
            lambda: httpx.get(hold, timeout=10).json()["held"] >= 1,
            within=15,
            what="the second snapshot to send its first piece",
            proc=service.proc,
        )
        kill_9(service)
    finally:
        httpx.post(f"{telegram_sim.url}/_sim/release/sendDocument", timeout=10)
    second.join(30)
    lose_everything(database, service.env, tmp_path)

    report = restore(service.env, tmp_path)

    assert report["taken_at"] == first["taken_at"].replace("Z", "+00:00")
    assert report["restored"]["objects"] == 1 and report["problems"] == []
    back = start_service(database.url, env=env, tuning=CRASH_TUNING)
    assert link(back, kept).content == b"in the first snapshot"
    assert link(back, lost).status_code == 404


def _snapshot_until_killed(service: Service) -> None:
    # The service dies under the request: that is the point.
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{service.url}/api/admin/snapshot", headers=service.auth, timeout=30)
