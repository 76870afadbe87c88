"""Plumbing the benchmarks share: free ports, the `teleuploader` command line,
child processes with their logs, and the Telegram simulator as a subprocess.

Each bench script used to carry its own copy of these; a fix to one (a port
race, a stop that hangs, a log that is not shown) then missed the others.

The scripts run as `python bench/<name>.py`, not as a package. Python puts the
script's own directory first on sys.path, wherever it is started from, so they
import this module as plain `common`.

Standard library only (urllib for HTTP), so that importing it adds no
dependency to a script that does not already have it; `service_env` alone
reads the service's settings, when it is called.

The harness every bench runs on: the service (`served`) and the simulator
(`simulator_process`) as processes, their environment (`service_env`), their
CPU (`cpu_seconds`) and memory (`proc_status`, `MemoryWatch`), a table
(`quantity_table`) and the end of a run (`run_main`: a broken run is exit
status 1 with one line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
# The storage chat the simulator serves and the benches send to.
CHAT_ID = -1001000000001
# The checkout this file lives in (bench/..).
REPO = Path(__file__).resolve().parents[1]


class Broken(RuntimeError):
    """Something failed that a working service does not fail: a non-zero exit.

    A RuntimeError, so that callers which only know that (or let it end the
    run with a traceback) still treat it as the failure it is.
    """


def add_repo_to_path() -> None:
    """Make the checkout importable: `tests.*` helpers are not installed with the
    package, and sys.path starts at bench/, not at the checkout."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from '1073741824', '1GiB', '48M', '512k' (suffixes are powers of 1024)."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1GiB, 48MiB, 123456)")
    number, unit = float(match.group(1)), match.group(2).lower()
    factor = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024 * GiB}[unit]
    return int(number * factor)


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU time of a process so far (0 if it is gone); with
    `children`, that of its waited-for children too."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        # utime, stime, cutime, cstime (proc(5)).
        return sum(int(value) for value in fields[11 : 15 if children else 13]) / os.sysconf(
            "SC_CLK_TCK"
        )
    return 0.0


def proc_status(pid: int) -> dict[str, int]:
    """A process's /proc/<pid>/status numbers: sizes (VmRSS, VmHWM, RssAnon,
    RssFile...) in bytes, counts (Threads) as they are; {} if it is gone."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as lines:
        for line in lines:
            name, _, rest = line.partition(":")
            words = rest.split()
            if words and words[0].isdigit():
                number = int(words[0])
                values[name] = number * KiB if words[1:] == ["kB"] else number
    return values


def rss_bytes(pid: int) -> int:
    """A process's resident memory now (VmRSS), 0 if it is gone."""
    return proc_status(pid).get("VmRSS", 0)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now.

    The kernel picks it; the socket is closed before the child binds it, so
    another process could take it in between (rare enough for a bench)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def teleuploader_command() -> list[str]:
    """How to run the `teleuploader` CLI with this interpreter's environment.

    The console script next to sys.executable when the package is installed;
    otherwise the same entry point through Python, so a bare checkout works."""
    script = Path(sys.executable).with_name("teleuploader")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main())"]


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log, for error messages ('' if unreadable):
    enough to show why a child died without flooding the terminal."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def http_request(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    timeout: float = 10.0,
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """(status, body) of one request; a JSON `body` is sent as JSON; HTTPS
    trusts what `context` trusts (the system's roots without one).

    HTTP errors come back as a status rather than an exception, so that callers
    can say what the server answered; connection errors (OSError) propagate."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def bench_app_command(app: str, port: int, *extra: str) -> list[str]:
    """uvicorn serving one of the bench's own ASGI apps (`module:attribute`
    in bench/) on 127.0.0.1:`port`, on uvloop and httptools as `serve` runs."""
    return [
        sys.executable,
        *("-m", "uvicorn", "--app-dir", str(REPO / "bench"), app),
        *("--host", "127.0.0.1", "--port", str(port), "--no-access-log"),
        *("--loop", "uvloop", "--http", "httptools"),
        *extra,
    ]


def parse_metrics(text: str) -> dict[str, float]:
    """A service's /metrics page as {series with its labels: value}, ours only."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("teleuploader_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def wait_until(
    process: subprocess.Popen[bytes],
    url: str,
    log_path: Path,
    what: str,
    limit: float = 60.0,
    context: ssl.SSLContext | None = None,
) -> None:
    """Poll `url` until it answers 200; fail if `process` exits first.

    A child that cannot start (a port taken, a bad flag) otherwise shows up
    only later as connection errors far from the cause; this raises `Broken`
    with the tail of its log instead."""
    deadline = time.monotonic() + limit
    last = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Broken(f"{what} exited with {process.returncode}:\n{tail(log_path)}")
        with contextlib.suppress(OSError):
            status, body = http_request(url, timeout=2.0, context=context)
            if status == 200:
                return
            last = f"{status} {body[:200]!r}"
        time.sleep(0.05)
    raise Broken(f"{what} did not answer 200 within {limit:.0f} s ({last}):\n{tail(log_path)}")


