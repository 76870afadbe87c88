"""CPU per small S3 request in process: the app alone, side by side with a baseline.

The end-to-end metadata bench (``metadata_bench.py``) measures the service
under uvicorn with 8 boto3 threads on the same 2 CPUs; there the same code
moved by ±30 % between runs minutes apart, and so did the floor, so a change
of 10-30 % could not be told from noise. This bench takes the client, the
HTTP server and the sockets out: one process drives ``create_app`` directly
through ASGI (a hand-built scope, uvloop as ``serve`` uses), one request at a
time, with SigV4 headers signed once beforehand, and measures its own CPU
time (``time.process_time``) over ``--ops`` HEADs, GETs and PUTs of 2 KiB
objects (under new keys, and REPLACE: again and again over one key) and
DELETEs of keys never written, on SQLite and on Postgres through
pgbouncer. The app logs at
``--log-level`` (INFO, the service's default: a line per request, to a file).

With ``--baseline REF`` each round runs the baseline's code (``git archive``
into a temporary directory, first on ``PYTHONPATH``) and the checkout's in
turn, in fresh processes, ``--rounds`` times; the table gives each side's
median and their ratio, so a slow phase of the machine hits both sides.

    .venv/bin/python bench/request_cpu_bench.py --baseline 91024a2
    .venv/bin/python bench/request_cpu_bench.py --backends sqlite --rounds 3 --ops 1000

``--instructions`` counts instead the instructions the process runs per
request, under valgrind's callgrind (Debian's ``valgrind``), with counting on
only around each kind's requests. CPU time moves with the machine: the same
code measured ±15-30 % between rounds minutes apart, far more than most
changes make. An instruction count barely does: six runs of the same HEAD
or GET agreed within 0.6 % (PUT and DELETE, whose writes wait on a lock and
a thread, within 3 %). It is no time: it counts the process's own
instructions, not the kernel's work for its system calls, and a cache miss
costs what a hundred instructions do (the end-to-end bench's cold caches are
not in it). But a change that runs fewer instructions on the same requests
does less work, and the count says how much less. Each run takes a minute
or so (the process runs 50 times slower): a few hundred ``--ops`` and one or
two rounds do.

    .venv/bin/python bench/request_cpu_bench.py --baseline 18ff207 --instructions \\
        --rounds 1 --ops 500

Postgres needs pgbouncer on 127.0.0.1:6432 in front of 127.0.0.1:5432
(``scripts/pgbouncer-test.sh start``); the bench creates and drops its own
database. Exit status 1 only if a request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common import (
    POSTGRES_POOLED,
    REPO,
    extract,
    psql,
    run_main,
)

ACCESS_KEY, SECRET = "bench", "bench-secret-0123456789"
BUCKET = "bench"
OBJECT_SIZE = 2048
KINDS = ("HEAD", "GET", "PUT", "REPLACE", "DELETE")


# --- one measurement (a child process) ---------------------------------------------------------


def _signed(method: str, path: str, body: bytes) -> list[tuple[bytes, bytes]]:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=f"http://app{path}", data=body, headers={"host": "app"})
    request.headers["x-amz-content-sha256"] = (
        "UNSIGNED-PAYLOAD"
        if body
        else "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1").add_auth(request)
    headers = [
        (name.lower().encode(), str(value).encode()) for name, value in request.headers.items()
    ]
    if body:
        headers.append((b"content-length", str(len(body)).encode()))
    return headers


async def _call(
    app: Any, state: dict[str, Any], method: str, path: str, headers: list[Any], body: bytes
) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": dict(state),
    }
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never goes away
        raise AssertionError("unreachable")

    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    return statuses[0]


async def _measure(
    database_url: str, ops: int, log_level: str, meter: CpuTime | Instructions
) -> dict[str, float]:
    from app.config.settings import BotToken, Settings
    from app.db.migrations import upgrade
    from app.kit.logging import configure_logging
    from app.runtime.main import create_app
    from app.telegram.simulator import (
        SimulatorConfig,
        TelegramSimulator,
        make_tokens,
        run_simulator,
    )

    work = tempfile.mkdtemp(prefix="request-cpu-")
    configure_logging(log_level, "json")
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[-1001]))
    async with run_simulator(sim) as telegram_url:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            bot_tokens=[BotToken.parse(token) for token in sim.tokens],
            storage_chat_id=-1001,
            telegram_api_base=telegram_url,
            database_url=database_url,
            spool_dir=f"{work}/spool",
            s3_credentials=f"{ACCESS_KEY}:{SECRET}",
            log_level=log_level,
        )
        await asyncio.to_thread(upgrade, database_url.replace(":6432/", ":5432/"))
        app = create_app(settings)
        async with app.router.lifespan_context(app) as lifespan_state:
            state = dict(lifespan_state or {})

            async def call(method: str, path: str, headers: list[Any], body: bytes = b"") -> None:
                status = await _call(app, state, method, path, headers, body)
                if status != (204 if method == "DELETE" else 200):
                    raise RuntimeError(f"{method} {path}: {status}")

            await call("PUT", f"/{BUCKET}", _signed("PUT", f"/{BUCKET}", b""))
            body = os.urandom(OBJECT_SIZE)
            key = f"/{BUCKET}/object"
            await call("PUT", key, _signed("PUT", key, body), body)
            head, get = _signed("HEAD", key, b""), _signed("GET", key, b"")
            put_again = _signed("PUT", key, body)
            puts = [f"/{BUCKET}/new-{i}" for i in range(ops + 100)]
            signed_puts = [_signed("PUT", path, body) for path in puts]
            # Keys never written: clients delete keys long gone.
            absent = [f"/{BUCKET}/absent-{i}" for i in range(ops + 100)]
            signed_deletes = [_signed("DELETE", path, b"") for path in absent]
            work_of: dict[str, Callable[[int], Awaitable[None]]] = {
                "HEAD": lambda i: call("HEAD", key, head),
                "GET": lambda i: call("GET", key, get),
                "PUT": lambda i: call("PUT", puts[i], signed_puts[i], body),
                # A key written again and again (a registry's link files): the
                # replaced version goes to the trash when TRASH_RETENTION_SECONDS > 0.
                "REPLACE": lambda i: call("PUT", key, put_again, body),
                "DELETE": lambda i: call("DELETE", absent[i], signed_deletes[i]),
            }
            result: dict[str, float] = {}
            for kind in KINDS:
                run = work_of[kind]
                for i in range(100):  # warm up (PUTs on keys of their own)
                    await run(ops + i)
                meter.start()
                for i in range(ops):
                    await run(i)
                result[kind] = meter.stop() / ops
            return result


class CpuTime:
    """Milliseconds of this process's CPU time."""

    def start(self) -> None:
        self._started = time.process_time()

    def stop(self) -> float:
        return (time.process_time() - self._started) * 1000


