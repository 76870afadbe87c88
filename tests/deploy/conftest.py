"""Real processes for the deployment tests.

`teleuploader telegram-sim`, `teleuploader serve` and `caddy run` are started as
subprocesses, exactly as an operator would start them, with their output in
log files under the test's tmp_path (shown when a test fails). Every process a
fixture starts is stopped at teardown, also when the test failed: SIGTERM,
then SIGKILL if it does not exit within a few seconds.

The simulator is shared by the session, but each test gets it with fresh
statistics, and with getFile capped at the CHUNK_SIZE of the service it
starts. At teardown, once the test's processes have stopped, no bot token may
have had two calls of one lane in flight at once (one upload-lane call and
one small call beside it: app/telegram/worker.py).

`database_url` runs a test on SQLite and on Postgres through pgbouncer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from app.config.settings import Settings
from tests.conftest import BACKENDS, empty_tables
from tests.db.helpers import Database
from tests.running_service import assert_one_call_per_lane, parse_metrics

REPO = Path(__file__).resolve().parents[2]
TELEUPLOADER = REPO / ".venv" / "bin" / "teleuploader"
CHAT_ID = -1001
SIM_BOTS = 2
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# A killed process's bot leases pass to the next one only once they expire
# (app/store/leases.py: a holder taken for dead may still be calling), 15 s
# by default: crash tests shorten the lease, and wait for work that needs the
# bots (a flush, a repair) that long beyond the work itself, on a loaded CI.
CRASH_TUNING: dict[str, Any] = {"bot_lease_seconds": 5.0}
SETTLE_WITHIN = 60.0


def serve_command(tuning: Mapping[str, Any] | None = None) -> list[str]:
    """`teleuploader serve`, or, to shorten its timers (app/config/tuning.py: not
    settings), the same through tests/serve_tuned.py (needs PYTHONPATH=REPO)."""
    if not tuning:
        return [str(TELEUPLOADER), "serve"]
    return [str(REPO / ".venv" / "bin" / "python"), "-m", "tests.serve_tuned", json.dumps(tuning)]


def base_env(home: Path, **values: str) -> dict[str, str]:
    """A clean environment: nothing from the developer's shell or a CI's
    settings (DATABASE_URL, BOT_TOKENS, ...) leaks into the processes."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        # scripts/test's bytecode cache, so that no process compiles the code
        # again; without one, nothing is written into the checkout.
        **(
            {"PYTHONPYCACHEPREFIX": os.environ["PYTHONPYCACHEPREFIX"]}
            if os.environ.get("PYTHONPYCACHEPREFIX")
            else {"PYTHONDONTWRITEBYTECODE": "1"}
        ),
        # No snapshot at every stop (it posts messages these tests count);
        # tests/store/test_snapshots.py covers them.
        "SNAPSHOT_INTERVAL_SECONDS": "0",
    }
    env.update(values)
    return env


@dataclass
class Proc:
    """A subprocess whose stdout and stderr go to files."""

    name: str
    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    _files: list[IO[bytes]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def output(self, limit: int = 4000) -> str:
        """Both streams' tails, for assertion messages."""
        return (
            f"--- {self.name} stdout (tail) ---\n{self.stdout()[-limit:]}\n"
            f"--- {self.name} stderr (tail) ---\n{self.stderr()[-limit:]}"
        )

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; always reaped and closed."""
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGTERM)
                try:
                    self.popen.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.popen.kill()
                    self.popen.wait(STOP_TIMEOUT)
        finally:
            for file in self._files:
                file.close()
            self._files.clear()


class Processes:
    """Starts subprocesses and stops every one of them at `stop_all`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[Proc] = []

    def start(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str],
        cwd: Path | None = None,
    ) -> Proc:
        count = sum(1 for proc in self.started if proc.name == name)
        stem = f"{name}-{count}" if count else name
        stdout_path = self.directory / f"{stem}.stdout.log"
        stderr_path = self.directory / f"{stem}.stderr.log"
        stdout = stdout_path.open("wb")
        stderr = stderr_path.open("wb")
        try:
            popen = subprocess.Popen(
                [str(arg) for arg in argv],
                env=dict(env),
                cwd=cwd or self.directory,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        except BaseException:
            stdout.close()
            stderr.close()
            raise
        proc = Proc(name, popen, stdout_path, stderr_path, [stdout, stderr])
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        # Newest first: Caddy before the service before the simulator.
        errors: list[BaseException] = []
        for proc in reversed(self.started):
            try:
                proc.stop()
            except BaseException as exc:  # keep stopping the others
                errors.append(exc)
        self.started.clear()
        if errors:
            raise errors[0]


def wait_for(
    condition: Callable[[], bool], *, within: float, what: str, proc: Proc | None = None
) -> None:
    """Poll `condition` until it holds; fail early if `proc` exits meanwhile."""
    deadline = time.monotonic() + within
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{proc.name} exited ({proc.poll()}) while waiting for {what}\n{proc.output()}"
            )
        if time.monotonic() > deadline:
            details = f"\n{proc.output()}" if proc is not None else ""
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}{details}")
        time.sleep(0.05)