@contextlib.contextmanager
def running(
    command: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    grace: float = 40.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """A subprocess with stdout and stderr in `log_path`; SIGTERM at the end,
    SIGKILL after `grace` seconds, so that no child outlives the bench (a
    leftover simulator would hold its port and skew the next run)."""
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@dataclass
class ServedService:
    """A running `teleuploader serve`: its address, an API key, its process
    (for RSS and CPU readings) and its log."""

    url: str
    key: str
    process: subprocess.Popen[bytes]
    log_path: Path


@contextlib.contextmanager
def served(
    env: dict[str, str],
    workdir: Path,
    *,
    command: Sequence[str] | None = None,
    code: Path | None = None,
    serve_env: dict[str, str] | None = None,
) -> Iterator[ServedService]:
    """Migrate the database `env` names, create an API key, run
    `teleuploader serve` until it answers /ready, stop it on the way out.

    `env` is the whole environment of the service and must set HOST and PORT;
    `command` is another checkout's CLI (default: this one's). `code` is a
    tree of another revision (e.g. `git archive` of a --baseline) put alone on
    PYTHONPATH, so that its `app` is what this interpreter's CLI imports;
    without it any PYTHONPATH of the caller is dropped, so the checkout's
    code runs. `serve_env` is added for `serve` only (not for migrate and
    keys), e.g. a NOTIFY_SOCKET. Everything runs in `workdir`, so that no
    .env file of the checkout is read."""
    env = dict(env)
    env.pop("PYTHONPATH", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cli = list(command or teleuploader_command())
    for step in (["migrate"], ["keys", "create", "bench", "--scope", "admin"]):
        done = subprocess.run(
            [*cli, *step],
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise Broken(f"teleuploader {' '.join(step)} failed: {done.stderr[-2000:]}")
    key = done.stdout.split()[0]
    log_path = workdir / "service.log"
    url = f"http://{env['HOST']}:{env['PORT']}"
    env.update(serve_env or {})
    with running([*cli, "serve"], log_path, env=env, cwd=workdir) as process:
        wait_until(process, f"{url}/ready", log_path, "the service")
        yield ServedService(url=url, key=key, process=process, log_path=log_path)


@dataclass
class SimulatorProcess:
    """A running `teleuploader telegram-sim`: where it listens, the bot tokens
    it issued, and its process and log (for CPU readings and post-mortems)."""

    url: str
    tokens: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path

    def stats(self) -> dict[str, Any]:
        """The simulator's own counters (/_sim/stats): what Telegram would have
        seen, which the client side cannot count for itself."""
        status, body = http_request(f"{self.url}/_sim/stats")
        if status != 200:
            raise Broken(f"the simulator's /_sim/stats answered {status}")
        stats: dict[str, Any] = json.loads(body)
        return stats

    def messages(self) -> dict[int, list[int]]:
        """The ids of the messages each chat still has (/_sim/messages)."""
        status, body = http_request(f"{self.url}/_sim/messages")
        if status != 200:
            raise Broken(f"the simulator's /_sim/messages answered {status}")
        chats: dict[str, list[int]] = json.loads(body)["chats"]
        return {int(chat): ids for chat, ids in chats.items()}

    def reset_stats(self) -> None:
        """Zero the counters, so that the next reading covers one phase only."""
        status, body = http_request(f"{self.url}/_sim/reset-stats", method="POST", body={})
        if status != 200:
            raise Broken(f"the simulator's /_sim/reset-stats answered {status}: {body[:200]!r}")

    def configure(self, **changes: Any) -> None:
        """Change settings of the running simulator (e.g. download_bandwidth)."""
        status, body = http_request(f"{self.url}/_sim/config", method="POST", body=changes)
        if status != 200:
            raise Broken(f"the simulator refused {changes}: {body[:200]!r}")


@contextlib.contextmanager
def simulator_process(
    workdir: Path,
    *,
    bots: int,
    args: Sequence[str] = (),
    chat_id: int = CHAT_ID,
    cwd: Path | None = None,
    ready_within: float = 60.0,
    grace: float = 40.0,
    tls: tuple[Path, Path, ssl.SSLContext] | None = None,
) -> Iterator[SimulatorProcess]:
    """Start `teleuploader telegram-sim` with `bots` bots on a free port, wait
    until it answers, stop it on the way out.

    It runs as a separate process so that the server's work shares neither an
    event loop nor a CPU with the client being measured. `args` are further
    telegram-sim flags (bandwidths, limits); its tokens are written to and read
    back from `workdir`/tokens.txt, its output goes to `workdir`/simulator.log.
    `tls`: a certificate and key (PEM files) to serve HTTPS with, and a client
    context that trusts them."""
    tokens_file = workdir / "tokens.txt"
    log_path = workdir / "simulator.log"
    port = free_port()
    command = [
        *teleuploader_command(),
        "telegram-sim",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--bots",
        str(bots),
        "--chat-id",
        str(chat_id),
        "--tokens-file",
        str(tokens_file),
        *args,
    ]
    context = None
    if tls is not None:
        cert, key, context = tls
        command += ["--tls-cert", str(cert), "--tls-key", str(key)]
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    with running(command, log_path, cwd=cwd, grace=grace) as process:
        wait_until(
            process,
            f"{url}/_sim/stats",
            log_path,
            "the simulator",
            limit=ready_within,
            context=context,
        )
        tokens = [line.strip() for line in tokens_file.read_text().splitlines() if line.strip()]
        yield SimulatorProcess(url=url, tokens=tokens, process=process, log_path=log_path)


def extract(ref: str, into: Path) -> Path:
    """The tree of `ref` in `into` (git archive: no worktree, no checkout)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise Broken(f"git archive {ref}: {archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


# --- the service's environment ----------------------------------------------------------


def _settings_env_names() -> set[str]:
    """Every environment variable the service's settings read, upper-cased."""
    # Imported here: the rest of this module needs nothing but the standard library.
    from pydantic import AliasChoices

    from app.config.settings import Settings

    names: set[str] = set()
    for name, info in Settings.model_fields.items():
        names.add(name.upper())
        alias = info.validation_alias
        if isinstance(alias, str):
            names.add(alias.upper())
        elif isinstance(alias, AliasChoices):
            names.update(choice.upper() for choice in alias.choices if isinstance(choice, str))
    return names


def service_env(overrides: dict[str, str]) -> dict[str, str]:
    """The environment minus any setting the caller's shell has, plus `overrides`:
    everything not given here is the service's default."""
    drop = _settings_env_names()
    env = {key: value for key, value in os.environ.items() if key.upper() not in drop}
    env.update(overrides)
    return env


# --- watching a process's memory --------------------------------------------------------


@dataclass
class PhaseMemory:
    peak_rss_sampled: int  # bytes, largest VmRSS seen by the sampler
    peak_rss_hwm: int | None  # bytes, VmHWM at the end of the phase (reset at its start)
    start_rss: int  # bytes
    end_rss: int  # bytes
    samples: int
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (s, MiB)

    @property
    def peak(self) -> int:
        return max(self.peak_rss_sampled, self.peak_rss_hwm or 0)


class MemoryWatch:
    """Samples VmRSS of a process in a thread; per phase, also its VmHWM."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.hwm_resettable = True
        # Every so many samples go into the timeline (the JSON's, not the table's).
        self.timeline_every = 5
        self._lock = threading.Lock()
        self._peak = 0
        self._samples = 0
        self._start_rss = 0
        self._started = time.perf_counter()
        self._timeline: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _rss(self) -> int:
        return rss_bytes(self.pid)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rss = self._rss()
            with self._lock:
                self._peak = max(self._peak, rss)
                self._samples += 1
                if self._samples % self.timeline_every == 0:
                    at = round(time.perf_counter() - self._started, 2)
                    self._timeline.append((at, round(rss / MiB, 1)))

    def begin(self) -> None:
        """Start a phase: forget the peaks so far."""
        try:
            # "5" resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+).
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            self.hwm_resettable = False
        rss = self._rss()
        with self._lock:
            self._peak, self._samples, self._start_rss = rss, 0, rss
            self._started, self._timeline = time.perf_counter(), []

    def end(self) -> PhaseMemory:
        rss = self._rss()
        hwm = proc_status(self.pid).get("VmHWM")
        with self._lock:
            self._peak = max(self._peak, rss)
            return PhaseMemory(
                peak_rss_sampled=self._peak,
                # Without the reset, VmHWM is the peak since the process started.
                peak_rss_hwm=hwm if hwm is not None and self.hwm_resettable else None,
                start_rss=self._start_rss,
                end_rss=rss,
                samples=self._samples,
                timeline=list(self._timeline),
            )


# --- tables and the end of a run --------------------------------------------------------


def quantity_table(names: Sequence[str], rows: Sequence[tuple[str, Sequence[object]]]) -> str:
    """A Markdown table with a row per quantity and a column per contender
    (`names`): each row is its label and one cell per contender."""
    lines = [
        "| quantity | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines += [
        f"| {label} | " + " | ".join(str(cell) for cell in cells) + " |" for label, cells in rows
    ]
    return "\n".join(lines)


# The local Postgres (trust auth), and a database through pgbouncer
# (scripts/pgbouncer-test.sh start), as production reaches it.
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
POSTGRES_POOLED = "postgresql://postgres@127.0.0.1:6432/{name}"


def psql(sql: str) -> None:
    """Run one statement as the local Postgres's superuser."""
    subprocess.run(["psql", "-q", POSTGRES_ADMIN, "-c", sql], check=True, capture_output=True)


@contextlib.contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """A new, empty database on the local Postgres, as its URL through
    pgbouncer; dropped on the way out."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    psql(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_POOLED.format(name=name)
    finally:
        psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_main(main: Callable[[], int]) -> None:
    """What every bench's `__main__` does: its exit status, or 1 with one
    line (no traceback) when something is broken, 130 when interrupted."""
    name = Path(sys.argv[0]).stem
    try:
        status = main()
    except Broken as exc:
        print(f"{name}: BROKEN: {exc}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        status = 130
    sys.exit(status)