class Instructions:
    """Thousands of instructions this process ran, counted by callgrind
    (the process runs under it, its counting off until `start`)."""

    def __init__(self, out_file: str) -> None:
        self._out_file = out_file
        self._dumps = 0

    def start(self) -> None:
        self._control("--instr=on")

    def stop(self) -> float:
        self._control("--instr=off")
        # A dump writes what was counted since the last one to a file of
        # its own (out_file.1, .2, ...) and starts again from zero.
        self._control("--dump")
        self._dumps += 1
        text = Path(f"{self._out_file}.{self._dumps}").read_text()
        totals = [line.split()[1] for line in text.splitlines() if line.startswith("totals:")]
        return int(totals[0]) / 1000

    @staticmethod
    def _control(option: str) -> None:
        subprocess.run(
            ["callgrind_control", option, str(os.getpid())], check=True, capture_output=True
        )


def child_main(database_url: str, ops: int, log_level: str, callgrind_out: str) -> None:
    import uvloop

    meter = Instructions(callgrind_out) if callgrind_out else CpuTime()

    result = sys.stdout
    # A line per request at INFO, written to a file as `serve` writes to its
    # journal: part of what a request costs where the service runs. (Through
    # stdout, which any revision's `configure_logging` writes to.)
    with (
        tempfile.TemporaryDirectory(prefix="request-cpu-") as logs,
        open(f"{logs}/service.log", "w") as log,
    ):
        sys.stdout = log
        try:
            figures = uvloop.run(_measure(database_url, ops, log_level, meter))
        finally:
            sys.stdout = result
    print(json.dumps(figures))


