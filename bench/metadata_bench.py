"""Metadata at scale: what listings and small objects cost as a bucket grows.

Everything runs as separate processes, as in production: the Telegram Bot API
simulator (``teleuploader telegram-sim``, idle here: every object is small
enough to live in the database), the service (``teleuploader serve``) on a
fresh SQLite database or a fresh Postgres database behind pgbouncer, and the
clients (boto3 and signed raw requests) in this process.

For each backend and each spread of keys (``--prefixes``, 100 and 10,000
"folders"), the bucket grows through ``--sizes`` (1,000, 10,000 and 100,000
objects). Objects are bulk-inserted straight into the database (2 KiB of
inline data each, keys ``dNNNNN/oNNNNNNN`` spread evenly over the folders),
and a tenth as many multipart uploads (``dNNNNN/uNNNNNNN``) over the same
folders. At each size:

- ``delimiter page``: ``ListObjectsV2(Delimiter="/")``, one page (up to 1,000
  entries), median of several;
- ``prefix 1,000``: ``ListObjectsV2(Prefix="d", MaxKeys=1000)``, 1,000 keys;
- ``uploads page``: ``ListMultipartUploads(Delimiter="/")``, one page;
- ``PUT/s``: ``--ops`` PutObjects of 2 KiB through the real S3 API from 8
  client threads (boto3), and the service's CPU per PUT;
- ``re-PUT``: the service's CPU per PutObject of 2 KiB over each of those
  objects (a registry rewrites its small link files on every push);
- ``GET`` and ``HEAD``: the service's CPU per GetObject and per HeadObject of
  those objects (8 threads).

Listing times are wall time of a signed request until the last byte of the
answer, over a kept-alive connection (no XML parsing: the service's time, not
the client's). CPU is the service process's own user + system time from
/proc/<pid>/stat over the phase, divided by the requests: client CPU is in
this process and not counted.

The small requests run twice at each size (``--cpus both``, the default),
each placement first in turn: once with the service on a CPU of its own and
the load on the others (``own``), once with every process free to run
anywhere (``shared``). The 8 boto3 threads spend several times the service's
CPU per request; sharing its CPU they evict its caches and cut into its time
slices between requests: its CPU per request was 7-25 % higher (medians of
side-by-side pairs) on the 2-CPU machine of the fourteenth round. ``own`` is
what the service itself costs a request, as when its clients are other
machines; ``shared`` is what it costs on a machine as loaded as this bench
makes it. Both tables are printed, with the issue's targets marked on each.
Postgres, pgbouncer and the simulator are left where the system puts them.

``--baseline REF`` first measures the code at git ref REF (its tree extracted
with ``git archive`` into the work dir and put first on PYTHONPATH), then the
checkout, on identical data, so both columns come from one run on one
machine; the table prints before, after and their ratio. A baseline older
than the delimiter support of ListMultipartUploads lists uploads flat (up to
1,000 of them) instead.

    .venv/bin/python bench/metadata_bench.py --baseline e67152b   # the full curve, ~25 min
    .venv/bin/python bench/metadata_bench.py --small              # < 1 min

The run starts with the machine's floor: a do-nothing ASGI app
(``bench/floor_app.py``) under uvicorn as ``serve`` runs it, measured with the
same GET and HEAD load, in each placement. It needs no database and checks no signature, so it
shows what one small request costs on this machine before any of our code
runs: per-request CPU moved by 2x between the machines these numbers were
taken on, and the floor moved with it.

Exit status 1 only when something is broken (a process did not start, a
request failed or answered wrongly); the numbers are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config as BotoConfig
from botocore.credentials import Credentials
from common import (
    CHAT_ID,
    REPO,
    Broken,
    KiB,
    bench_app_command,
    extract,
    free_port,
    run_main,
    running,
    served,
    simulator_process,
    wait_until,
)

ACCESS_KEY = "metadata-bench"
SECRET = "metadata-bench-secret-0123456789"
BUCKET = "bench"
OBJECT_SIZE = 2 * KiB
CLIENT_THREADS = 8
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
POSTGRES_DIRECT = "postgresql://postgres@127.0.0.1:5432/{name}"
POSTGRES_POOLED = "postgresql://postgres@127.0.0.1:6432/{name}"
# Targets from issue 13.
TARGETS = {
    "delimiter_ms": 50.0,
    "prefix_ms": 30.0,
    "uploads_ms": 50.0,
    "versions_ms": 30.0,
    "cpu_put_ms": 1.0,
    "cpu_reput_ms": 1.0,
    "cpu_get_ms": 0.5,
    "cpu_head_ms": 0.5,
}


@dataclass
class Config:
    backends: list[str]
    prefixes: list[int]
    sizes: list[int]
    ops: int
    repeats: int
    baseline: str | None
    workdir: Path | None
    json_path: Path | None
    log_level: str
    placements: list[str]


def parse_args(argv: list[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", help="sqlite and/or postgres (both; SQLite if --small)")
    parser.add_argument("--prefixes", help="folders the keys spread over (100,10000)")
    parser.add_argument("--sizes", help="bucket sizes in objects (1000,10000,100000)")
    parser.add_argument("--ops", type=int, help="PUTs, GETs and HEADs per size (400)")
    parser.add_argument("--repeats", type=int, help="listings per measurement (5)")
    parser.add_argument("--baseline", metavar="REF", help="also measure the code at this git ref")
    parser.add_argument("--small", action="store_true", help="SQLite, 100 folders, 1k and 5k")
    parser.add_argument("--workdir", type=Path, help="keep databases and logs here")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    parser.add_argument(
        "--log-level",
        default="INFO",
        help="the service's LOG_LEVEL (INFO, its default: a line per request, as deployed)",
    )
    parser.add_argument(
        "--cpus",
        choices=["own", "shared", "both"],
        help="small requests with the service on a CPU of its own, sharing the CPUs with "
        "the load, or both in turn (both; shared on a machine with one CPU)",
    )
    args = parser.parse_args(argv)

    def numbers(text: str | None, default: list[int]) -> list[int]:
        return [int(item) for item in text.split(",")] if text else default

    backends = (args.backends or ("sqlite" if args.small else "sqlite,postgres")).split(",")
    if unknown := set(backends) - {"sqlite", "postgres"}:
        parser.error(f"unknown backends {sorted(unknown)}")
    return Config(
        backends=backends,
        prefixes=numbers(args.prefixes, [100] if args.small else [100, 10_000]),
        sizes=numbers(args.sizes, [1_000, 5_000] if args.small else [1_000, 10_000, 100_000]),
        ops=args.ops or (100 if args.small else 400),
        repeats=args.repeats or (3 if args.small else 5),
        baseline=args.baseline,
        workdir=args.workdir,
        json_path=args.json,
        log_level=args.log_level,
        placements=_placements(args.cpus or "both"),
    )


def _placements(cpus: str) -> list[str]:
    if len(ALL_CPUS) < 2:
        return [SHARED]
    return [OWN, SHARED] if cpus == "both" else [cpus]


# --- databases --------------------------------------------------------------------------------


@dataclass
class Database:
    backend: str
    url: str  # what the service uses (pgbouncer for Postgres)
    direct_url: str  # migrations and bulk inserts

    def async_url(self) -> str:
        if self.url.startswith("sqlite"):
            return self.direct_url.replace("sqlite://", "sqlite+aiosqlite://", 1)
        return self.direct_url.replace("postgresql://", "postgresql+asyncpg://", 1)


async def _postgres_admin(sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    connection = await asyncpg.connect(POSTGRES_ADMIN)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@contextlib.contextmanager
def database(backend: str, workdir: Path) -> Iterator[Database]:
    """A fresh, empty database (not yet migrated), dropped afterwards."""
    if backend == "sqlite":
        path = workdir / "teleuploader.db"
        path.unlink(missing_ok=True)
        url = f"sqlite:///{path}"
        yield Database(backend, url, url)
        return
    name = f"metadata_bench_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(
        _postgres_admin(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
        )
    )
    try:
        yield Database(
            backend, POSTGRES_POOLED.format(name=name), POSTGRES_DIRECT.format(name=name)
        )
    finally:
        asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def object_key(n: int, folders: int) -> str:
    return f"d{n % folders:05}/o{n:07}"


def upload_key(n: int, folders: int) -> str:
    return f"d{n % folders:05}/u{n:07}"


async def _bulk_insert(db: Database, folders: int, start: int, end: int) -> None:
    """Objects start..end-1 (and a tenth as many uploads), straight into the
    tables; the schema is the same for the baseline and the checkout."""
    from sqlalchemy import insert

    from app.db.engine import create_engine
    from app.db.models import MultipartUpload, StoredObject

    engine = create_engine(db.async_url(), for_migrations=True)
    now = datetime.now(UTC)
    inline = b"m" * OBJECT_SIZE
    try:
        for low in range(start, end, 5_000):
            rows = [
                {
                    "bucket": BUCKET,
                    "key": object_key(n, folders),
                    "public_id": secrets.token_urlsafe(18),
                    "name": f"o{n:07}",
                    "content_type": "application/octet-stream",
                    "size": OBJECT_SIZE,
                    "etag": '"0123456789abcdef0123456789abcdef"',
                    "md5": "0123456789abcdef0123456789abcdef",
                    "sha256": None,
                    "user_metadata": {},
                    "inline_data": inline,
                    "created_at": now,
                    "updated_at": now,
                }
                for n in range(low, min(end, low + 5_000))
            ]
            uploads = [
                {
                    "id": secrets.token_urlsafe(48)[:64],
                    "bucket": BUCKET,
                    "key": upload_key(n // 10, folders),
                    "content_type": "application/octet-stream",
                    "user_metadata": {},
                    "created_at": now,
                }
                for n in range(low, min(end, low + 5_000), 10)
            ]
            async with engine.begin() as connection:
                await connection.execute(insert(StoredObject), rows)
                await connection.execute(insert(MultipartUpload), uploads)
    finally:
        await engine.dispose()


# --- the service ------------------------------------------------------------------------------


@dataclass
class Service:
    url: str
    port: int
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU time of the service process so far."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")


def _settings_names() -> set[str]:
    from app.config.settings import Settings

    names = {name.upper() for name in Settings.model_fields}
    for info in Settings.model_fields.values():
        alias = info.validation_alias
        for choice in getattr(alias, "choices", [alias]):
            if isinstance(choice, str):
                names.add(choice.upper())
    return names


@contextlib.contextmanager
def service(
    db: Database,
    tokens: list[str],
    sim_url: str,
    workdir: Path,
    code: Path | None,
    log_level: str,
) -> Iterator[Service]:
    """`teleuploader serve` on `db` (migrated first); `code` first on the path
    when measuring another revision. Its log goes to a file in `workdir`."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in _settings_names()}
    env.update(
        {
            "BOT_TOKENS": ",".join(tokens),
            "STORAGE_CHAT_ID": str(CHAT_ID),
            "TELEGRAM_API_BASE": sim_url,
            "DATABASE_URL": db.url,
            "MIGRATION_DATABASE_URL": db.direct_url,
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "S3_CREDENTIALS": f"{ACCESS_KEY}:{SECRET}",
            "SPOOL_DIR": str(workdir / "spool"),
            "LOG_LEVEL": log_level,
            "LOG_FORMAT": "json",
        }
    )
    with served(env, workdir, code=code) as running_service:
        yield Service(url=running_service.url, port=port, pid=running_service.process.pid)


