"""A repair cut by kill -9 loses nothing, and `teleuploader scrub --wait
--json` drives a full pass through the running service.

Two copies of every chunk (REPLICAS=2); one copy of each chunk is taken down
at the simulator; a scrub pass starts repairing, and the process is killed
while a repair's upload is held at the simulator's gate. After a restart,
`teleuploader scrub` repairs everything, every file reads back byte-exact,
and the channel holds exactly the messages of the chunks' copies (the upload
the kill cut off, which no row knows of, is reconciled away).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.db.models import ChunkCopy
from tests.conftest import run_async
from tests.db.helpers import Database
from tests.deploy.conftest import (
    CRASH_TUNING,
    TELEUPLOADER,
    ServiceStarter,
    Simulator,
    run_cli,
    wait_for,
)

CHUNK = 128 * 1024
FILES = 3
# Each taken-down copy is asked about again after 0.5, 1 and 2 s before a
# forward settles it (app/store/locator.py): a tenth of that here.
TUNING = {**CRASH_TUNING, "read_retry_seconds": 0.05}


def stored_copies(database: Database) -> list[tuple[int, int, str]]:
    """(chunk id, message id, state) of every copy."""

    async def read() -> list[tuple[int, int, str]]:
        engine = create_engine(database.url)
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(
                    select(ChunkCopy.chunk_id, ChunkCopy.message_id, ChunkCopy.state).order_by(
                        ChunkCopy.id
                    )
                )
                return [(int(c), int(m), str(s)) for c, m, s in rows]
        finally:
            await engine.dispose()

    return run_async(read)


def live(sim: Simulator) -> list[int]:
    messages = httpx.get(f"{sim.url}/_sim/messages", timeout=10).json()
    return sorted(messages["chats"][str(sim.chat_id)])


def held(sim: Simulator) -> int:
    return int(httpx.get(f"{sim.url}/_sim/hold/sendDocument", timeout=10).json()["held"])


def test_a_repair_cut_by_kill_9_loses_nothing_and_the_cli_finishes_it(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    database: Database,
    engine: AsyncEngine,  # empties the tables on Postgres
    tmp_path: Path,
) -> None:
    before = set(live(telegram_sim))
    env = {
        "DATABASE_URL": database.url,
        "CHUNK_SIZE": str(CHUNK),
        "INLINE_THRESHOLD": "1024",
        "REPLICAS": "2",
        "SCRUB_PERIOD_SECONDS": "0",  # only the passes asked for
        "SPOOL_DIR": str(tmp_path / "spool"),
    }
    first = start_service(tmp_path / "unused.db", env=env, tuning=TUNING)
    admin = run_cli(["keys", "create", "operator", "--scope", "admin"], env=first.env, cwd=tmp_path)
    admin = admin.strip()
    files = {}
    with httpx.Client(base_url=first.url, timeout=60) as http:
        for n in range(FILES):
            data = os.urandom(3 * CHUNK + n)
            response = http.put(
                f"/api/files/f{n}.bin", content=data, headers={"Authorization": f"Bearer {admin}"}
            )
            assert response.status_code == 201, response.text
            files[response.json()["public_id"]] = data
    copies = stored_copies(database)
    assert len(copies) == 2 * len({chunk for chunk, _, _ in copies})
    # One copy of every chunk gone from Telegram.
    firsts = {chunk: message for chunk, message, _ in reversed(copies)}
    for message in firsts.values():
        httpx.post(
            f"{telegram_sim.url}/_sim/messages/{telegram_sim.chat_id}/{message}/take-down",
            timeout=10,
        ).raise_for_status()

    # A pass starts repairing; its first upload waits at the gate: kill -9.
    httpx.post(f"{telegram_sim.url}/_sim/hold/sendDocument", timeout=10).raise_for_status()
    with httpx.Client(base_url=first.url, timeout=60) as http:
        started = http.post(
            "/api/admin/scrub", json={"deep": True}, headers={"Authorization": f"Bearer {admin}"}
        )
        assert started.status_code == 202, started.text
    wait_for(lambda: held(telegram_sim) >= 1, within=60, what="a repair's upload")
    os.kill(first.proc.popen.pid, signal.SIGKILL)
    first.proc.popen.wait(10)
    httpx.post(f"{telegram_sim.url}/_sim/release/sendDocument", timeout=10).raise_for_status()

    second = start_service(tmp_path / "unused.db", env=env, tuning=TUNING)
    scrub = subprocess.run(
        [TELEUPLOADER, "scrub", "--wait", "--json", "--url", second.url, "--key", admin],
        capture_output=True,
        text=True,
        env=second.env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert scrub.returncode == 0, scrub.stderr
    report = json.loads(scrub.stdout)
    assert {"checked", "missing", "corrupt", "repaired", "degraded_objects", "lost_objects"} <= set(
        report
    )
    assert (report["lost_objects"], report["degraded_objects"]) == (0, 0)
    assert report["repaired"] >= 1

    with httpx.Client(base_url=second.url, timeout=60) as http:
        for public_id, data in files.items():
            assert http.get(f"/f/{public_id}").content == data
    after = stored_copies(database)
    assert all(state == "ok" for _, _, state in after)
    assert len(after) == 2 * len(firsts)
    # Exactly the copies' messages are left: the taken-down ones and the
    # upload the kill cut off (its intent reconciled) are gone.
    wait_for(
        lambda: set(live(telegram_sim)) - before == {message for _, message, _ in after},
        within=60,
        what="the channel to hold exactly the chunks' copies",
    )
