"""Graceful shutdown of the real `teleuploader serve` with transfers in flight.

SIGTERM: new writes are refused, running uploads and downloads finish within
the grace period, and the process exits 0. An upload cut off by the grace
period leaves no object, and its chunks are deleted from Telegram (the GC
ledger survives the restart and the next start deletes them): that one runs
on SQLite and on Postgres through pgbouncer; the others are the process's
behaviour, not the database's, and run on SQLite.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.cli.demo import create_api_key
from tests.conftest import run_async
from tests.deploy.conftest import (
    Service,
    ServiceStarter,
    Simulator,
    configure_sim,
    sqlite_url,
    wait_for,
)
from tests.running_service import payload

CHUNK = 256 * 1024


def live_messages(sim: Simulator) -> int:
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=5).json()
    return int(stats["chats"][str(sim.chat_id)]["live_messages"])


def piece(index: int) -> bytes:
    return bytes([index % 256]) * CHUNK


def slow_body(pieces: int, pause: float, started: threading.Event) -> Iterator[bytes]:
    for index in range(pieces):
        yield piece(index)
        started.set()
        time.sleep(pause)


def upload_in_thread(
    service: Service, name: str, pieces: int, pause: float
) -> tuple[threading.Thread, threading.Event, dict[str, object]]:
    started = threading.Event()
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            response = httpx.put(
                f"{service.url}/api/files/{name}",
                content=slow_body(pieces, pause, started),
                headers=service.auth,
                timeout=60,
            )
            outcome["status"] = response.status_code
            if response.status_code == 201:
                outcome["body"] = response.json()
        except httpx.HTTPError as exc:
            outcome["error"] = type(exc).__name__

    thread = threading.Thread(target=run)
    thread.start()
    return thread, started, outcome


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sigterm_lets_running_uploads_finish_and_exits_0(
    start_service: ServiceStarter, database_url: str, telegram_sim: Simulator
) -> None:
    before = live_messages(telegram_sim)
    service = start_service(
        database_url, api_key=True, env={"CHUNK_SIZE": str(CHUNK), "SHUTDOWN_GRACE_SECONDS": "5"}
    )
    thread, started, outcome = upload_in_thread(service, "in-flight.bin", pieces=8, pause=0.3)
    assert started.wait(10)
    # In flight for the service, not just for the client: a chunk reached Telegram.
    wait_for(
        lambda: live_messages(telegram_sim) > before,
        within=20,
        what="the upload's first chunk to reach Telegram",
    )

    service.proc.popen.send_signal(signal.SIGTERM)
    thread.join(30)

    assert outcome.get("status") == 201, outcome
    assert service.proc.popen.wait(30) == 0, service.proc.output()

    restarted = start_service(database_url, env={"CHUNK_SIZE": str(CHUNK)})
    body = outcome["body"]
    assert isinstance(body, dict)
    download = httpx.get(f"{restarted.url}/f/{body['public_id']}", timeout=30)
    assert download.status_code == 200
    sent = b"".join(piece(index) for index in range(8))
    assert hashlib.sha256(download.content).hexdigest() == hashlib.sha256(sent).hexdigest()
    assert body["sha256"] == hashlib.sha256(sent).hexdigest()


def test_upload_cut_off_by_the_grace_period_leaves_nothing(
    start_service: ServiceStarter, database_url: str, telegram_sim: Simulator
) -> None:
    before = live_messages(telegram_sim)
    service = start_service(
        database_url, api_key=True, env={"CHUNK_SIZE": str(CHUNK), "SHUTDOWN_GRACE_SECONDS": "0"}
    )
    # Far longer than the drain (grace + 5 s): it will be cut off.
    thread, started, outcome = upload_in_thread(service, "cut.bin", pieces=60, pause=0.25)
    assert started.wait(10)
    wait_for(
        lambda: live_messages(telegram_sim) >= before + 3,
        within=20,
        what="some chunks of the slow upload to reach Telegram",
    )

    service.proc.popen.send_signal(signal.SIGTERM)
    assert service.proc.popen.wait(40) == 0, service.proc.output()
    thread.join(30)
    assert outcome.get("status") != 201, outcome
    # Logged as cut off, not as a server error (which would set off 5xx alerts).
    lines = [json.loads(line) for line in service.proc.stdout().splitlines() if line]
    (cut,) = [
        line
        for line in lines
        if line.get("event") == "http_request" and line.get("method") == "PUT"
    ]
    assert (cut["status"], cut.get("cancelled"), cut["level"]) == (499, True, "warning"), cut

    restarted = start_service(database_url, env={"CHUNK_SIZE": str(CHUNK)})
    response = httpx.get(f"{restarted.url}/api/files", headers=service.auth, timeout=10)
    assert response.status_code == 200, (response.status_code, response.text)
    assert [item["file_name"] for item in response.json()["items"]] == []
    try:
        wait_for(
            lambda: live_messages(telegram_sim) == before,
            within=30,
            what="the cut-off upload's chunks to be deleted from Telegram",
            proc=restarted.proc,
        )
    except AssertionError as exc:
        left = live_messages(telegram_sim) - before
        raise AssertionError(
            f"{exc}\n{left} messages left; the first service:\n{service.proc.output(8000)}"
        ) from None


def test_sigterm_refuses_new_writes_and_lets_running_downloads_finish(
    start_service: ServiceStarter, migrated_db: Path, telegram_sim: Simulator
) -> None:
    """A write that comes right after SIGTERM gets 503 with Retry-After, and a
    download that was running goes on to its last byte.

    The window for the 503 is short: uvicorn closes its port and its idle
    connections at its next tick (within 0.1 s), after which a write finds
    the door shut. So the write goes over a connection opened before the
    signal, and a closed connection is accepted too (it did not happen in 16
    tries); what must never happen is that the write is stored."""
    key = run_async(lambda: create_api_key(sqlite_url(migrated_db), name="drain-test"))
    service = start_service(
        migrated_db, env={"CHUNK_SIZE": str(CHUNK), "SHUTDOWN_GRACE_SECONDS": "5"}
    )
    service.key = key
    data = payload(6 * CHUNK, seed=6)
    stored = httpx.put(
        f"{service.url}/api/files/movie.bin", content=data, headers=service.auth, timeout=60
    )
    assert stored.status_code == 201, stored.text
    first_bytes = threading.Event()
    received: dict[str, object] = {"size": 0}

    def download() -> None:
        digest = hashlib.sha256()
        try:
            url = f"{service.url}/f/{stored.json()['public_id']}"
            with httpx.stream("GET", url, timeout=60) as response:
                received["status"] = response.status_code
                for piece in response.iter_raw():
                    digest.update(piece)
                    received["size"] = int(str(received["size"])) + len(piece)
                    first_bytes.set()
            received["sha256"] = digest.hexdigest()
        except httpx.HTTPError as exc:
            received["error"] = repr(exc)
        finally:
            first_bytes.set()

    thread = threading.Thread(target=download)
    # Telegram serves each chunk at one CHUNK per second: the download takes
    # seconds, well inside the grace period, and is running when SIGTERM comes.
    configure_sim(telegram_sim, download_bandwidth=CHUNK)
    try:
        with httpx.Client(base_url=service.url, headers=service.auth, timeout=10) as client:
            assert client.get("/health").status_code == 200  # the connection is open
            thread.start()
            assert first_bytes.wait(20)

            service.proc.signal(signal.SIGTERM)
            size_at_sigterm = received["size"]
            try:
                late: httpx.Response | None = client.put("/api/files/late.txt", content=b"late")
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError):
                late = None
            thread.join(30)
    finally:
        configure_sim(telegram_sim, download_bandwidth=None)

    if late is not None:
        assert late.status_code == 503, late.text
        assert late.headers["retry-after"] == "5"
        assert late.json()["error"] == "shutting_down"
    assert isinstance(size_at_sigterm, int) and 0 < size_at_sigterm < len(data)
    assert received == {
        "status": 200,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert service.proc.wait(30) == 0, service.proc.output()
    with contextlib.closing(sqlite3.connect(migrated_db)) as db:
        assert db.execute("SELECT name FROM objects").fetchall() == [("movie.bin",)]


def test_every_request_is_in_the_log_with_its_request_id_after_sigterm(
    start_service: ServiceStarter, migrated_db: Path
) -> None:
    # Each request is logged once, with the id its client got back; the
    # last ones too, when the service stops right after answering.
    service = start_service(migrated_db)
    with httpx.Client(base_url=service.url, timeout=10) as http:
        answered = [
            http.get("/health", headers={"X-Request-ID": f"shutdown-{n}"}) for n in range(5)
        ]
    assert [r.status_code for r in answered] == [200] * 5
    service.proc.popen.send_signal(signal.SIGTERM)
    assert service.proc.popen.wait(30) == 0, service.proc.output()

    lines = [json.loads(line) for line in service.proc.stdout().splitlines() if line]
    logged = [
        line
        for line in lines
        if line.get("event") == "http_request"
        and str(line.get("request_id", "")).startswith("shutdown-")
    ]
    assert [line["request_id"] for line in logged] == [f"shutdown-{n}" for n in range(5)]
    assert all(line["route"] == "/health" and line["status"] == 200 for line in logged)
    # The lines after them (shutdown's own) came after them.
    assert lines.index(logged[-1]) < max(
        i for i, line in enumerate(lines) if line.get("event") == "services_stopped"
    )