# --- clients ----------------------------------------------------------------------------------


def s3_client(url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=BotoConfig(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
            max_pool_connections=CLIENT_THREADS,
        ),
    )


class RawLister:
    """Signed GETs over one kept-alive connection, timed to the last byte."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=600)
        self._signer = S3SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1")

    def get(self, query: dict[str, str]) -> tuple[float, bytes]:
        path = f"/{BUCKET}?" + "&".join(
            f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in sorted(query.items())
        )
        request = AWSRequest(method="GET", url=f"{self._service.url}{path}")
        self._signer.add_auth(request)
        started = time.perf_counter()
        self._connection.request("GET", path, headers=dict(request.headers.items()))
        response = self._connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise Broken(f"GET {path} answered {response.status}: {body[:300]!r}")
        return elapsed, body

    def median_ms(
        self, query: dict[str, str], repeats: int, check: Callable[[bytes], None]
    ) -> float:
        """The median of `repeats` timings (one only if a single one takes over 2 s)."""
        timings = []
        for _ in range(repeats):
            elapsed, body = self.get(query)
            check(body)
            timings.append(elapsed)
            if elapsed > 2.0:
                break
        return statistics.median(timings) * 1000

    def close(self) -> None:
        self._connection.close()


def _expect(tag: bytes, at_least: int) -> Callable[[bytes], None]:
    def check(body: bytes) -> None:
        found = body.count(b"<" + tag + b">")
        if found < at_least:
            raise Broken(f"expected at least {at_least} <{tag.decode()}> entries, got {found}")

    return check


# --- where the service runs -------------------------------------------------------------------

#: The service's threads on a CPU of their own, the load (this process's
#: client threads) on the others; or every process on every CPU.
OWN, SHARED = "own", "shared"
PLACES = {OWN: "on a CPU of its own", SHARED: "sharing the CPUs with the load"}
ALL_CPUS = frozenset(os.sched_getaffinity(0))


@contextlib.contextmanager
def placed(pid: int, placement: str) -> Iterator[None]:
    """Run the block with the service (`pid`, every thread of it) placed as
    `placement` says. With OWN, the 8 boto3 threads, which spend several times
    the service's CPU per request, no longer run on the service's CPU between
    its requests, evicting its caches and taking its time slices: what the
    service itself costs a request, as when its clients are other machines.
    The threads the block starts inherit this thread's CPUs. Postgres,
    pgbouncer and the simulator are left where the system puts them."""
    if placement == SHARED:
        yield
        return
    service_cpu = max(ALL_CPUS)
    _place(pid, {service_cpu})
    os.sched_setaffinity(0, ALL_CPUS - {service_cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, ALL_CPUS)
        _place(pid, ALL_CPUS)


def _place(pid: int, cpus: set[int] | frozenset[int]) -> None:
    # A process or thread that has ended meanwhile needs no placing (and the
    # error that ended it is the one to report).
    with contextlib.suppress(FileNotFoundError):
        threads = os.listdir(f"/proc/{pid}/task")
        for thread in threads:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(thread), cpus)


def load_phase(
    service: Service, clients: list[Any], work: Callable[[Any, int], None], ops: int
) -> tuple[float, float]:
    """(wall seconds, service CPU seconds) of `ops` calls of `work` from 8 threads."""

    def worker(thread: int) -> None:
        for n in range(thread, ops, CLIENT_THREADS):
            work(clients[thread], n)

    cpu_before = service.cpu_seconds()
    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        for future in [pool.submit(worker, t) for t in range(CLIENT_THREADS)]:
            future.result()
    return time.perf_counter() - started, service.cpu_seconds() - cpu_before


# --- measuring --------------------------------------------------------------------------------


def measure_floor(workdir: Path, ops: int, placements: list[str]) -> dict[str, float]:
    """CPU per GET and HEAD of `bench/floor_app.py` under uvicorn (httptools
    and uvloop, as `serve` picks them), with the load of `measure_size`, in
    each of `placements` (keys prefixed `shared_` for SHARED)."""
    port = free_port()
    command = bench_app_command("floor_app:app", port)
    with running(command, workdir / "floor.log") as process:
        floor = Service(url=f"http://127.0.0.1:{port}", port=port, pid=process.pid)
        wait_until(process, f"{floor.url}/", workdir / "floor.log", "the floor app")
        clients = [s3_client(floor.url) for _ in range(CLIENT_THREADS)]

        def get(client: Any, n: int) -> None:
            if len(client.get_object(Bucket=BUCKET, Key=f"k{n}")["Body"].read()) != OBJECT_SIZE:
                raise Broken("the floor app answered a short body")

        def head(client: Any, n: int) -> None:
            client.head_object(Bucket=BUCKET, Key=f"k{n}")

        values: dict[str, float] = {}
        for placement in placements:
            with placed(floor.pid, placement):
                _, get_cpu = load_phase(floor, clients, get, ops)
                _, head_cpu = load_phase(floor, clients, head, ops)
            values[_named("cpu_get_ms", placement)] = get_cpu / ops * 1000
            values[_named("cpu_head_ms", placement)] = head_cpu / ops * 1000
    return values


def _named(metric: str, placement: str) -> str:
    return metric if placement == OWN else f"{SHARED}_{metric}"


@dataclass
class Point:
    backend: str
    folders: int
    objects: int
    values: dict[str, dict[str, float]] = field(default_factory=dict)  # version -> metric -> value


def measure_size(
    service: Service, clients: list[Any], config: Config, size: int, placements: list[str]
) -> dict[str, float]:
    lister = RawLister(service)
    try:
        entries = min(1000, size)
        delimiter = lister.median_ms(
            {"list-type": "2", "delimiter": "/"},
            config.repeats,
            _expect(b"Prefix", 1),
        )
        prefix = lister.median_ms(
            {"list-type": "2", "prefix": "d", "max-keys": "1000"},
            config.repeats,
            _expect(b"Contents", entries),
        )
        uploads = lister.median_ms(
            {"uploads": "", "delimiter": "/"}, config.repeats, _expect(b"Bucket", 1)
        )
        versions = lister.median_ms(
            {"versions": "", "prefix": "d", "max-keys": "1000"},
            config.repeats,
            _expect(b"Version", entries),
        )
    finally:
        lister.close()
    values = {
        "delimiter_ms": delimiter,
        "prefix_ms": prefix,
        "uploads_ms": uploads,
        "versions_ms": versions,
    }
    for placement in placements:
        with placed(service.pid, placement):
            small = measure_small_requests(service, clients, config.ops, f"{size:07}-{placement}")
        values.update({_named(metric, placement): value for metric, value in small.items()})
    return values


def measure_small_requests(
    service: Service, clients: list[Any], ops: int, tag: str
) -> dict[str, float]:
    """PUTs of new 2 KiB objects under `put/<tag>/`, PUTs over them, GETs and
    HEADs of them, `ops` of each from 8 threads: the service's CPU per request."""
    body = b"p" * OBJECT_SIZE
    rewritten = b"r" * OBJECT_SIZE

    def put(client: Any, n: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"put/{tag}/{n:05}", Body=body)

    def reput(client: Any, n: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"put/{tag}/{n:05}", Body=rewritten)

    def get(client: Any, n: int) -> None:
        got = client.get_object(Bucket=BUCKET, Key=f"put/{tag}/{n:05}")["Body"].read()
        if got != rewritten:
            raise Broken("a GET returned other bytes than were last PUT")

    def head(client: Any, n: int) -> None:
        client.head_object(Bucket=BUCKET, Key=f"put/{tag}/{n:05}")

    put_wall, put_cpu = load_phase(service, clients, put, ops)
    _, reput_cpu = load_phase(service, clients, reput, ops)
    _, get_cpu = load_phase(service, clients, get, ops)
    _, head_cpu = load_phase(service, clients, head, ops)
    return {
        "puts_per_s": ops / put_wall,
        "cpu_put_ms": put_cpu / ops * 1000,
        "cpu_reput_ms": reput_cpu / ops * 1000,
        "cpu_get_ms": get_cpu / ops * 1000,
        "cpu_head_ms": head_cpu / ops * 1000,
    }


