"""The service rides out a pgbouncer restart: requests during the outage get
503 with Retry-After, and it recovers by itself afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import Database
from tests.running_service import Service, ServiceLauncher, eventually

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "pgbouncer-test.sh"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivatePgbouncer:
    """A pgbouncer of this test's own, so stopping it disturbs no other test."""

    def __init__(self) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "PGBOUNCER_DIR": tempfile.mkdtemp(prefix="teleuploader-pgb-"),
            "PGBOUNCER_PORT": str(self.port),
        }

    def run(self, action: str) -> None:
        subprocess.run(["bash", str(SCRIPT), action], env=self.env, check=True, capture_output=True)


@pytest.fixture
def pgbouncer() -> Iterator[PrivatePgbouncer]:
    bouncer = PrivatePgbouncer()
    bouncer.run("start")
    yield bouncer
    bouncer.run("stop")


@pytest.fixture
async def outage_service(
    postgres_database: Database, pgbouncer: PrivatePgbouncer
) -> AsyncIterator[Service]:
    url = make_url(postgres_database.url).set(port=pgbouncer.port)
    database = Database(
        backend="postgres",
        url=url.render_as_string(hide_password=False),
        migration_url=postgres_database.migration_url,
    )
    launcher = ServiceLauncher(database)
    yield await launcher.start()
    await launcher.aclose()


@pytest.mark.postgres
async def test_pgbouncer_restart_gives_503_then_recovers(
    outage_service: Service, pgbouncer: PrivatePgbouncer
) -> None:
    service = outage_service
    async with service.client() as http:
        before = await http.put("/api/files/a.txt", content=b"before", headers=service.auth)
        assert before.status_code == 201
        public_id = before.json()["public_id"]

        pgbouncer.run("stop")
        during = [
            await http.put("/api/files/b.txt", content=b"during", headers=service.auth),
            await http.get(f"/file/{public_id}/info"),
            await http.get(f"/f/{public_id}"),
        ]
        ready = await http.get("/ready")
        for response in during:
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "5"
            assert response.json()["error"] == "database_unavailable"
        assert ready.status_code == 503
        assert ready.json() == {"status": "not_ready"}

        pgbouncer.run("start")

        async def recovered() -> bool:
            response = await http.get(f"/f/{public_id}")
            return response.status_code == 200 and response.content == b"before"

        await eventually(recovered)
        after = await http.put("/api/files/c.txt", content=b"after", headers=service.auth)
        assert after.status_code == 201
