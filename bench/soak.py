"""Ten minutes of mixed clients against one service: RSS stays flat, errors are
counted by status, and no Telegram message is left behind.

One `teleuploader serve` (SQLite, S3 API on) in front of the Telegram simulator
process, which injects faults into a share of the calls (5 % by default: 5xx,
429 and dropped connections). For `--minutes` these clients run at once:

- uploaders: native PUT and multipart POST of sizes from 2 KiB (inline) to
  several chunks, each body a deterministic pattern so that any range of it
  can be checked later without keeping it;
- readers: ranged and whole GETs of uploaded files, every byte compared;
- S3 clients: boto3 with its default configuration (multipart above 8 MiB),
  put, ranged get and delete;
- a deleter: removes native files, after giving readers time to finish
  the ones already started.

Printed: the service's RSS per minute, the mean and the peak of one reading a
second (target: each within 10 % of the first minute after the warm-up), every
answer by operation and status, wrong bytes (must be 0) and, once the clients
have stopped and the garbage collector has drained, the leak count: messages
the simulator still stores minus the chunks that live objects reference (must
be 0).

    .venv/bin/python bench/soak.py                 # 10 minutes
    .venv/bin/python bench/soak.py --minutes 2     # a quick look
    .venv/bin/python bench/soak.py --minutes 30 --replicas 2 --chats 2 --encryption

The service's settings come from the options alone (the caller's shell is
dropped): --replicas, --chats, --encryption, --journal-seconds, --postgres,
--env KEY=VALUE (also for the process's own, e.g. MALLOC_ARENA_MAX), and
--baseline REF serves the code at a git ref, for a "before" run. With
--tracemalloc DIR the service traces its allocations and writes the sites
that grew most since minute 1, each minute (bench/soak_setup.py).

Numbers are printed, never asserted; the exit status is 1 when a target that
is not a timing (wrong bytes, leaks) fails.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import io
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import httpx
import soak_setup
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError
from common import (
    Broken,
    GiB,
    SimulatorProcess,
    cpu_seconds,
    extract,
    free_port,
    rss_bytes,
    run_main,
    served,
    service_env,
    simulator_process,
)

KiB = 1024
MiB = 1024 * KiB
BLOCK = 256 * KiB
S3_ACCESS_KEY = "soakaccesskey"
S3_SECRET = "soak-secret-key-0123456789"
BUCKET = "soak"
# Native upload sizes: inline, one small chunk, several chunks.
NATIVE_SIZES = (2 * KiB, 200 * KiB, 3 * MiB, 9 * MiB)
# S3 objects: above boto3's 8 MiB multipart threshold, so they go as 2 parts.
S3_SIZE = 12 * MiB
# Between two uploads of one client. The simulator keeps every file it was
# sent in memory (deleted ones too), so the pace bounds its size: about
# 4 GiB over 10 minutes.
THINK_SECONDS = 3.0
# A deleted file may still be read by a reader that picked it just before.
DELETE_GRACE = 20.0
# Minutes before the reference minute (the target: within 10 % of
# minute 5); a run of 6 minutes or fewer compares with minute 2.
WARM_UP_MINUTES = 4
SHORT_WARM_UP_MINUTES = 1


# --- deterministic bodies ------------------------------------------------------------------


_BASE = random.Random(20261130).randbytes(BLOCK)


def _block(seed: int, index: int) -> bytes:
    stamp = f"{seed}:{index}:".encode()
    return stamp + _BASE[len(stamp) :]


def body_range(seed: int, size: int, start: int, end: int) -> bytes:
    """Bytes start..end (inclusive) of the body (seed, size)."""
    end = min(end, size - 1)
    first, last = start // BLOCK, end // BLOCK
    data = b"".join(_block(seed, i) for i in range(first, last + 1))
    return data[start - first * BLOCK : end - first * BLOCK + 1]


def body_pieces(seed: int, size: int) -> Iterator[bytes]:
    for index in range(-(-size // BLOCK)):
        yield _block(seed, index)[: min(BLOCK, size - index * BLOCK)]


async def _stream(seed: int, size: int) -> AsyncIterator[bytes]:
    for piece in body_pieces(seed, size):
        yield piece


class _PatternFile(io.RawIOBase):
    """A readable file of the body (seed, size), for boto3's upload_fileobj."""

    def __init__(self, seed: int, size: int) -> None:
        self._seed, self._size, self._position = seed, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._position >= self._size:
            return 0
        data = body_range(self._seed, self._size, self._position, self._position + len(buffer) - 1)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