def measure_version(
    version: str,
    code: Path | None,
    config: Config,
    workdir: Path,
    sim: Any,
    points: dict[tuple[str, int, int], Point],
) -> None:
    for backend in config.backends:
        for folders in config.prefixes:
            run_dir = workdir / f"{version.split()[0]}-{backend}-{folders}"
            run_dir.mkdir(parents=True, exist_ok=True)
            with (
                database(backend, run_dir) as db,
                service(
                    db, sim.tokens, sim.url, run_dir, code, config.log_level
                ) as running_service,
            ):
                clients = [s3_client(running_service.url) for _ in range(CLIENT_THREADS)]
                clients[0].create_bucket(Bucket=BUCKET)
                inserted = 0
                for turn, size in enumerate(config.sizes):
                    asyncio.run(_bulk_insert(db, folders, inserted, size))
                    inserted = size
                    # Each placement goes first in turn: the first phases
                    # after a listing may find the caches colder.
                    placements = config.placements[:: 1 if turn % 2 == 0 else -1]
                    values = measure_size(running_service, clients, config, size, placements)
                    point = points.setdefault(
                        (backend, folders, size), Point(backend, folders, size)
                    )
                    point.values[version] = values
                    print(
                        f"  {version:>10} {backend:8} {folders:>6} folders {size:>7} objects: "
                        + ", ".join(f"{k} {v:.2f}" for k, v in values.items()),
                        flush=True,
                    )


