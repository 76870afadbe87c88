"""Several instances on one Postgres (issue 12): bots go where the work is.

Three `teleuploader serve` processes share one Postgres database (through
pgbouncer, transaction mode, as in production) and one Telegram simulator
with BOTS bots, one upload at a time per token, UPLOAD_BANDWIDTH bytes/s per
upload connection. The pool's ideal is BOTS x UPLOAD_BANDWIDTH. Printed, side
by side in one run:

1. single: one SIZE upload into one of the 3 instances (the other two idle),
   and the same upload into a lone instance holding the whole pool: each as a
   share of the pool's ideal (issue target >= 0.8 for the first);
2. spread: every instance takes CONCURRENT uploads of SPREAD_SIZE at once:
   goodput as a share of the ideal (target >= 0.9), 429s and the most calls
   one token had in flight at once (collisions: 0 expected);
3. cross reads: every spread file downloaded through the next instance (whose
   bots did not store it), one after another: seconds, and how many chunks
   were read through a forward (a post) instead of the holder's file path;
4. failover: kill -9 of the instance holding bots, then the time until every
   bot is leased again by the survivors (target <= BOT_LEASE_SECONDS + 5 s).

The spread load starts right after the single upload, while the instance that
took it still holds most of the pool: it measures how soon bots follow the
work, as a fleet whose load shifts from one instance to all of them sees it.

``--baseline REF`` first runs all three with the code at git ref REF (its
tree extracted with ``git archive`` and put on PYTHONPATH), then with the
checkout, each on fresh processes and a fresh database, and prints both.

    .venv/bin/python bench/scaleout_bench.py --baseline 2fcada5   # ~4 min

Needs Postgres (127.0.0.1:5432, trust) and pgbouncer (127.0.0.1:6432; start it
with scripts/pgbouncer-test.sh start). A database of its own is created and
dropped. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from common import (
    CHAT_ID,
    REPO,
    MiB,
    SimulatorProcess,
    add_repo_to_path,
    extract,
    free_port,
    run_main,
    running,
    simulator_process,
    teleuploader_command,
    wait_until,
)
from http_bench import service_env

add_repo_to_path()

import asyncpg  # type: ignore[import-untyped]  # noqa: E402

POSTGRES = "postgresql://postgres@127.0.0.1:5432"
PGBOUNCER = "postgresql+asyncpg://postgres@127.0.0.1:6432"


@dataclass
class Instance:
    url: str
    process: subprocess.Popen[bytes]


@contextmanager
def database() -> Iterator[tuple[str, str]]:
    """A fresh database: (DATABASE_URL through pgbouncer, direct URL)."""
    name = f"scaleout_bench_{secrets.token_hex(4)}"

    async def admin(sql: str) -> None:
        connection = await asyncpg.connect(f"{POSTGRES}/postgres")
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PGBOUNCER}/{name}", f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE "{name}" WITH (FORCE)'))


def lease_holders(direct_url: str) -> dict[int, str]:
    """Bot id -> owner of every lease not expired now."""

    async def read() -> dict[int, str]:
        connection = await asyncpg.connect(direct_url.replace("+asyncpg", ""))
        try:
            rows = await connection.fetch(
                "SELECT bot_id, owner FROM bot_leases WHERE expires_at > now()"
            )
        finally:
            await connection.close()
        return {int(row["bot_id"]): str(row["owner"]) for row in rows}

    return asyncio.run(read())


class Fleet:
    def __init__(
        self,
        stack: ExitStack,
        sim: SimulatorProcess,
        db: str,
        workdir: Path,
        args: argparse.Namespace,
        code: Path | None,
    ) -> None:
        """`code`: another revision's tree, put on PYTHONPATH (None: the checkout)."""
        self._stack = stack
        self._sim = sim
        self._db = db
        self._workdir = workdir
        self._args = args
        self._code = code
        self.instances: list[Instance] = []

    def start(self) -> Instance:
        port = free_port()
        index = len(self.instances)
        env = service_env(
            {
                "BOT_TOKENS": ",".join(self._sim.tokens),
                "STORAGE_CHAT_ID": str(CHAT_ID),
                "TELEGRAM_API_BASE": self._sim.url,
                "DATABASE_URL": self._db,
                "HOST": "127.0.0.1",
                "PORT": str(port),
                "SENDS_PER_MINUTE": "0",
                "CHUNK_SIZE": str(self._args.chunk),
                # Revisions before app/config/tuning.py read the lease from here.
                "BOT_LEASE_SECONDS": str(self._args.lease),
                "SPOOL_DIR": str(self._workdir / f"spool-{index}-{port}"),
                "LOG_LEVEL": "WARNING",
                "SHUTDOWN_GRACE_SECONDS": "5",
            }
        )
        env.pop("PYTHONPATH", None)
        tree = self._code if self._code is not None else REPO
        if self._code is not None:
            env["PYTHONPATH"] = str(self._code)
        command = [*teleuploader_command(), "serve"]
        if (tree / "tests" / "serve_tuned.py").exists():
            # The lease is a constructor parameter now (app/config/tuning.py).
            env["PYTHONPATH"] = str(tree)
            tuning = json.dumps({"bot_lease_seconds": self._args.lease})
            command = [sys.executable, "-m", "tests.serve_tuned", tuning]
        log = self._workdir / f"serve-{index}-{port}.log"
        process = self._stack.enter_context(
            running(command, log, env=env, cwd=self._workdir, grace=15)
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(process, f"{url}/ready", log, f"instance {index}")
        instance = Instance(url, process)
        self.instances.append(instance)
        return instance


def upload(url: str, key: str, name: str, size: int, seed: int) -> str:
    """PUT `size` generated bytes; the file's public id. Raises on anything but 201."""
    block = random.Random(seed).randbytes(MiB)

    def body() -> Iterator[bytes]:
        left = size
        while left:
            piece = block[: min(left, MiB)]
            left -= len(piece)
            yield piece

    response = httpx.put(
        f"{url}/api/files/{name}",
        content=body(),
        headers={"Authorization": f"Bearer {key}", "Content-Length": str(size)},
        timeout=3600,
    )
    if response.status_code != 201:
        raise RuntimeError(f"upload {name}: {response.status_code} {response.text[:300]}")
    public_id: str = response.json()["public_id"]
    return public_id


def timed_upload(url: str, key: str, name: str, size: int, seed: int) -> float:
    started = time.monotonic()
    upload(url, key, name, size, seed)
    return time.monotonic() - started


def download(url: str, public_id: str, size: int) -> None:
    with httpx.stream("GET", f"{url}/f/{public_id}", timeout=600) as response:
        if response.status_code != 200:
            raise RuntimeError(f"download {public_id}: {response.status_code}")
        got = sum(len(block) for block in response.iter_bytes())
    if got != size:
        raise RuntimeError(f"download {public_id}: {got} bytes, not {size}")


def concurrent_uploads(jobs: list[tuple[str, str, int]], key: str) -> tuple[float, list[str]]:
    """Wall seconds for all (url, name, size) uploads at once, and their public ids."""
    errors: list[BaseException] = []
    ids = [""] * len(jobs)

    def run(url: str, name: str, size: int, seed: int) -> None:
        try:
            ids[seed] = upload(url, key, name, size, seed)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(*job, seed)) for seed, job in enumerate(jobs)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.monotonic() - started, ids


