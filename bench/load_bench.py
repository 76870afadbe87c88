"""Many concurrent uploads, one memory budget: RSS and goodput against the pool.

For each client count, a fresh `teleuploader serve` (SQLite) in front of the
Telegram simulator process takes that many concurrent PUTs of SIZE bytes each.
Printed per row:

- RSS growth: the service's peak VmRSS during the uploads minus its idle RSS
  just before; the target is at most UPLOAD_BUFFER_CHUNKS x CHUNK_SIZE + 16 MiB,
  whatever the number of clients;
- goodput: total bytes / wall time, as a share of the pool's ideal (bots x the
  simulator's per-connection upload bandwidth); target >= 0.9;
- whether every upload was stored byte-exact (the SHA-256 the service reports
  against the client's own), 429s, and the most calls one token had at once.

`--teleuploader` runs another checkout's service (its `.venv/bin/teleuploader`)
with the same simulator and clients, to measure code before a change side by
side with this one. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from common import (
    CHAT_ID,
    SimulatorProcess,
    free_port,
    run_main,
    served,
    simulator_process,
    teleuploader_command,
)
from http_bench import MemoryWatch, service_env

MiB = 1024 * 1024
BLOCK = MiB
RSS_SLACK = 16 * MiB


@dataclass(frozen=True)
class Row:
    label: str
    clients: int
    rss_growth: int
    budget: int
    goodput_of_ideal: float
    wall: float
    exact: int
    failed: int
    rate_limited: int
    max_calls_per_token: int

    @property
    def rss_target_met(self) -> bool:
        return self.rss_growth <= self.budget + RSS_SLACK


def body(client: int, size: int, seed_block: bytes) -> tuple[Iterator[bytes], str]:
    """Cheap distinct bytes per client: a shared random block, each copy
    stamped with (client, block index); and their SHA-256."""
    digest = hashlib.sha256()
    blocks = []
    for index in range(-(-size // BLOCK)):
        length = min(BLOCK, size - index * BLOCK)
        stamp = f"{client}:{index}:".encode()
        block = stamp + seed_block[len(stamp) : length]
        digest.update(block)
        blocks.append(index)

    def generate() -> Iterator[bytes]:
        for index in blocks:
            length = min(BLOCK, size - index * BLOCK)
            stamp = f"{client}:{index}:".encode()
            yield stamp + seed_block[len(stamp) : length]

    return generate(), digest.hexdigest()


async def stream(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


@contextlib.contextmanager
def service(
    command: list[str], sim: SimulatorProcess, workdir: Path, args: argparse.Namespace
) -> Iterator[tuple[str, str, int]]:
    env = service_env(
        {
            "BOT_TOKENS": ",".join(sim.tokens),
            "STORAGE_CHAT_ID": str(CHAT_ID),
            "TELEGRAM_API_BASE": sim.url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'load.db'}",
            "HOST": "127.0.0.1",
            "PORT": str(free_port()),
            "CHUNK_SIZE": str(int(args.chunk_mib * MiB)),
            "SENDS_PER_MINUTE": "0",
            "LOG_LEVEL": "WARNING",
            "SPOOL_DIR": str(workdir / "spool"),
        }
    )
    with served(env, workdir, command=command) as running_service:
        yield running_service.url, running_service.key, running_service.process.pid


async def upload_all(url: str, key: str, clients: int, size: int) -> tuple[float, int, int]:
    seed_block = random.Random(7).randbytes(BLOCK)
    bodies = [body(n, size, seed_block) for n in range(clients)]
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:

        async def one(n: int) -> bool:
            pieces, digest = bodies[n]
            response = await http.put(
                f"/api/files/load-{n}.bin",
                content=stream(pieces),
                headers={"Authorization": f"Bearer {key}", "Content-Length": str(size)},
            )
            return response.status_code == 201 and response.json()["sha256"] == digest

        started = time.perf_counter()
        results = await asyncio.gather(*(one(n) for n in range(clients)), return_exceptions=True)
        wall = time.perf_counter() - started
    exact = sum(1 for r in results if r is True)
    return wall, exact, clients - exact


def measure(
    label: str, command: list[str], sim: SimulatorProcess, clients: int, args: argparse.Namespace
) -> Row:
    size = int(args.size_mib * MiB)
    chunk = int(args.chunk_mib * MiB)
    with (
        tempfile.TemporaryDirectory(prefix="load-bench-") as directory,
        service(command, sim, Path(directory), args) as (url, key, pid),
    ):
        sim.reset_stats()
        time.sleep(1.0)
        with MemoryWatch(pid) as watch:
            watch.begin()
            wall, exact, failed = asyncio.run(upload_all(url, key, clients, size))
            memory = watch.end()
        stats = sim.stats()
    bots = stats["bots"].values()
    ideal = clients * size / (args.bots * args.bandwidth * MiB)
    return Row(
        label=label,
        clients=clients,
        rss_growth=memory.peak - memory.start_rss,
        budget=(2 * args.bots + 2) * chunk,
        goodput_of_ideal=ideal / wall,
        wall=wall,
        exact=exact,
        failed=failed,
        rate_limited=sum(int(b["rate_limited"]) for b in bots),
        max_calls_per_token=max(int(b["max_concurrent_calls"]) for b in bots),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="12,50", help="comma-separated client counts")
    parser.add_argument("--size-mib", type=float, default=64)
    parser.add_argument("--chunk-mib", type=float, default=8)
    parser.add_argument("--bots", type=int, default=6)
    parser.add_argument("--bandwidth", type=float, default=8, help="MiB/s per connection")
    parser.add_argument(
        "--teleuploader",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also measure another checkout's teleuploader script (e.g. before=../old/...)",
    )
    args = parser.parse_args(argv)
    contenders = [("this checkout", teleuploader_command())]
    for entry in args.teleuploader:
        label, _, path = entry.partition("=")
        contenders.append((label, [path]))
    counts = [int(c) for c in args.clients.split(",")]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="load-sim-") as directory:
        sim_args = [
            "--concurrency-limit",
            "1",
            "--upload-bandwidth",
            str(int(args.bandwidth * MiB)),
        ]
        with simulator_process(Path(directory), bots=args.bots, args=sim_args) as sim:
            for clients in counts:
                for label, command in contenders:
                    print(f"== {label}: {clients} clients", file=sys.stderr, flush=True)
                    rows.append(measure(label, command, sim, clients, args))
    print(
        f"\n{args.size_mib:g} MiB per upload, CHUNK_SIZE {args.chunk_mib:g} MiB, "
        f"{args.bots} bots at {args.bandwidth:g} MiB/s; budget = (2 x bots + 2) x CHUNK_SIZE; "
        f"targets: RSS growth <= budget + 16 MiB, goodput >= 0.9 x ideal\n"
    )
    print(
        "| code | clients | RSS growth (MiB) | budget + 16 (MiB) | RSS target | goodput / ideal "
        "| wall (s) | byte-exact | failed | 429s | max calls / token |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.label} | {r.clients} | {r.rss_growth / MiB:.0f} | "
            f"{(r.budget + RSS_SLACK) / MiB:.0f} | {'met' if r.rss_target_met else 'NOT met'} | "
            f"{r.goodput_of_ideal:.2f} | {r.wall:.1f} | {r.exact}/{r.clients} | {r.failed} | "
            f"{r.rate_limited} | {r.max_calls_per_token} |"
        )
    return 0 if all(r.failed == 0 for r in rows) else 1


if __name__ == "__main__":
    run_main(main)