LISTING_COLUMNS = [
    ("delimiter_ms", "delimiter page ms"),
    ("prefix_ms", "prefix 1,000 ms"),
    ("uploads_ms", "uploads page ms"),
    ("versions_ms", "versions 1,000 ms"),
]
SMALL_COLUMNS = [
    ("puts_per_s", "PUT/s"),
    ("cpu_put_ms", "CPU/PUT ms"),
    ("cpu_reput_ms", "CPU/re-PUT ms"),
    ("cpu_get_ms", "CPU/GET ms"),
    ("cpu_head_ms", "CPU/HEAD ms"),
]
SHARED_COLUMNS = [(_named(metric, SHARED), title) for metric, title in SMALL_COLUMNS]
HIGHER_IS_BETTER = {"puts_per_s", _named("puts_per_s", SHARED)}
# The same targets for the small requests, wherever the service runs.
TARGETS.update({_named(metric, SHARED): TARGETS[metric] for metric, _ in SMALL_COLUMNS[1:]})


def tables(placements: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, columns) of each table the report prints."""
    if placements == [SHARED]:
        return [("", LISTING_COLUMNS + SHARED_COLUMNS)]
    own = [("small requests with the service on a CPU of its own", LISTING_COLUMNS + SMALL_COLUMNS)]
    if SHARED not in placements:
        return own
    return [*own, ("small requests sharing the CPUs with the load", SHARED_COLUMNS)]


def report(
    points: dict[tuple[str, int, int], Point],
    versions: list[str],
    columns: list[tuple[str, str]],
) -> str:
    lines = [
        "| backend | folders | objects | " + " | ".join(title for _, title in columns) + " |",
        "|" + "---|" * (3 + len(columns)),
    ]
    for (backend, folders, size), point in sorted(points.items()):
        cells = []
        for metric, _ in columns:
            values = [point.values.get(v, {}).get(metric) for v in versions]
            text = " → ".join("—" if v is None else f"{v:.3g}" for v in values)
            if len(values) == 2 and values[0] and values[1]:
                # How many times better: less time or CPU, or more PUTs a second.
                better = (
                    values[1] / values[0] if metric in HIGHER_IS_BETTER else values[0] / values[1]
                )
                text += f" ({better:.3g}x)"
            target = TARGETS.get(metric)
            if target is not None and values[-1] is not None and values[-1] > target:
                text += " ✗"
            cells.append(text)
        lines.append(f"| {backend} | {folders:,} | {size:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    sys.path.insert(0, str(REPO))
    with contextlib.ExitStack() as stack:
        if config.workdir is not None:
            workdir = config.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="metabench-")))
        sim = stack.enter_context(simulator_process(workdir, bots=2))
        versions: list[str] = []
        points: dict[tuple[str, int, int], Point] = {}
        started = time.monotonic()
        try:
            floor = measure_floor(workdir, config.ops, config.placements)
            print(
                "  floor (a do-nothing ASGI app under uvicorn): "
                + ", ".join(f"{k} {v:.2f}" for k, v in floor.items()),
                flush=True,
            )
            if config.baseline is not None:
                code = extract(config.baseline, workdir / "baseline-code")
                versions.append(f"before ({config.baseline})")
                measure_version(versions[-1], code, config, workdir, sim, points)
            versions.append("after")
            measure_version("after", None, config, workdir, sim, points)
        except Broken as exc:
            print(f"broken: {exc}", file=sys.stderr)
            return 1
        print()
        print(
            " → ".join(versions)
            + " (Nx: how many times better after; ✗: misses the issue's target)"
        )
        for heading, columns in tables(config.placements):
            if heading:
                print(f"\n{heading}:")
            print(report(points, versions, columns))
        for placement in config.placements:
            get, head = (floor[_named(m, placement)] for m in ("cpu_get_ms", "cpu_head_ms"))
            print(
                f"\nfloor on this machine (uvicorn and a do-nothing app), {PLACES[placement]}: "
                f"{get:.2f} ms CPU per GET, {head:.2f} per HEAD"
            )
        print(f"\n{time.monotonic() - started:.0f} s")
        if config.json_path is not None:
            config.json_path.write_text(
                json.dumps(
                    {
                        "floor": floor,
                        "points": [
                            {
                                "backend": p.backend,
                                "folders": p.folders,
                                "objects": p.objects,
                                "values": p.values,
                            }
                            for p in points.values()
                        ],
                    },
                    indent=2,
                )
            )
    return 0


if __name__ == "__main__":
    run_main(main)