# --- what the clients saw ------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    public_id: str
    seed: int
    size: int


@dataclass
class Tally:
    answers: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    wrong_bytes: int = 0
    uploaded_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, operation: str, status: int | str) -> None:
        with self.lock:
            self.answers[(operation, str(status))] += 1


@dataclass
class Pool:
    """Native files readers may pick; the deleter takes them out first."""

    files: list[Stored] = field(default_factory=list)

    def pick(self, rng: random.Random) -> Stored | None:
        return rng.choice(self.files) if self.files else None


# --- clients -------------------------------------------------------------------------------


async def uploader(
    http: httpx.AsyncClient, key: str, pool: Pool, tally: Tally, n: int, stop: float
) -> None:
    rng = random.Random(1000 + n)
    count = 0
    while time.monotonic() < stop:
        count += 1
        seed = n * 1_000_000 + count
        size = rng.choice(NATIVE_SIZES)
        name = f"soak-{n}-{count}.bin"
        headers = {"Authorization": f"Bearer {key}"}
        try:
            if count % 2:
                headers["Content-Length"] = str(size)
                response = await http.put(
                    f"/api/files/{name}", content=_stream(seed, size), headers=headers
                )
            else:
                response = await http.post(
                    "/api/upload",
                    files={"file": (name, b"".join(body_pieces(seed, size)))},
                    headers=headers,
                )
        except httpx.HTTPError as exc:
            tally.count("upload", type(exc).__name__)
            continue
        tally.count("upload", response.status_code)
        if response.status_code == 201:
            pool.files.append(Stored(response.json()["public_id"], seed, size))
            tally.uploaded_bytes += size
        await asyncio.sleep(THINK_SECONDS)


async def reader(http: httpx.AsyncClient, pool: Pool, tally: Tally, n: int, stop: float) -> None:
    rng = random.Random(2000 + n)
    while time.monotonic() < stop:
        stored = pool.pick(rng)
        if stored is None:
            await asyncio.sleep(0.2)
            continue
        start = rng.randrange(stored.size)
        end = rng.randrange(start, stored.size)
        whole = rng.random() < 0.3
        headers = {} if whole else {"Range": f"bytes={start}-{end}"}
        if whole:
            start, end = 0, stored.size - 1
        try:
            response = await http.get(f"/f/{stored.public_id}", headers=headers)
        except httpx.HTTPError as exc:
            tally.count("download", type(exc).__name__)
            continue
        tally.count("download", response.status_code)
        if response.status_code in (200, 206) and response.content != body_range(
            stored.seed, stored.size, start, end
        ):
            tally.wrong_bytes += 1


async def deleter(http: httpx.AsyncClient, key: str, pool: Pool, tally: Tally, stop: float) -> None:
    rng = random.Random(3000)
    doomed: list[tuple[float, Stored]] = []
    while time.monotonic() < stop or doomed:
        await asyncio.sleep(1.0)
        if time.monotonic() < stop and len(pool.files) > 20 and rng.random() < 0.5:
            victim = pool.files.pop(rng.randrange(len(pool.files)))
            doomed.append((time.monotonic() + DELETE_GRACE, victim))
        while doomed and doomed[0][0] <= time.monotonic():
            _, victim = doomed.pop(0)
            try:
                response = await http.delete(
                    f"/api/files/{victim.public_id}", headers={"Authorization": f"Bearer {key}"}
                )
                tally.count("delete", response.status_code)
            except httpx.HTTPError as exc:
                tally.count("delete", type(exc).__name__)