def create_key(db: str, direct: str, workdir: Path, code: Path | None) -> str:
    env = service_env({"DATABASE_URL": db, "MIGRATION_DATABASE_URL": direct})
    env.pop("PYTHONPATH", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cli = teleuploader_command()
    subprocess.run([*cli, "migrate"], env=env, cwd=workdir, check=True, capture_output=True)
    done = subprocess.run(
        [*cli, "keys", "create", "bench", "--scope", "admin"],
        env=env,
        cwd=workdir,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.split()[0]


def collisions(sim: SimulatorProcess) -> tuple[int, int]:
    """(429s given, the most calls one token had in flight at once)."""
    bots = sim.stats()["bots"].values()
    return (
        sum(int(bot["rate_limited"]) for bot in bots),
        max(int(bot["max_concurrent_calls"]) for bot in bots),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bots", type=int, default=6)
    parser.add_argument("--size", type=int, default=512 * MiB, help="the single upload")
    parser.add_argument("--spread-size", type=int, default=32 * MiB)
    parser.add_argument("--concurrent", type=int, default=2, help="uploads per instance")
    parser.add_argument("--chunk", type=int, default=4 * MiB)
    parser.add_argument("--upload-bandwidth", type=int, default=4 * MiB)
    parser.add_argument("--lease", type=float, default=15.0, help="BOT_LEASE_SECONDS")
    parser.add_argument("--baseline", metavar="REF", help="first run the code at this git ref")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="scaleout-bench-code-") as tmp:
        if args.baseline is not None:
            print(f"== before ({args.baseline})")
            if run(args, extract(args.baseline, Path(tmp))) != 0:
                return 1
            print("== after (this checkout)")
        return run(args, None)


def run(args: argparse.Namespace, code: Path | None) -> int:
    """The three measurements with the checkout's code or with `code`."""
    ideal = args.bots * args.upload_bandwidth
    with tempfile.TemporaryDirectory(prefix="scaleout-bench-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        sim = stack.enter_context(
            simulator_process(
                workdir,
                bots=args.bots,
                args=[
                    "--concurrency-limit",
                    "1",
                    "--upload-bandwidth",
                    str(args.upload_bandwidth),
                ],
                cwd=workdir,
            )
        )
        db, direct = stack.enter_context(database())
        key = create_key(db, direct, workdir, code)
        print(
            f"{args.bots} bots x {args.upload_bandwidth / MiB:.1f} MiB/s = ideal "
            f"{ideal / MiB:.1f} MiB/s; chunks {args.chunk / MiB:.0f} MiB; "
            f"BOT_LEASE_SECONDS={args.lease:g}"
        )

        # 1. The lone instance (the whole pool is its own), then 3 instances.
        fleet = Fleet(stack, sim, db, workdir, args, code)
        lone = fleet.start()
        seconds = timed_upload(lone.url, key, "lone.bin", args.size, 1)
        lone_share = args.size / seconds / ideal
        print(f"single upload, 1 instance:    {seconds:6.1f} s  {lone_share:.2f} x ideal")
        others = [fleet.start(), fleet.start()]
        time.sleep(args.lease / 5 * 2)  # a couple of lease rounds: an idle split
        sim.reset_stats()
        seconds = timed_upload(lone.url, key, "fleet.bin", args.size, 2)
        share = args.size / seconds / ideal
        limited, most = collisions(sim)
        print(
            f"single upload, 1 of 3:        {seconds:6.1f} s  {share:.2f} x ideal "
            f"({share / lone_share:.2f} x the lone instance); 429s {limited}, "
            f"most calls on one token {most}"
        )

        # 2. Spread load.
        sim.reset_stats()
        jobs = [
            (instance.url, f"spread-{i}-{n}.bin", args.spread_size)
            for i, instance in enumerate([lone, *others])
            for n in range(args.concurrent)
        ]
        seconds, ids = concurrent_uploads(jobs, key)
        total = args.spread_size * len(jobs)
        limited, most = collisions(sim)
        print(
            f"spread, {len(jobs)} uploads on 3:      {seconds:6.1f} s  "
            f"{total / seconds / ideal:.2f} x ideal; 429s {limited}, "
            f"most calls on one token {most} (collisions: {max(0, most - 1)})"
        )

        # 3. Cross reads.
        sim.reset_stats()
        instances = [lone, *others]
        started = time.monotonic()
        for n, public_id in enumerate(ids):
            reader = instances[(n // args.concurrent + 1) % len(instances)]
            download(reader.url, public_id, args.spread_size)
        seconds = time.monotonic() - started
        calls = [bot["calls"] for bot in sim.stats()["bots"].values()]
        forwards = sum(int(c.get("forwardMessage", 0)) for c in calls)
        chunks = len(ids) * -(-args.spread_size // args.chunk)
        print(
            f"cross reads, {len(ids)} files:       {seconds:6.1f} s  "
            f"{chunks} chunks, {forwards} read through a forward"
        )

        # 4. Failover: kill -9 an instance holding bots.
        time.sleep(args.lease / 5 * 2)
        holders = lease_holders(direct)
        victim_id = max(set(holders.values()), key=list(holders.values()).count)
        held = sum(1 for owner in holders.values() if owner == victim_id)
        victim = find_instance(direct, victim_id, fleet.instances)
        os.kill(victim.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        victim.process.wait()
        while True:
            holders = lease_holders(direct)
            if len(holders) == args.bots and victim_id not in holders.values():
                break
            if time.monotonic() - killed > args.lease * 4:
                print("failover: the bots were not all taken over", file=sys.stderr)
                return 1
            time.sleep(0.05)
        took = time.monotonic() - killed
        print(
            f"failover: {held} bots of the killed instance, all {args.bots} leased again "
            f"after {took:.1f} s (target <= {args.lease + 5:g} s)"
        )
    return 0


def find_instance(direct: str, instance_id: str, instances: list[Instance]) -> Instance:
    """The running instance registered as `instance_id` (by its pid)."""

    async def read() -> int:
        connection = await asyncpg.connect(direct.replace("+asyncpg", ""))
        try:
            pid = await connection.fetchval("SELECT pid FROM instances WHERE id = $1", instance_id)
        finally:
            await connection.close()
        return int(pid)

    pid = asyncio.run(read())
    for instance in instances:
        if instance.process.pid == pid:
            return instance
    raise RuntimeError(f"no instance with pid {pid}")


if __name__ == "__main__":
    run_main(main)