def run_cli(args: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> str:
    """Run a one-shot `teleuploader` command; its stdout, or fail with its output."""
    result = subprocess.run(
        [str(TELEUPLOADER), *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"teleuploader {' '.join(args)} exited {result.returncode}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
    return result.stdout


# --- the Telegram simulator (one per test session) ----------------------------------------


@dataclass(frozen=True)
class Simulator:
    url: str
    tokens: list[str]
    chat_id: int


@pytest.fixture(scope="session")
def telegram_sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    """`teleuploader telegram-sim` with two bots, shared by the session."""
    with sim_process(tmp_path_factory.mktemp("telegram-sim"), SIM_BOTS, CHAT_ID) as sim:
        yield sim


@contextlib.contextmanager
def sim_process(
    directory: Path, bots: int, chat_id: int, tls: tuple[Path, Path] | None = None
) -> Iterator[Simulator]:
    """`teleuploader telegram-sim` in a process of its own (one call at a time
    per token, as Telegram), until the block ends; on HTTPS with `tls`'s
    certificate and key (PEM files)."""
    processes = Processes(directory)
    port = free_port()
    tokens_file = directory / "tokens.txt"
    try:
        proc = processes.start(
            "telegram-sim",
            [
                TELEUPLOADER,
                "telegram-sim",
                "--port",
                str(port),
                "--bots",
                str(bots),
                "--chat-id",
                str(chat_id),
                "--tokens-file",
                tokens_file,
                "--concurrency-limit",
                "1",
                *(["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else []),
            ],
            env=base_env(directory),
        )
        wait_for(
            lambda: port_open(port) and tokens_file.is_file(),
            within=START_TIMEOUT,
            what="the Telegram simulator",
            proc=proc,
        )
        tokens = tokens_file.read_text().split()
        assert len(tokens) == bots, tokens_file.read_text()
        scheme = "https" if tls else "http"
        yield Simulator(url=f"{scheme}://127.0.0.1:{port}", tokens=tokens, chat_id=chat_id)
    finally:
        processes.stop_all()


TELEGRAM_GETFILE_CAP = 20 * 1000 * 1000  # the simulator's default: Telegram's 20 MB


def sim_stats(sim: Simulator) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(f"{sim.url}/_sim/stats", timeout=10).json()
    return stats


def configure_sim(sim: Simulator, **knobs: Any) -> None:
    httpx.post(f"{sim.url}/_sim/config", json=knobs, timeout=10).raise_for_status()


def check_one_call_per_lane(url: str) -> None:
    """The simulator at `url` saw no token with two calls of one lane at once
    (tests.running_service.assert_one_call_per_lane)."""
    assert_one_call_per_lane(httpx.get(f"{url}/_sim/stats", timeout=10).json()["bots"])


@pytest.fixture
def telegram_sim(telegram_sim_process: Simulator, processes: Processes) -> Iterator[Simulator]:
    """The session's simulator for one test: no call in flight and fresh
    statistics at the start; at the end, after this test's processes have
    stopped, no token had two calls of one lane in flight at once."""
    sim = telegram_sim_process
    wait_for(
        lambda: all(bot["calls_in_flight"] == 0 for bot in sim_stats(sim)["bots"].values()),
        within=STOP_TIMEOUT,
        what="the calls of the previous test to end",
    )
    configure_sim(sim, max_getfile_bytes=TELEGRAM_GETFILE_CAP)
    httpx.post(f"{sim.url}/_sim/reset-stats", timeout=10).raise_for_status()
    yield sim
    processes.stop_all()
    check_one_call_per_lane(sim.url)


# --- databases ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite database brought up to date by `teleuploader migrate`, once."""
    directory = tmp_path_factory.mktemp("template-db")
    path = directory / "teleuploader.db"
    run_cli(
        ["migrate"],
        env=base_env(directory, DATABASE_URL=sqlite_url(path)),
        cwd=directory,
    )
    assert path.is_file()
    return path


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
def migrated_db(migrated_template: Path, tmp_path: Path) -> Path:
    """A migrated database of this test's own (a copy of the template)."""
    path = tmp_path / "teleuploader.db"
    shutil.copyfile(migrated_template, path)
    return path


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database with empty tables, as a DATABASE_URL: an SQLite file
    of this test's own, or the session's Postgres database through pgbouncer."""
    if request.param == "sqlite":
        return sqlite_url(request.getfixturevalue("migrated_db"))
    postgres: Database = request.getfixturevalue("postgres_database")
    empty_tables(postgres)
    return postgres.url


# --- the service ----------------------------------------------------------------------------


@dataclass
class Service:
    proc: Proc
    url: str
    port: int
    env: dict[str, str]
    key: str | None = None

    @property
    def auth(self) -> dict[str, str]:
        assert self.key is not None, "start the service with api_key=True"
        return {"Authorization": f"Bearer {self.key}"}


def metrics(service: Service) -> dict[str, float]:
    """The service's /metrics (its admin key), as {series: value}."""
    return parse_metrics(httpx.get(f"{service.url}/metrics", headers=service.auth, timeout=10).text)


ServiceStarter = Callable[..., Service]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Processes started by this test; all stopped at teardown."""
    group = Processes(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def start_service(processes: Processes, telegram_sim: Simulator, tmp_path: Path) -> ServiceStarter:
    """Starts `teleuploader serve` against the simulator.

    `database`: the SQLite file to use, or a DATABASE_URL; `api_key`: create a
    key first with `teleuploader keys create`; `wait_healthy`: return once
    /ready answers 200; `env`: extra settings (NOTIFY_SOCKET, CHUNK_SIZE, ...).
    The simulator's getFile cap becomes the service's CHUNK_SIZE.
    """

    def start(
        database: Path | str,
        *,
        env: Mapping[str, str] | None = None,
        api_key: bool = False,
        wait_healthy: bool = True,
        tuning: Mapping[str, Any] | None = None,
    ) -> Service:
        port = free_port()
        settings = base_env(
            tmp_path,
            BOT_TOKENS=",".join(telegram_sim.tokens),
            STORAGE_CHAT_ID=str(telegram_sim.chat_id),
            TELEGRAM_API_BASE=telegram_sim.url,
            DATABASE_URL=database if isinstance(database, str) else sqlite_url(database),
            HOST="127.0.0.1",
            PORT=str(port),
            SENDS_PER_MINUTE="0",
            SHUTDOWN_GRACE_SECONDS="5",
            LOG_FORMAT="json",
        )
        settings.update(env or {})
        chunk_size = int(settings.get("CHUNK_SIZE", DEFAULT_CHUNK_SIZE))
        configure_sim(telegram_sim, max_getfile_bytes=chunk_size)
        key = None
        if api_key:
            key = run_cli(["keys", "create", "deploy-test"], env=settings, cwd=tmp_path).strip()
        if tuning:
            settings["PYTHONPATH"] = str(REPO)
        proc = processes.start("teleuploader-serve", serve_command(tuning), env=settings)
        service = Service(proc=proc, url=f"http://127.0.0.1:{port}", port=port, env=settings)
        service.key = key
        if wait_healthy:
            wait_for(
                lambda: _healthy(service.url),
                within=START_TIMEOUT,
                what="teleuploader serve to answer /ready",
                proc=proc,
            )
        return service

    return start


DEFAULT_CHUNK_SIZE: int = Settings.model_fields["chunk_size"].default


def _healthy(url: str) -> bool:
    try:
        # Ready, not only alive: the bots are checked after the port opens.
        return httpx.get(f"{url}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# --- Caddy ----------------------------------------------------------------------------------

CADDY = shutil.which("caddy")
CADDYFILE = REPO / "Caddyfile"


@dataclass
class Caddy:
    proc: Proc
    url: str
    port: int
    admin: str


CaddyStarter = Callable[..., Caddy]


def caddy_env(directory: Path, **values: str) -> dict[str, str]:
    """Caddy keeps its state (certificates, autosave.json) under these dirs."""
    return base_env(
        directory,
        XDG_DATA_HOME=str(directory / "caddy-data"),
        XDG_CONFIG_HOME=str(directory / "caddy-config"),
        **values,
    )


@pytest.fixture
def start_caddy(processes: Processes, tmp_path: Path) -> CaddyStarter:
    """Runs the repository's Caddyfile with the site on a free local port and
    the upstream given (`host:port`)."""
    if CADDY is None:
        pytest.fail("caddy is not installed: scripts/test installs Debian's caddy package")

    def start(upstream: str, **extra: Any) -> Caddy:
        port = free_port()
        admin = f"127.0.0.1:{free_port()}"
        env = caddy_env(
            tmp_path,
            TELEUPLOADER_SITE=f"http://127.0.0.1:{port}",
            TELEUPLOADER_UPSTREAM=upstream,
            TELEUPLOADER_CADDY_ADMIN=admin,
            **extra,
        )
        assert CADDY is not None
        proc = processes.start(
            "caddy", [CADDY, "run", "--config", CADDYFILE, "--adapter", "caddyfile"], env=env
        )
        caddy = Caddy(proc=proc, url=f"http://127.0.0.1:{port}", port=port, admin=admin)
        wait_for(
            lambda: _healthy(caddy.url),
            within=START_TIMEOUT,
            what="Caddy to proxy /health",
            proc=proc,
        )
        return caddy

    return start