def s3_client_loop(url: str, tally: Tally, n: int, stop: float) -> None:
    """boto3 with its defaults, in a thread: put (multipart), ranged get, delete."""
    s3 = boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
        config=BotoConfig(s3={"addressing_style": "path"}),
    )
    rng = random.Random(4000 + n)
    count = 0
    while time.monotonic() < stop:
        count += 1
        seed = 50_000_000 + n * 1_000_000 + count
        key = f"s3-{n}/{count}.bin"
        try:
            s3.upload_fileobj(_PatternFile(seed, S3_SIZE), BUCKET, key)
            tally.count("s3_put", 200)
            tally.uploaded_bytes += S3_SIZE
            start = rng.randrange(S3_SIZE)
            end = min(S3_SIZE - 1, start + rng.randrange(4 * MiB))
            got = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end}")
            tally.count("s3_get", got["ResponseMetadata"]["HTTPStatusCode"])
            if got["Body"].read() != body_range(seed, S3_SIZE, start, end):
                tally.wrong_bytes += 1
            if count % 2 == 0:
                s3.delete_object(Bucket=BUCKET, Key=key)
                tally.count("s3_delete", 204)
            time.sleep(THINK_SECONDS)
        except ClientError as exc:
            tally.count("s3", exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?"))
        except Exception as exc:  # a soak counts every kind of failure
            tally.count("s3", type(exc).__name__)


# --- the service and its database ----------------------------------------------------------


@dataclass(frozen=True)
class Service:
    url: str
    key: str
    pid: int
    database: soak_setup.Database


@contextlib.contextmanager
def service(sim: SimulatorProcess, workdir: Path, args: argparse.Namespace) -> Iterator[Service]:
    code = extract(args.baseline, workdir / "baseline-code") if args.baseline else None
    serve_env = {}
    if args.tracemalloc is not None:
        serve_env = soak_setup.tracemalloc_env(args.tracemalloc.resolve(), code)
    with soak_setup.database(args, workdir) as database:
        env = service_env(
            {
                "BOT_TOKENS": ",".join(sim.tokens),
                "TELEGRAM_API_BASE": sim.url,
                "DATABASE_URL": database.url,
                "HOST": "127.0.0.1",
                "PORT": str(free_port()),
                "CHUNK_SIZE": str(args.chunk_mib * MiB),
                "SENDS_PER_MINUTE": "0",
                "S3_CREDENTIALS": f"{S3_ACCESS_KEY}:{S3_SECRET}",
                "LOG_LEVEL": "WARNING",
                "SPOOL_DIR": str(workdir / "spool"),
                **soak_setup.settings(args),
            }
        )
        with served(env, workdir, code=code, serve_env=serve_env) as running_service:
            yield Service(
                url=running_service.url,
                key=running_service.key,
                pid=running_service.process.pid,
                database=database,
            )


# --- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MinuteRss:
    mean: float  # MiB
    peak: float  # MiB


async def soak(
    svc: Service, sim: SimulatorProcess, args: argparse.Namespace
) -> tuple[Tally, list[MinuteRss], float]:
    tally, pool = Tally(), Pool()
    stop = time.monotonic() + args.minutes * 60
    rss: list[MinuteRss] = []
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=svc.url, timeout=300, limits=limits) as http:
        await asyncio.to_thread(_create_bucket, svc.url)

        async def sample() -> None:
            """RSS every second; per minute its mean and its peak (a single
            reading swings with the buffers in use at that instant)."""
            for _ in range(args.minutes):
                readings = []
                for _ in range(60):
                    await asyncio.sleep(1.0)
                    _require_simulator(sim, len(rss) + 1, tally)
                    readings.append(rss_bytes(svc.pid) / MiB)
                rss.append(MinuteRss(sum(readings) / len(readings), max(readings)))
                print(
                    f"   minute {len(rss)}: RSS mean {rss[-1].mean:.0f} MiB, peak "
                    f"{rss[-1].peak:.0f} MiB, {tally.uploaded_bytes / MiB:.0f} MiB uploaded, "
                    f"load average {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                    flush=True,
                )

        cpu_before = cpu_seconds(svc.pid)
        tasks = [
            *(uploader(http, svc.key, pool, tally, n, stop) for n in range(args.uploaders)),
            *(reader(http, pool, tally, n, stop) for n in range(args.readers)),
            deleter(http, svc.key, pool, tally, stop),
            *(
                asyncio.to_thread(s3_client_loop, svc.url, tally, n, stop)
                for n in range(args.s3_clients)
            ),
            sample(),
        ]
        await asyncio.gather(*tasks)
        cpu = cpu_seconds(svc.pid) - cpu_before
    return tally, rss, cpu


