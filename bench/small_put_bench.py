"""Small S3 writes: the service's CPU per 1 KiB PutObject, against a `--baseline`.

A Docker registry and Gitea write small objects all day, so what one costs
the service is their cost per request. This bench runs `teleuploader serve`
(SQLite, or Postgres through pgbouncer with `--postgres`) with its defaults,
the journal and the trash on, in front of the simulator process, and sends
it `--puts` PutObjects of `--size` bytes under new keys from boto3 with its
default configuration (as a new user's client sends them): inline objects,
whose bytes stay in the database and never reach Telegram. Measured: the
service process's CPU (user + system, /proc) per PUT, and the client's wall
time per PUT (boto3's own CPU is in it, on the same CPUs: read it as a
hint).

`--baseline REF` also runs the service at git ref REF (`git archive`, alone on
PYTHONPATH, as `ingest_bench.py --baseline` does), with a database and bots of
its own; given again, another ref beside it. The PUTs go in rounds of
`--round`, to each REF and then to the checkout, so that a busy phase of the
machine hits all; the ratio REF / checkout is printed (above 1: the checkout
costs less).

Each side's idle CPU (its periodic work, measured for `--idle` seconds
before the rounds) is shown, and the CPU per PUT without it: a PUT that
takes longer on a busy machine is otherwise charged more of the idle work.

    .venv/bin/python bench/small_put_bench.py --baseline 578b9bf            # 2,000 PUTs, ~2 min
    .venv/bin/python bench/small_put_bench.py --baseline 578b9bf --baseline 219169b --puts 10000
    .venv/bin/python bench/small_put_bench.py --postgres --baseline 578b9bf
    .venv/bin/python bench/small_put_bench.py --py-spy put.txt   # also profile the checkout

`--py-spy PATH` records the checkout's service with py-spy (`.venv/bin/pip
install py-spy`) during its last round (collapsed stacks if PATH ends in
.txt, speedscope if .json, else a flame graph).

Postgres needs pgbouncer on 127.0.0.1:6432 (`scripts/pgbouncer-test.sh
start`); each side gets a database of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from common import (
    CHAT_ID,
    Broken,
    ServedService,
    cpu_seconds,
    extract,
    free_port,
    parse_size,
    quantity_table,
    run_main,
    served,
    service_env,
    simulator_process,
)
from metadata_bench import database

ACCESS_KEY = "small-put-bench"
SECRET = "small-put-bench-secret-0123456789"
BUCKET = "small"
BOTS_PER_SIDE = 2
WARM_UP_PUTS = 50


@dataclass
class Side:
    name: str
    service: ServedService
    client: Any
    cpus: list[float] = field(default_factory=list)  # service CPU-s per round
    walls: list[float] = field(default_factory=list)  # client seconds per round
    puts: int = 0
    idle_cpu_per_s: float = 0.0  # service CPU-s per second with no request

    def net_cpu_ms_per_put(self) -> float:
        """Without what the service spends idle meanwhile (its periodic
        work: leases, GC, the journal), which a slower client's PUTs would
        otherwise be charged more of."""
        idle = self.idle_cpu_per_s * sum(self.walls)
        return (sum(self.cpus) - idle) / self.puts * 1000

    def put(self, key: str, body: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=body)

    def cpu_ms_per_put(self) -> float:
        return sum(self.cpus) / self.puts * 1000

    def wall_ms_per_put(self) -> float:
        return sum(self.walls) / self.puts * 1000

    def round_spread(self, per_round: int) -> str:
        per_put = [cpu / per_round * 1000 for cpu in self.cpus]
        if len(per_put) < 2:
            return f"{per_put[0]:.3f}"
        return f"{min(per_put):.3f}-{max(per_put):.3f}"


def any_revision_cli() -> list[str]:
    """The CLI of whichever `app` is on PYTHONPATH: the console script names
    app.cli.main, which older revisions (app/cli.py) do not have."""
    entry = (
        "import sys\n"
        "try:\n    from app.cli.main import main\n"
        "except ImportError:\n    from app.cli import main\n"
        "sys.exit(main())"
    )
    return [sys.executable, "-c", entry]


def s3_client(url: str) -> Any:
    """boto3's defaults but the endpoint and credentials: what a new user's
    client sends (its checksums, its signing, its retries)."""
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=2000, help="PUTs per side (2000)")
    parser.add_argument("--round", type=int, default=250, help="PUTs per side per round (250)")
    parser.add_argument("--size", default="1K", help="bytes per object (1K: inline)")
    parser.add_argument(
        "--idle", type=float, default=10.0, help="seconds of idle CPU measured per side (10)"
    )
    parser.add_argument("--postgres", action="store_true", help="Postgres instead of SQLite")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        action="append",
        default=[],
        help="also run the service at this git ref (again for more refs)",
    )
    parser.add_argument("--py-spy", type=Path, metavar="PATH", help="profile the checkout")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args()
    size = parse_size(args.size)
    if args.puts < args.round or args.puts % args.round:
        raise Broken(f"--puts {args.puts} is no multiple of --round {args.round}")
    backend = "postgres" if args.postgres else "sqlite"
    body = os.urandom(size)

    with tempfile.TemporaryDirectory(prefix="small-put-bench-") as temp:
        workdir = Path(temp)
        codes: list[tuple[str, Path | None]] = []
        for n, ref in enumerate(args.baseline):
            codes.append((ref, extract(ref, workdir / f"baseline-code-{n}")))
        codes.append(("checkout", None))
        with (
            simulator_process(workdir, bots=BOTS_PER_SIDE * len(codes), cwd=workdir) as sim,
            contextlib.ExitStack() as stack,
        ):
            sides: list[Side] = []
            for n, (name, code) in enumerate(codes):
                home = workdir / f"side-{n}"
                home.mkdir()
                db = stack.enter_context(database(backend, home))
                # Bots of its own: the journal and snapshots do reach
                # Telegram, and two services on one bot would collide.
                tokens = sim.tokens[n * BOTS_PER_SIDE : (n + 1) * BOTS_PER_SIDE]
                env = service_env(
                    {
                        "BOT_TOKENS": ",".join(tokens),
                        "STORAGE_CHAT_ID": str(CHAT_ID),
                        "TELEGRAM_API_BASE": sim.url,
                        "DATABASE_URL": db.url,
                        "MIGRATION_DATABASE_URL": db.direct_url,
                        "HOST": "127.0.0.1",
                        "PORT": str(free_port()),
                        "S3_CREDENTIALS": f"{ACCESS_KEY}:{SECRET}",
                        "SPOOL_DIR": str(home / "spool"),
                    }
                )
                command = None if code is None else any_revision_cli()
                service = stack.enter_context(served(env, home, command=command, code=code))
                side = Side(name, service, s3_client(service.url))
                side.client.create_bucket(Bucket=BUCKET)
                for i in range(WARM_UP_PUTS):
                    side.put(f"warm/{i}", body)
                sides.append(side)
            for side in sides:
                pid = side.service.process.pid
                idle_before = cpu_seconds(pid)
                time.sleep(args.idle)
                side.idle_cpu_per_s = (cpu_seconds(pid) - idle_before) / args.idle

            rounds = args.puts // args.round
            for number in range(rounds):
                last = number == rounds - 1
                line = f"round {number + 1}/{rounds}:"
                for side in sides:
                    pid = side.service.process.pid
                    spying = None
                    if last and args.py_spy is not None and side is sides[-1]:
                        spying = start_py_spy(pid, args.py_spy)
                    keys = [f"r{number}/{i:06}" for i in range(args.round)]
                    cpu_before, began = cpu_seconds(pid), time.perf_counter()
                    for key in keys:
                        side.put(key, body)
                    side.walls.append(time.perf_counter() - began)
                    side.cpus.append(cpu_seconds(pid) - cpu_before)
                    side.puts += args.round
                    if spying is not None:
                        stop_py_spy(spying, args.py_spy)
                    line += f" {side.name} {side.cpus[-1] / args.round * 1000:.3f} ms"
                print(line, flush=True)

    print(
        f"\n{args.puts} PutObjects of {size} B per side (boto3 defaults, new keys), {backend},"
        f" in rounds of {args.round}; {os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n"
    )
    rows: list[tuple[str, list[object]]] = [
        ("service CPU per PUT (ms)", [f"{s.cpu_ms_per_put():.3f}" for s in sides]),
        ("rounds' spread (ms)", [s.round_spread(args.round) for s in sides]),
        ("idle CPU (ms per s)", [f"{s.idle_cpu_per_s * 1000:.1f}" for s in sides]),
        ("service CPU per PUT net of idle (ms)", [f"{s.net_cpu_ms_per_put():.3f}" for s in sides]),
        ("client wall per PUT (ms)", [f"{s.wall_ms_per_put():.2f}" for s in sides]),
    ]
    print(quantity_table([s.name for s in sides], rows))
    print()
    after = sides[-1]
    for before in sides[:-1]:
        ratio = before.cpu_ms_per_put() / after.cpu_ms_per_put()
        net = before.net_cpu_ms_per_put() / after.net_cpu_ms_per_put()
        print(f"CPU per PUT, {before.name} / checkout: {ratio:.2f}x ({net:.2f}x net of idle)")
    target = 0.8
    verdict = "met" if sides[-1].cpu_ms_per_put() <= target else "NOT met"
    print(f"target: checkout <= {target} ms of service CPU per small PUT: {verdict}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "backend": backend,
                    "size": size,
                    "round": args.round,
                    "sides": {
                        s.name: {"cpus": s.cpus, "walls": s.walls, "puts": s.puts} for s in sides
                    },
                    "cpu_ms_per_put": {s.name: s.cpu_ms_per_put() for s in sides},
                    "net_cpu_ms_per_put": {s.name: s.net_cpu_ms_per_put() for s in sides},
                    "idle_cpu_per_s": {s.name: s.idle_cpu_per_s for s in sides},
                    "median_round_ms": {
                        s.name: statistics.median(s.cpus) / args.round * 1000 for s in sides
                    },
                },
                indent=2,
            )
        )
    return 0


def start_py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise Broken(f"py-spy is not installed next to {sys.executable}: pip install py-spy")
    form = {".json": "speedscope", ".txt": "raw"}.get(out.suffix, "flamegraph")
    command = [str(spy), "record", "--pid", str(pid), "--rate", "500", "--format", form]
    command += ["--threads", "--output", str(out)]
    spying = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the round starts
    return spying


def stop_py_spy(spying: subprocess.Popen[bytes], out: Path) -> None:
    spying.send_signal(2)
    spying.wait(timeout=60)
    print(f"profile written to {out}", flush=True)


if __name__ == "__main__":
    run_main(main)
