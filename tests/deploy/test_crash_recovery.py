"""A crash of the real `teleuploader serve` (kill -9) in the middle of an upload.

The chunks it had stored in Telegram are recorded as pending in the database;
the next start collects them (GC ledger) and deletes their messages, so the
channel is back where it was. On SQLite and on Postgres through pgbouncer.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cli.demo import create_api_key
from app.db.engine import create_engine
from app.db.models import Chunk
from tests.conftest import run_async
from tests.db.helpers import Database
from tests.deploy.conftest import CRASH_TUNING, Service, ServiceStarter, Simulator, wait_for
from tests.deploy.test_orphans_crash import stored_messages
from tests.deploy.test_shutdown import live_messages

CHUNK = 256 * 1024
STORED_BEFORE_CRASH = 3


def pending_chunks(database: Database) -> int:
    """Chunk rows the service recorded as pending (stored, not yet part of an object)."""

    async def count() -> int:
        engine = create_engine(database.url)
        try:
            async with engine.connect() as connection:
                query = select(func.count()).select_from(Chunk).where(Chunk.state == "pending")
                return int(await connection.scalar(query) or 0)
        finally:
            await engine.dispose()

    return run_async(count)


def gated_upload(
    service: Service, go_on: threading.Event
) -> tuple[threading.Thread, dict[str, object]]:
    """A raw upload that sends STORED_BEFORE_CRASH chunks' worth of bytes, then
    waits for `go_on` before sending more."""
    outcome: dict[str, object] = {}

    def body() -> Iterator[bytes]:
        for index in range(STORED_BEFORE_CRASH):
            yield bytes([index + 1]) * CHUNK
        go_on.wait(60)
        yield b"\xff" * CHUNK

    def run() -> None:
        try:
            response = httpx.put(
                f"{service.url}/api/files/crashed.bin",
                content=body(),
                headers=service.auth,
                timeout=60,
            )
            outcome["status"] = response.status_code
        except httpx.HTTPError as exc:
            outcome["error"] = type(exc).__name__

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_chunks_left_pending_by_kill_9_are_collected_at_the_next_start(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    database: Database,
    engine: AsyncEngine,  # empties the tables of the shared Postgres test database
) -> None:
    env = {"CHUNK_SIZE": str(CHUNK)}
    before = live_messages(telegram_sim)
    before_ids = stored_messages(telegram_sim)
    key = run_async(lambda: create_api_key(database.url, name="crash-test"))
    service = start_service(database.url, env=env, tuning=CRASH_TUNING)
    service.key = key
    go_on = threading.Event()
    thread, outcome = gated_upload(service, go_on)
    try:
        # The body is held back now: the chunks it had are in Telegram and
        # recorded, and no other call is in flight.
        wait_for(
            lambda: (
                live_messages(telegram_sim) == before + STORED_BEFORE_CRASH
                and pending_chunks(database) == STORED_BEFORE_CRASH
            ),
            within=30,
            what=f"{STORED_BEFORE_CRASH} chunks to be stored and recorded",
            proc=service.proc,
        )
        os.kill(service.proc.pid, signal.SIGKILL)
        assert service.proc.wait(10) == -signal.SIGKILL
    finally:
        go_on.set()
        thread.join(30)
    assert outcome.get("status") is None, outcome  # the client saw its connection die

    # By id, not by count: the simulator's chat is shared with earlier tests.
    crashed = stored_messages(telegram_sim) - before_ids
    assert len(crashed) == STORED_BEFORE_CRASH
    restarted = start_service(database.url, env=env, tuning=CRASH_TUNING)

    wait_for(
        lambda: not crashed & stored_messages(telegram_sim),
        within=30,
        what="the crashed upload's chunks to be deleted from Telegram",
        proc=restarted.proc,
    )
    assert pending_chunks(database) == 0
    listing = httpx.get(f"{restarted.url}/api/files", headers=service.auth, timeout=10)
    assert listing.json()["items"] == []