def _require_simulator(sim: SimulatorProcess, minute: int, tally: Tally) -> None:
    """A run whose Telegram died measures a service with nowhere to send
    (its spool filling): it stops there, loudly. The simulator holds every
    file it was sent in memory, deleted ones too, and the kernel's OOM
    killer takes it first: at a quiet machine's pace (about 0.5 GiB a
    minute, each chunk twice with --replicas 2) a 24 GB machine is full
    after about 20 minutes (2026-12-07). Fewer --uploaders and --s3-clients
    keep a longer run within memory."""
    code = sim.process.poll()
    if code is not None:
        raise Broken(
            f"the simulator exited ({code}) in minute {minute}, after "
            f"{tally.uploaded_bytes / GiB:.1f} GiB uploaded: its memory holds every file "
            "sent; run fewer --uploaders/--s3-clients or fewer --minutes"
        )


def _create_bucket(url: str) -> None:
    boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    ).create_bucket(Bucket=BUCKET)


def drain(svc: Service, sim: SimulatorProcess, limit: float) -> tuple[int, int, int]:
    """Wait until the GC has nothing left, reconciliations included (or
    `limit` s); then (stored messages, referenced chunks, backlog)."""
    started = time.monotonic()
    while soak_setup.garbage_backlog(svc.database) and time.monotonic() < started + limit:
        time.sleep(1.0)
    print(f"drained in {time.monotonic() - started:.0f} s (limit {limit:.0f} s)")
    stored = sum(int(chat["live_messages"]) for chat in sim.stats()["chats"].values())
    return (
        stored,
        soak_setup.referenced_messages(svc.database),
        soak_setup.garbage_backlog(svc.database),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--bots", type=int, default=6)
    parser.add_argument("--bandwidth", type=float, default=8, help="MiB/s per connection")
    parser.add_argument("--chunk-mib", type=int, default=4, help="CHUNK_SIZE of the service")
    parser.add_argument("--fault-rate", type=float, default=0.05, help="share of faulty calls")
    parser.add_argument("--uploaders", type=int, default=4)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--s3-clients", type=int, default=2)
    # A chat marked for reconciliation in the last minute is cleared by a
    # round at least a minute later (LATE_POSTS_ALLOWANCE), at a sweep (every
    # minute): up to three minutes, and the GC's deletions after.
    parser.add_argument("--drain-seconds", type=float, default=300)
    parser.add_argument(
        "--keep", metavar="DIR", type=Path, help="copy the database and logs into DIR (new)"
    )
    soak_setup.add_options(parser)
    args = parser.parse_args(argv)
    # The injected faults, split as the issue measured them: mostly 5xx.
    fault_args = [
        "--fault-5xx-rate",
        str(args.fault_rate * 0.6),
        "--fault-429-rate",
        str(args.fault_rate * 0.2),
        "--fault-drop-rate",
        str(args.fault_rate * 0.2),
        "--seed",
        "7",
    ]
    sim_args = [
        "--concurrency-limit",
        "1",
        "--upload-bandwidth",
        str(int(args.bandwidth * MiB)),
        *fault_args,
        *soak_setup.simulator_chat_args(args),
    ]
    with tempfile.TemporaryDirectory(prefix="soak-") as directory:
        workdir = Path(directory)
        with (
            simulator_process(workdir, bots=args.bots, args=sim_args) as sim,
            service(sim, workdir, args) as svc,
        ):
            print(
                f"== soak: {args.minutes} min, {args.fault_rate:.0%} faults, "
                f"{soak_setup.describe(args)}, load average {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
            )
            tally, rss, cpu = asyncio.run(soak(svc, sim, args))
            load = os.getloadavg()
            sim.configure(fault_5xx_rate=0.0, fault_429_rate=0.0, fault_drop_rate=0.0)
            stored, referenced, backlog = drain(svc, sim, args.drain_seconds)
            print(f"unreferenced messages, possible causes: {soak_setup.leftovers(svc.database)}")
            for line in soak_setup.unreferenced(svc.database, sim.messages())[:50]:
                print(f"  {line}")
            max_calls = soak_setup.most_calls_per_lane(sim.stats()["bots"])
        if args.keep is not None:
            # After the service stopped: its database is whole, its log complete.
            shutil.copytree(
                workdir, args.keep, ignore=shutil.ignore_patterns("spool", "baseline-code")
            )
            print(f"kept the database and logs in {args.keep}")
    print(f"load average at the end of the clients: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    if args.tracemalloc is not None:
        print(soak_setup.tracemalloc_report(args.tracemalloc))
    return report(args, tally, rss, cpu, stored, referenced, backlog, max_calls)


def report(
    args: argparse.Namespace,
    tally: Tally,
    rss: list[MinuteRss],
    cpu: float,
    stored: int,
    referenced: int,
    backlog: int,
    max_calls: int,
) -> int:
    print(
        f"\n{args.minutes} min, {args.bots} bots at {args.bandwidth:g} MiB/s, CHUNK_SIZE "
        f"{args.chunk_mib} MiB, {args.fault_rate:.0%} of calls faulty, "
        f"{soak_setup.describe(args)}; "
        f"{tally.uploaded_bytes / MiB:.0f} MiB uploaded, service CPU {cpu:.0f} s\n"
    )
    print("| minute | RSS mean (MiB) | RSS peak (MiB) |")
    print("|---:|---:|---:|")
    for minute, value in enumerate(rss, start=1):
        print(f"| {minute} | {value.mean:.0f} | {value.peak:.0f} |")
    warm_up = WARM_UP_MINUTES if len(rss) > WARM_UP_MINUTES + 2 else SHORT_WARM_UP_MINUTES
    after = rss[warm_up:]
    if len(after) >= 2:
        for label, values in (
            ("mean", [m.mean for m in after]),
            ("peak", [m.peak for m in after]),
        ):
            reference = values[0]
            flat = max(abs(v - reference) for v in values) / reference
            print(
                f"RSS {label} per minute after warm-up: {min(values):.0f}-{max(values):.0f} MiB, "
                f"largest deviation from minute {warm_up + 1}: {flat:.1%} "
                "(target <= 10 %)"
            )
    print("\n| operation | status | count |")
    print("|---|---|---:|")
    for (operation, status), count in sorted(tally.answers.items()):
        print(f"| {operation} | {status} | {count} |")
    leaks = stored - referenced
    print(
        f"\nwrong bytes: {tally.wrong_bytes} (target 0); most calls of one lane in flight on one "
        "token: "
        f"{max_calls} (target 1)\nTelegram messages stored: {stored}, chunks and metadata "
        "messages referenced: "
        f"{referenced}, GC backlog left: {backlog}; leaked messages: {leaks} (target 0)"
    )
    return 0 if tally.wrong_bytes == 0 and leaks == 0 and max_calls <= 1 else 1


if __name__ == "__main__":
    run_main(main)
