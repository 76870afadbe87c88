"""What the journal's triggers cost a write: `--puts` PUTs of 1 KiB (inline:
the database is all the work) through the in-process app, timed with the
journal triggers of migration 0019 and without them, on SQLite and on
Postgres through pgbouncer.

One process per backend: the Telegram simulator and the app (`create_app`,
served by uvicorn in this loop, as the tests run it) on a migrated database
of its own. Rounds alternate: the triggers dropped, then created again as
the migration creates them (and the other way round the next round),
`--rounds` times each, so that a slow phase of
the machine hits both sides; the table gives each side's median and their
ratio. Snapshots are off, so no journal round runs meanwhile: the cost
measured is the triggers' (a journal row per changed row, in the writer's
transaction), not the shipping.

    .venv/bin/python bench/journal_write_bench.py
    .venv/bin/python bench/journal_write_bench.py --backends sqlite --puts 200 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import postgres_database, run_main
from sqlalchemy import text

from app.cli.demo import create_api_key
from app.config.settings import BotToken, Settings
from app.db.engine import create_engine
from app.db.migrations import MIGRATIONS_DIR, upgrade
from app.kit.logging import configure_logging
from app.kit.serving import serve_in_task
from app.runtime.main import create_app
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator

CHAT_ID = -1001000000043
BODY = b"x" * 1024


def _migration() -> Any:
    """Migration 0019, for its trigger statements (the bench drops and
    creates exactly what it creates)."""
    path = MIGRATIONS_DIR / "versions" / "0019_journal.py"
    spec = importlib.util.spec_from_file_location("journal_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _set_triggers(url: str, on: bool) -> None:
    migration = _migration()
    engine = create_engine(url)
    try:
        postgres = engine.dialect.name == "postgresql"
        async with engine.begin() as connection:
            for table, key in migration.JOURNALED.items():
                if postgres:
                    await connection.execute(
                        text(f"DROP TRIGGER IF EXISTS journal_{table} ON {table}")
                    )
                    await connection.execute(text(f"DROP FUNCTION IF EXISTS journal_{table}()"))
                else:
                    for event in ("insert", "update", "delete"):
                        await connection.execute(
                            text(f"DROP TRIGGER IF EXISTS journal_{table}_{event}")
                        )
                if on:
                    triggers = (
                        migration._postgres_triggers if postgres else migration._sqlite_triggers
                    )
                    for statement in triggers(table, key):
                        await connection.execute(text(statement))
            await connection.execute(text("DELETE FROM journal"))
    finally:
        await engine.dispose()


async def _puts(base: str, key: str, puts: int, prefix: str) -> float:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
        began = time.perf_counter()
        for index in range(puts):
            answer = await http.put(f"/api/files/{prefix}-{index}.txt", content=BODY)
            assert answer.status_code == 201, answer.text
        return time.perf_counter() - began


async def measure(url: str, puts: int, rounds: int, work: Path) -> dict[str, list[float]]:
    await asyncio.to_thread(upgrade, url)
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID]))
    times: dict[str, list[float]] = {"without": [], "with": []}
    async with run_simulator(sim) as telegram_url:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            bot_tokens=[BotToken.parse(t) for t in sim.tokens],
            storage_chat_id=CHAT_ID,
            telegram_api_base=telegram_url,
            database_url=url,
            sends_per_minute=0,
            snapshot_interval_seconds=0,
            scrub_period_seconds=0,
            trash_retention_seconds=0,
            spool_dir=str(work / "spool"),
            log_level="WARNING",
        )
        key = await create_api_key(url, name="bench")
        async with serve_in_task(create_app(settings)) as base:
            await _puts(base, key, 50, "warm-up")
            for round_ in range(rounds):
                # ABBA: a drift of the machine within a round hits both sides.
                order = ("without", "with") if round_ % 2 == 0 else ("with", "without")
                for side in order:
                    await _set_triggers(url, side == "with")
                    times[side].append(await _puts(base, key, puts, f"{side}-{round_}"))
    return times


def run_backend(backend: str, puts: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="journal-write-bench-") as directory:
        work = Path(directory)
        if backend == "sqlite":
            return asyncio.run(measure(f"sqlite:///{work / 'bench.db'}", puts, rounds, work))
        with postgres_database("journal_write") as url:
            return asyncio.run(measure(url, puts, rounds, work))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--puts", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    configure_logging("WARNING", "console", sys.stderr)
    print(f"| backend | {args.puts} PUTs without triggers, s | with, s | with / without |")
    print("|---|---:|---:|---:|")
    for backend in args.backends.split(","):
        times = run_backend(backend, args.puts, args.rounds)
        without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
        print(f"| {backend} | {without:.2f} | {with_:.2f} | {with_ / without:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
