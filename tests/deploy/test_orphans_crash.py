"""kill -9 of the real `teleuploader serve` during many concurrent multi-chunk
uploads leaves no Telegram message behind (issue 10, "kill -9 leaves Telegram
messages forever").

Telegram carries out a send whose body it had whole even when its client is
gone, so a crash leaves messages no row knows of. After the restart, the
reconciliation (app/store/reconcile.py) must delete them, along with the
chunks the crashed uploads had recorded as pending, and nothing the objects
stored before the crash reference. The end state is counted in the
simulator: the messages the chat still stores are exactly the chunks that
live objects reference. On SQLite and on Postgres through pgbouncer.
"""

from __future__ import annotations

import os
import signal
import threading

import httpx
from sqlalchemy import select

from app.cli.demo import create_api_key
from app.db.engine import create_engine
from app.db.models import ChunkCopy, Piece
from tests.conftest import run_async
from tests.deploy.conftest import (
    CRASH_TUNING,
    Service,
    ServiceStarter,
    Simulator,
    configure_sim,
    wait_for,
)
from tests.running_service import payload

CHUNK = 256 * 1024
CHUNKS_PER_UPLOAD = 6
UPLOADS = 15
STORED_BEFORE = 2  # objects whole before the crash: their messages must stay
POSTED_BEFORE_KILL = 12  # messages of the concurrent uploads before the kill
# Telegram's work on each call: the uploads are far from done when the kill comes.
SIM_LATENCY = 0.3


def stored_messages(sim: Simulator) -> set[int]:
    """The chat's messages the simulator still stores."""
    listing = httpx.get(f"{sim.url}/_sim/messages", timeout=10).json()
    return set(listing["chats"][str(sim.chat_id)])


def posted_messages(sim: Simulator) -> int:
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()
    return int(stats["chats"][str(sim.chat_id)]["messages"])


def referenced_messages(database_url: str) -> set[int]:
    """Message ids of the chunks that live objects' pieces reference."""

    async def query() -> set[int]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as connection:
                rows = await connection.scalars(
                    select(ChunkCopy.message_id)
                    .join(Piece, Piece.chunk_id == ChunkCopy.chunk_id)
                    .distinct()
                )
                return set(rows)
        finally:
            await engine.dispose()

    return run_async(query)


def upload(service: Service, name: str, data: bytes, outcomes: dict[str, object]) -> None:
    try:
        response = httpx.put(
            f"{service.url}/api/files/{name}", content=data, headers=service.auth, timeout=120
        )
        outcomes[name] = response.status_code
    except httpx.HTTPError as exc:
        outcomes[name] = type(exc).__name__


def test_no_message_outlives_a_kill_9_during_concurrent_uploads(
    start_service: ServiceStarter, telegram_sim: Simulator, database_url: str
) -> None:
    env = {"CHUNK_SIZE": str(CHUNK)}
    before = stored_messages(telegram_sim)  # earlier tests' leftovers, not ours to judge
    key = run_async(lambda: create_api_key(database_url, name="orphans-test"))
    service = start_service(database_url, env=env, tuning=CRASH_TUNING)
    service.key = key
    kept: dict[str, object] = {}
    for index in range(STORED_BEFORE):
        upload(service, f"kept-{index}.bin", payload(3 * CHUNK, seed=index), kept)
    assert set(kept.values()) == {201}, kept

    configure_sim(telegram_sim, latency=SIM_LATENCY)
    try:
        posted = posted_messages(telegram_sim)
        outcomes: dict[str, object] = {}
        threads = [
            threading.Thread(
                target=upload,
                args=(
                    service,
                    f"crashed-{index}.bin",
                    payload(CHUNKS_PER_UPLOAD * CHUNK, seed=100 + index),
                    outcomes,
                ),
            )
            for index in range(UPLOADS)
        ]
        for thread in threads:
            thread.start()
        wait_for(
            lambda: posted_messages(telegram_sim) >= posted + POSTED_BEFORE_KILL,
            within=60,
            what=f"{POSTED_BEFORE_KILL} chunks of the concurrent uploads to be posted",
            proc=service.proc,
        )
        # Sends whose bodies Telegram has whole when the process dies: every
        # bot's next one waits at the simulator's gate until after the kill.
        hold = f"{telegram_sim.url}/_sim/hold/sendDocument"
        httpx.post(hold, timeout=10).raise_for_status()
        wait_for(
            lambda: httpx.get(hold, timeout=10).json()["held"] == len(telegram_sim.tokens),
            within=60,
            what="a send of every bot to be held",
            proc=service.proc,
        )
        os.kill(service.proc.pid, signal.SIGKILL)
        assert service.proc.wait(10) == -signal.SIGKILL
        httpx.post(f"{telegram_sim.url}/_sim/release/sendDocument", timeout=10)
        for thread in threads:
            thread.join(60)
        # Whatever Telegram had whole when the process died is posted by now.
        wait_for(
            lambda: all(bot["calls_in_flight"] == 0 for bot in _bots(telegram_sim)),
            within=30,
            what="the calls in flight at the kill to end",
        )
    finally:
        httpx.post(f"{telegram_sim.url}/_sim/release/sendDocument", timeout=10)
        configure_sim(telegram_sim, latency=0.0)
    assert not any(status == 201 for status in outcomes.values()), outcomes
    left_behind = stored_messages(telegram_sim) - before - referenced_messages(database_url)
    assert left_behind, "the crash left no message behind: the test proves nothing"

    restarted = start_service(database_url, env=env, tuning=CRASH_TUNING)

    wait_for(
        lambda: stored_messages(telegram_sim) - before == referenced_messages(database_url),
        within=60,
        what="the messages no live object references to be deleted",
        proc=restarted.proc,
    )
    listing = httpx.get(f"{restarted.url}/api/files", headers=service.auth, timeout=10).json()
    by_name = {item["file_name"]: item["public_id"] for item in listing["items"]}
    assert sorted(by_name) == ["kept-0.bin", "kept-1.bin"]
    for index in range(STORED_BEFORE):
        body = httpx.get(f"{restarted.url}/f/{by_name[f'kept-{index}.bin']}", timeout=30).content
        assert body == payload(3 * CHUNK, seed=index)


def _bots(sim: Simulator) -> list[dict[str, int]]:
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()
    return list(stats["bots"].values())
