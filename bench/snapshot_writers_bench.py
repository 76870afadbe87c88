"""What a large snapshot costs the writers that run beside it: small PUTs
timed while `POST /api/admin/snapshot` reads N objects in one transaction,
against the same PUTs with no snapshot, on SQLite and on Postgres through
pgbouncer (issue 54, item 4).

A snapshot reads every table in one transaction, a consistent view (SQLite's
BEGIN; Postgres's REPEATABLE READ), and encodes and compresses its rows in a
worker thread while that transaction stays open: seconds for 100,000
objects. What that could cost a writer: on SQLite, WAL checkpoints cannot
pass the reader's snapshot while it is open; on Postgres, the transaction
holds one server connection of pgbouncer's pool, and the thread's CPU is
taken from the same process that answers the writers.

One process per backend: the Telegram simulator and the app (`create_app`,
served by uvicorn in this loop) on a database filled with N object rows (as
restore_bench.py fills it). Each round runs `--writers` writers, each doing
sequential 1 KiB PUTs (inline objects: the database is all their work):
once while a snapshot is taken, then as long again with none (the other
order the next round, so that a drift of the machine hits both sides). The
table gives the PUTs' median, 99th percentile and slowest latency, and the
rate, for each side, and the ratios.

    .venv/bin/python bench/snapshot_writers_bench.py --objects 100000
    .venv/bin/python bench/snapshot_writers_bench.py --backends sqlite --objects 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import postgres_database, run_main
from restore_bench import fill

from app.cli.demo import create_api_key
from app.config.settings import BotToken, Settings
from app.db.migrations import upgrade
from app.kit.logging import configure_logging
from app.kit.serving import serve_in_task
from app.runtime.main import create_app
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator

CHAT_ID = -1001000000044
BODY = b"x" * 1024

Latencies = list[float]


async def _writer(http: httpx.AsyncClient, name: str, stop: asyncio.Event) -> Latencies:
    took: Latencies = []
    index = 0
    while not stop.is_set():
        began = time.perf_counter()
        answer = await http.put(f"/api/files/{name}-{index}.txt", content=BODY)
        assert answer.status_code == 201, answer.text
        took.append(time.perf_counter() - began)
        index += 1
    return took


async def _writers_while(
    http: httpx.AsyncClient, writers: int, prefix: str, work: asyncio.Future[None] | float
) -> tuple[Latencies, float]:
    """Latencies of `writers` writers running until `work` is done (or for
    that many seconds), and how long they ran."""
    stop = asyncio.Event()
    began = time.perf_counter()
    tasks = [asyncio.create_task(_writer(http, f"{prefix}-w{n}", stop)) for n in range(writers)]
    if isinstance(work, float):
        await asyncio.sleep(work)
    else:
        await work
    stop.set()
    elapsed = time.perf_counter() - began
    results = await asyncio.gather(*tasks)
    return [latency for result in results for latency in result], elapsed


async def measure(url: str, objects: int, writers: int, rounds: int, work: Path) -> dict[str, Any]:
    await asyncio.to_thread(upgrade, url)
    await fill(url, objects)
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID]))
    sides: dict[str, Latencies] = {"snapshot": [], "none": []}
    seconds = {"snapshot": 0.0, "none": 0.0}
    snapshot_seconds: list[float] = []
    async with run_simulator(sim) as telegram_url:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            bot_tokens=[BotToken.parse(t) for t in sim.tokens],
            storage_chat_id=CHAT_ID,
            telegram_api_base=telegram_url,
            database_url=url,
            sends_per_minute=0,
            # Rounds only when the bench asks (the loops wait an hour first).
            snapshot_interval_seconds=3600,
            journal_seconds=3600,
            scrub_period_seconds=0,
            trash_retention_seconds=0,
            spool_dir=str(work / "spool"),
            log_level="WARNING",
        )
        key = await create_api_key(url, name="bench")
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            serve_in_task(create_app(settings)) as base,
            httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as http,
        ):
            await _writers_while(http, writers, "warm-up", 2.0)
            for round_ in range(rounds):
                order = ("snapshot", "none") if round_ % 2 == 0 else ("none", "snapshot")
                for side in order:
                    prefix = f"{side}-{round_}"
                    if side == "snapshot":
                        taken = asyncio.ensure_future(_snapshot(http))
                        took, elapsed = await _writers_while(http, writers, prefix, taken)
                        snapshot_seconds.append(elapsed)
                    else:
                        # As long as the last snapshot took (the first round
                        # that starts without one: as long as the warm-up's).
                        length = snapshot_seconds[-1] if snapshot_seconds else 5.0
                        took, elapsed = await _writers_while(http, writers, prefix, length)
                    sides[side] += took
                    seconds[side] += elapsed
    return {
        side: {
            "puts": len(took),
            "per_second": len(took) / seconds[side],
            "p50_ms": 1000 * statistics.median(took),
            "p99_ms": 1000 * statistics.quantiles(took, n=100, method="inclusive")[98],
            "max_ms": 1000 * max(took),
        }
        for side, took in sides.items()
    } | {"snapshot_seconds": snapshot_seconds}


async def _snapshot(http: httpx.AsyncClient) -> None:
    answer = await http.post("/api/admin/snapshot")
    assert answer.status_code == 200, answer.text


def run_backend(backend: str, objects: int, writers: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="snapshot-writers-bench-") as directory:
        work = Path(directory)
        if backend == "sqlite":
            url = f"sqlite+aiosqlite:///{work / 'bench.db'}"
            return asyncio.run(measure(url, objects, writers, rounds, work))
        with postgres_database("snapshot_writers") as url:
            return asyncio.run(measure(url, objects, writers, rounds, work))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    configure_logging("WARNING", "console", sys.stderr)
    print(f"{args.objects:,} objects, {args.writers} writers of 1 KiB PUTs, {args.rounds} rounds")
    print(
        "| backend | snapshot s | side | PUTs/s | p50 ms | p99 ms | max ms |"
        "\n|---|---:|---|---:|---:|---:|---:|"
    )
    for backend in args.backends.split(","):
        result = run_backend(backend, args.objects, args.writers, args.rounds)
        taken = ", ".join(f"{s:.1f}" for s in result["snapshot_seconds"])
        for side in ("none", "snapshot"):
            row = result[side]
            print(
                f"| {backend} | {taken} | {side} | {row['per_second']:.0f} "
                f"| {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['max_ms']:.0f} |"
            )
        during, quiet = result["snapshot"], result["none"]
        print(
            f"| {backend} | | snapshot / none | {during['per_second'] / quiet['per_second']:.2f} "
            f"| {during['p50_ms'] / quiet['p50_ms']:.2f} "
            f"| {during['p99_ms'] / quiet['p99_ms']:.2f} | |"
        )
    return 0


if __name__ == "__main__":
    run_main(main)
