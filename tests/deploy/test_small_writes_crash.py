"""Small objects are stored in one statement outside the ORM session
(app/db/single_statements.py): each one acknowledged must be committed, so it
is there, whole, after a kill -9 of the real `teleuploader serve` that
acknowledged it. On SQLite and on Postgres through pgbouncer.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.deploy.conftest import CRASH_TUNING, ServiceStarter

FILES = 40
WRITERS = 8


def body(n: int) -> bytes:
    return f"small object {n}\n".encode() * 50


def test_acknowledged_small_objects_survive_kill_9(
    start_service: ServiceStarter, database_url: str
) -> None:
    service = start_service(database_url, api_key=True, tuning=CRASH_TUNING)

    def upload(n: int) -> str:
        response = httpx.put(
            f"{service.url}/api/files/small-{n}.txt",
            content=body(n),
            headers=service.auth,
            timeout=30,
        )
        assert response.status_code == 201, response.text
        public_id: str = response.json()["public_id"]
        return public_id

    with ThreadPoolExecutor(WRITERS) as pool:
        public_ids = list(pool.map(upload, range(FILES)))
    # At once after the last answer: nothing gets a chance to finish later.
    os.kill(service.proc.pid, signal.SIGKILL)
    assert service.proc.wait(10) == -signal.SIGKILL

    restarted = start_service(database_url, tuning=CRASH_TUNING)
    for n, public_id in enumerate(public_ids):
        download = httpx.get(f"{restarted.url}/f/{public_id}", timeout=30)
        assert download.status_code == 200, (n, download.text)
        assert download.content == body(n)