# --- the rounds (this process) -----------------------------------------------------------------


def _database_url(backend: str, work: Path) -> str:
    if backend == "sqlite":
        path = work / f"{secrets.token_hex(4)}.db"
        return f"sqlite:///{path}"
    name = f"request_cpu_{os.getpid()}_{secrets.token_hex(4)}"
    psql(f'CREATE DATABASE "{name}"')
    return POSTGRES_POOLED.format(name=name)


def _drop(url: str) -> None:
    if url.startswith("postgresql"):
        name = url.rsplit("/", 1)[1]
        psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _one(
    code: Path, backend: str, ops: int, work: Path, log_level: str, instructions: bool
) -> dict[str, float]:
    url = _database_url(backend, work)
    callgrind_out = work / f"callgrind-{secrets.token_hex(4)}.out" if instructions else None
    command = [
        sys.executable,
        __file__,
        "--child",
        url,
        str(ops),
        log_level,
        str(callgrind_out or ""),
    ]
    if callgrind_out is not None:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={callgrind_out}",
            *command,
        ]
    try:
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{Path(__file__).parent}"}
        if instructions:
            # The same hash seed for every run: the same dict layouts and
            # iteration orders, so the same instructions.
            env["PYTHONHASHSEED"] = "0"
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{backend} at {code}: {done.stderr[-2000:]}")
        figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return figures
    finally:
        _drop(url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--ops", type=int, default=3000, help="requests of each kind per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each side")
    parser.add_argument("--baseline", metavar="REF", help="also measure the code at this git ref")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the runs here")
    parser.add_argument(
        "--log-level",
        default="INFO",
        help="the app's log level (INFO, the service's default: a line per request)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per request under valgrind instead of CPU time",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child[0], int(args.child[1]), args.child[2], args.child[3])
        return 0
    with tempfile.TemporaryDirectory(prefix="request-cpu-") as tmp:
        work = Path(tmp)
        sides = {"after": REPO}
        if args.baseline:
            sides = {
                f"before ({args.baseline})": extract(args.baseline, work / "baseline"),
                **sides,
            }
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        try:
            for round_number in range(1, args.rounds + 1):
                for backend in args.backends.split(","):
                    for side, code in sides.items():
                        figures = _one(
                            code, backend, args.ops, work, args.log_level, args.instructions
                        )
                        runs.setdefault((backend, side), []).append(figures)
                        shown = ", ".join(f"{k} {v:.3f}" for k, v in figures.items())
                        print(f"  round {round_number} {backend:8} {side:16} {shown}", flush=True)
        except RuntimeError as exc:
            print(f"broken: {exc}", file=sys.stderr)
            return 1
    print()
    unit = "thousand instructions" if args.instructions else "ms of CPU"
    print(f"median {unit} per request over {args.rounds} rounds of {args.ops}")
    names = list(sides)
    print("| backend | request | " + " | ".join(names) + (" | ratio |" if len(names) > 1 else " |"))
    print("|---|---|" + "---|" * (len(names) + (1 if len(names) > 1 else 0)))
    for backend in args.backends.split(","):
        for kind in KINDS:
            medians = [statistics.median(r[kind] for r in runs[(backend, n)]) for n in names]
            cells = " | ".join(f"{m:.1f}" if args.instructions else f"{m:.3f}" for m in medians)
            ratio = f" | {medians[0] / medians[-1]:.2f}x |" if len(names) > 1 else " |"
            print(f"| {backend} | {kind} | {cells}{ratio}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {"backend": backend, "side": side, "runs": figures}
                    for (backend, side), figures in runs.items()
                ],
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    run_main(main)
