"""Stalled readers: what downloads that are never read cost the service.

Everything runs as separate processes, as in production: the Telegram Bot API
simulator (``teleuploader telegram-sim``), the service (``teleuploader serve``
on a fresh SQLite database) and the clients, which are plain sockets in this
process.

1. A file of ``--size`` random bytes is uploaded (``PUT /api/files/{name}``)
   and downloaded once in full (its sha256 checked) to warm the service up.
   Two seconds later the service's RSS is taken as its idle RSS.
2. ``--readers`` clients each open a connection with a 4 KiB receive buffer
   (the cheapest way not to read), send ``GET /f/{public_id}``, read the
   response head, and read nothing more.
3. For ``--watch`` seconds (or until every reader is gone and everything is
   given back) the bench samples, every 250 ms: the service's VmRSS; its
   /metrics (download buffer bytes and connections in use, downloads dropped);
   the simulator's Telegram downloads in flight (/_sim/stats); and the
   service's own sockets to the clients (its fds matched against
   /proc/net/tcp), i.e. connections it still holds.
4. Each client then reads what is left for up to 10 s in all: a body that ends
   before its Content-Length was cut off (what the budget's stall rule must
   do: never a short body that looks complete), one still arriving was never
   cut off.
5. A new download of the file must still come back whole.

``--baseline REF`` first runs the same against the code at git ref REF (its
tree extracted with ``git archive`` into the work dir and put first on
PYTHONPATH; the simulator and this script are the checkout's), then against
the checkout, so both columns come from the same run on the same machine.

The service runs with its defaults apart from CHUNK_SIZE (``--chunk-size``),
DOWNLOAD_STALL_SECONDS (``--stall``), and DOWNLOAD_BUFFER_BYTES /
DOWNLOAD_CONNECTIONS when given; METRICS_ACCESS is public so the bench can
scrape it. A baseline without these settings ignores them.

Exit status 1 only when something is broken (a process did not start, the
upload or the last download failed); the numbers are for reading.

    .venv/bin/python bench/download_bench.py --baseline 9bf6a72   # 200 readers, before and after
    .venv/bin/python bench/download_bench.py --small              # CI: 20 readers, 2 s stall
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import (
    CHAT_ID,
    REPO,
    Broken,
    KiB,
    MiB,
    SimulatorProcess,
    extract,
    free_port,
    http_request,
    parse_metrics,
    quantity_table,
    rss_bytes,
    run_main,
    served,
    simulator_process,
)

SAMPLE_EVERY = 0.25
READ_BACK_FOR = 10.0  # seconds, all clients together
CLIENT_RCVBUF = 4096
BLOCK = 64 * KiB  # the budget's block (app/store/reader.py READ_BLOCK)
SERVICE_DEFAULTS = {"DOWNLOAD_BUFFER_BYTES": 64 * MiB, "DOWNLOAD_CONNECTIONS": 32}


@dataclass(frozen=True)
class Config:
    readers: int
    size: int
    chunk_size: int
    bots: int
    stall: float
    watch: float
    buffer_bytes: int | None
    connections: int | None
    baseline: str | None
    workdir: Path | None
    rounds: int = 1
    extra_env: tuple[tuple[str, str], ...] = ()

    def service_env(self) -> dict[str, str]:
        env = {"DOWNLOAD_STALL_SECONDS": f"{self.stall:g}"}
        if self.buffer_bytes is not None:
            env["DOWNLOAD_BUFFER_BYTES"] = str(self.buffer_bytes)
        if self.connections is not None:
            env["DOWNLOAD_CONNECTIONS"] = str(self.connections)
        env.update(self.extra_env)
        return env

    @property
    def bound(self) -> int:
        """What the budget may hold: buffer + connections x block."""
        buffer = self.buffer_bytes or SERVICE_DEFAULTS["DOWNLOAD_BUFFER_BYTES"]
        connections = self.connections or SERVICE_DEFAULTS["DOWNLOAD_CONNECTIONS"]
        return buffer + connections * BLOCK

    @property
    def connection_cap(self) -> int:
        return self.connections or SERVICE_DEFAULTS["DOWNLOAD_CONNECTIONS"]


def parse_args(argv: list[str] | None) -> tuple[Config, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, help="stalled readers (200)")
    parser.add_argument("--size", type=int, help="file size in MiB (64)")
    parser.add_argument("--chunk-size", type=int, help="the service's CHUNK_SIZE in MiB (19)")
    parser.add_argument("--bots", type=int, default=3, help="bot tokens (3)")
    parser.add_argument("--stall", type=float, help="DOWNLOAD_STALL_SECONDS (60)")
    parser.add_argument("--watch", type=float, help="seconds to watch (2 x stall + 10)")
    parser.add_argument("--buffer-bytes", type=int, help="DOWNLOAD_BUFFER_BYTES (its default)")
    parser.add_argument("--connections", type=int, help="DOWNLOAD_CONNECTIONS (its default)")
    parser.add_argument("--baseline", metavar="REF", help="also measure the code at this git ref")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of readers against one service (1)"
    )
    parser.add_argument("--small", action="store_true", help="CI: 20 readers, 16 MiB, 2 s stall")
    parser.add_argument("--workdir", type=Path, help="keep databases and logs here")
    parser.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the service, for experiments (repeatable)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    extra = []
    for item in args.service_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--service-env wants NAME=VALUE, not {item!r}")
        extra.append((name, value))
    readers = args.readers or (20 if args.small else 200)
    stall = args.stall or (2.0 if args.small else 60.0)
    config = Config(
        readers=readers,
        size=(args.size or (16 if args.small else 64)) * MiB,
        chunk_size=(args.chunk_size or (4 if args.small else 19)) * MiB,
        bots=args.bots,
        stall=stall,
        watch=args.watch or 2 * stall + 10,
        buffer_bytes=args.buffer_bytes,
        connections=args.connections,
        baseline=args.baseline,
        workdir=args.workdir,
        rounds=args.rounds,
        extra_env=tuple(extra),
    )
    if config.rounds < 1:
        parser.error("--rounds must be at least 1")
    if config.readers < 1 or config.size < 1 or config.bots < 1 or config.stall <= 0:
        parser.error("readers, size, bots and stall must be positive")
    return config, args.json


# --- the service --------------------------------------------------------------------------


@dataclass
class Service:
    url: str
    port: int
    key: str
    process: subprocess.Popen[bytes]


def _settings_names() -> set[str]:
    names = {"BOT_TOKENS", "BOT_TOKEN", "ADDITIONAL_BOT_TOKENS", "STORAGE_CHANNEL_ID"}
    for line in (REPO / "deploy" / "env.example").read_text().splitlines():
        match = re.match(r"^#?([A-Z][A-Z0-9_]*)=", line)
        if match:
            names.add(match.group(1))
    return names


@contextlib.contextmanager
def service(
    config: Config, sim: SimulatorProcess, workdir: Path, code: Path | None
) -> Iterator[Service]:
    """`teleuploader serve` on a fresh SQLite database; `code` first on the
    path when measuring another revision."""
    workdir.mkdir(parents=True, exist_ok=True)
    database = workdir / "teleuploader.db"
    database.unlink(missing_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in _settings_names()}
    env.update(
        {
            "BOT_TOKENS": ",".join(sim.tokens),
            "STORAGE_CHAT_ID": str(CHAT_ID),
            "TELEGRAM_API_BASE": sim.url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "CHUNK_SIZE": str(config.chunk_size),
            "MAX_UPLOAD_SIZE": str(max(config.size, 64 * MiB)),
            "METRICS_ACCESS": "public",
            "LOG_LEVEL": "WARNING",
            "LOG_FORMAT": "json",
            **config.service_env(),
        }
    )
    with served(env, workdir, code=code) as running_service:
        yield Service(
            url=running_service.url,
            port=port,
            key=running_service.key,
            process=running_service.process,
        )


# --- watching --------------------------------------------------------------------------------


def held_sockets(pid: int, port: int) -> int:
    """The service's own connected sockets on its port (not the listener)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] != "0A" and fields[9] in inodes:
                    count += 1
    return count


def scrape(svc: Service) -> dict[str, float]:
    with contextlib.suppress(OSError):
        status, body = http_request(f"{svc.url}/metrics", timeout=10)
        if status == 200:
            values = parse_metrics(body.decode())
            return {
                name: value
                for name, value in values.items()
                if name.startswith("teleuploader_download")
            }
    return {}


def telegram_downloads(sim: SimulatorProcess) -> int:
    return sum(int(bot["downloads_in_flight"]) for bot in sim.stats()["bots"].values())


@dataclass
class Sample:
    at: float  # seconds since the last reader opened
    rss: int
    buffer_in_use: float | None
    connections_in_use: float | None
    dropped_client: float | None
    dropped_telegram: float | None
    telegram_downloads: int
    held_sockets: int


def sample(svc: Service, sim: SimulatorProcess, since: float) -> Sample:
    seen = scrape(svc)
    return Sample(
        at=round(time.monotonic() - since, 2),
        rss=rss_bytes(svc.process.pid),
        buffer_in_use=seen.get('teleuploader_download_buffer_bytes{state="in_use"}'),
        connections_in_use=seen.get('teleuploader_download_connections{state="in_use"}'),
        dropped_client=seen.get('teleuploader_downloads_dropped_total{reason="client_stalled"}'),
        dropped_telegram=seen.get(
            'teleuploader_downloads_dropped_total{reason="telegram_stalled"}'
        ),
        telegram_downloads=telegram_downloads(sim),
        held_sockets=held_sockets(svc.process.pid, svc.port),
    )


# --- clients ----------------------------------------------------------------------------------


@dataclass
class Client:
    sock: socket.socket
    content_length: int
    received: int = 0


def open_stalled(svc: Service, path: str) -> Client:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", svc.port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(4096)
        if not piece:
            raise Broken(f"the service closed a reader's connection before its head: {head!r}")
        head += piece
    head, _, body = head.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise Broken(f"a reader got {head[:200]!r}")
    match = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
    if match is None:
        raise Broken(f"no Content-Length in {head!r}")
    return Client(sock=sock, content_length=int(match.group(1)), received=len(body))


@dataclass
class ReadBack:
    cut_short: int = 0  # the connection ended before Content-Length
    complete: int = 0
    still_arriving: int = 0  # bytes still came when time was up: never cut off


def read_back(clients: list[Client]) -> ReadBack:
    result = ReadBack()
    deadline = time.monotonic() + READ_BACK_FOR
    for client in clients:
        client.sock.settimeout(0.5)
        ended = False
        while time.monotonic() < deadline:
            try:
                data = client.sock.recv(256 * KiB)
            except TimeoutError:
                break
            except OSError:  # reset
                ended = True
                break
            if not data:
                ended = True
                break
            client.received += len(data)
        if client.received >= client.content_length:
            result.complete += 1
        elif ended:
            result.cut_short += 1
        else:
            result.still_arriving += 1
        client.sock.close()
    return result


# --- one contender ---------------------------------------------------------------------------


@dataclass
class Run:
    """One round: readers opened, watched, read back."""

    readers_opened: int = 0
    samples: list[Sample] = field(default_factory=list)
    read_back: ReadBack | None = None
    all_dropped_at: float | None = None  # s after the last reader opened
    end_rss: int = 0  # after the clients read back and closed

    @property
    def peak_rss(self) -> int:
        return max((s.rss for s in self.samples), default=0)

    @property
    def stalled_rss(self) -> int:
        """RSS while every reader was still there: before the first drop."""
        before = [s.rss for s in self.samples if not (s.dropped_client or s.dropped_telegram)]
        return max(before, default=0)


@dataclass
class Contender:
    name: str
    idle_rss: int = 0
    has_budget: bool = False
    rounds: list[Run] = field(default_factory=list)
    fresh_download_ok: bool = False


def upload(svc: Service, data: bytes) -> str:
    request = urllib.request.Request(
        f"{svc.url}/api/files/bench.bin",
        data=data,
        method="PUT",
        headers={"Authorization": f"Bearer {svc.key}"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.loads(response.read())
    if reply.get("size_bytes") != len(data):
        raise Broken(f"upload: {reply}")
    return str(reply["public_id"])


def download_ok(svc: Service, path: str, digest: str) -> bool:
    with contextlib.suppress(OSError):
        sha = hashlib.sha256()
        with urllib.request.urlopen(f"{svc.url}{path}", timeout=600) as response:
            while piece := response.read(MiB):
                sha.update(piece)
        return sha.hexdigest() == digest
    return False


def watch_round(config: Config, svc: Service, sim: SimulatorProcess, path: str) -> Run:
    run = Run()
    # The drop counters count since the service started; a round reports its own.
    before = sample(svc, sim, time.monotonic())
    clients: list[Client] = []
    try:
        for _ in range(config.readers):
            clients.append(open_stalled(svc, path))
        run.readers_opened = len(clients)
        since = time.monotonic()
        settled = 0
        while time.monotonic() - since < config.watch:
            now = sample(svc, sim, since)
            if now.dropped_client is not None:
                now.dropped_client -= before.dropped_client or 0
            if now.dropped_telegram is not None:
                now.dropped_telegram -= before.dropped_telegram or 0
            run.samples.append(now)
            dropped = (now.dropped_client or 0) + (now.dropped_telegram or 0)
            if run.all_dropped_at is None and dropped >= config.readers:
                run.all_dropped_at = now.at
            given_back = now.telegram_downloads == 0 and now.held_sockets == 0
            settled = settled + 1 if run.all_dropped_at is not None and given_back else 0
            if settled >= 8:  # 2 s with everything given back
                break
            time.sleep(SAMPLE_EVERY)
        last = run.samples[-1]
        print(
            f"watched {last.at:.0f} s: RSS {_mib(last.rss)}, Telegram downloads "
            f"{last.telegram_downloads}, sockets held {last.held_sockets}",
            flush=True,
        )
        run.read_back = read_back(clients)
    finally:
        for client in clients:
            client.sock.close()
    time.sleep(2)
    run.end_rss = rss_bytes(svc.process.pid)
    return run


def measure(name: str, config: Config, workdir: Path, code: Path | None, data: bytes) -> Contender:
    contender = Contender(name=name)
    digest = hashlib.sha256(data).hexdigest()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"\n== {name}", flush=True)
    with (
        simulator_process(workdir, bots=config.bots, cwd=workdir) as sim,
        service(config, sim, workdir, code) as svc,
    ):
        path = f"/f/{upload(svc, data)}"
        if not download_ok(svc, path, digest):
            raise Broken(f"{name}: the warm-up download did not come back whole")
        time.sleep(2)
        contender.idle_rss = rss_bytes(svc.process.pid)
        contender.has_budget = bool(scrape(svc))
        for number in range(1, config.rounds + 1):
            print(
                f"round {number}: RSS {_mib(rss_bytes(svc.process.pid))}; "
                f"opening {config.readers} readers",
                flush=True,
            )
            contender.rounds.append(watch_round(config, svc, sim, path))
        contender.fresh_download_ok = download_ok(svc, path, digest)
        if svc.process.poll() is not None:
            raise Broken(f"{name}: the service exited with {svc.process.returncode}")
    return contender


# --- report ---------------------------------------------------------------------------------


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / MiB:.1f} MiB"


def _peak(run: Run, attr: str) -> float | None:
    values = [getattr(s, attr) for s in run.samples if getattr(s, attr) is not None]
    return max(values) if values else None


def rows(contender: Contender) -> list[tuple[str, str]]:
    run = contender.rounds[0] if contender.rounds else Run()
    idle = contender.idle_rss
    last = run.samples[-1] if run.samples else None
    at_end = (str(last.telegram_downloads), str(last.held_sockets)) if last else ("n/a", "n/a")
    back = run.read_back or ReadBack()
    dropped = "n/a (no budget)"
    if contender.has_budget and last is not None:
        when = f"{run.all_dropped_at:.1f} s" if run.all_dropped_at is not None else "not all"
        first = next(
            (s.at for s in run.samples if (s.dropped_client or 0) + (s.dropped_telegram or 0)),
            None,
        )
        dropped = (
            f"{(last.dropped_client or 0):.0f} client stalled + "
            f"{(last.dropped_telegram or 0):.0f} no byte; first at "
            f"{'n/a' if first is None else f'{first:.1f} s'}, all by {when}"
        )
    table = [
        ("readers opened (HTTP 200, head read)", str(run.readers_opened)),
        ("idle RSS (after a warm-up download)", _mib(idle)),
        (
            "RSS while every reader is stalled (before any drop), over idle",
            f"{_mib(run.stalled_rss)} (+{_mib(run.stalled_rss - idle)})",
        ),
        ("peak RSS, over idle", f"{_mib(run.peak_rss)} (+{_mib(run.peak_rss - idle)})"),
        ("peak download buffer in use (/metrics)", _mib(_peak(run, "buffer_in_use"))),
        (
            "peak download connections in use (/metrics)",
            "n/a" if (v := _peak(run, "connections_in_use")) is None else f"{v:.0f}",
        ),
        (
            "peak Telegram downloads in flight (simulator) / at the end",
            f"{_peak(run, 'telegram_downloads') or 0} / {at_end[0]}",
        ),
        ("readers dropped (s after the last one opened)", dropped),
        ("client connections the service holds at the end", at_end[1]),
        (
            "clients reading again: cut short / still arriving / complete",
            f"{back.cut_short} / {back.still_arriving} / {back.complete}",
        ),
        ("RSS after the clients closed", _mib(run.end_rss)),
    ]
    if len(contender.rounds) > 1:
        table.append(
            (
                "RSS after each round's clients closed",
                ", ".join(_mib(r.end_rss) for r in contender.rounds),
            )
        )
    table.append(
        (
            "a new download afterwards comes back whole",
            "yes" if contender.fresh_download_ok else "NO",
        )
    )
    return table


def markdown(contenders: list[Contender]) -> str:
    table = [rows(c) for c in contenders]
    return quantity_table(
        [c.name for c in contenders],
        [(label, [t[index][1] for t in table]) for index, (label, _) in enumerate(table[0])],
    )


def describe(config: Config) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in config.service_env().items())
    return (
        f"{config.readers} stalled readers of one {config.size // MiB} MiB file "
        f"(CHUNK_SIZE {config.chunk_size // MiB} MiB, {config.bots} bots, simulator downloads "
        f"unlimited); service: {settings}; budget bound {config.bound / MiB:.0f} MiB "
        f"(DOWNLOAD_BUFFER_BYTES + DOWNLOAD_CONNECTIONS x 64 KiB), connection cap "
        f"{config.connection_cap}; watch up to {config.watch:g} s"
    )


def main(argv: list[str] | None = None) -> int:
    config, json_path = parse_args(argv)
    print(describe(config), flush=True)
    runs: list[Contender] = []
    broken: list[str] = []
    data = os.urandom(config.size)
    with contextlib.ExitStack() as stack:
        if config.workdir is not None:
            workdir = config.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dl-bench-")))
        try:
            if config.baseline is not None:
                code = extract(config.baseline, workdir / "baseline-code")
                runs.append(
                    measure(f"before ({config.baseline})", config, workdir / "before", code, data)
                )
            runs.append(measure("after (this checkout)", config, workdir / "after", None, data))
        except Broken as exc:
            broken.append(str(exc))
        except KeyboardInterrupt:
            broken.append("interrupted")
    if runs:
        print()
        print(describe(config))
        print()
        print(markdown(runs))
    for problem in broken:
        print(f"BROKEN: {problem}", file=sys.stderr)
    if json_path is not None:
        document = {"config": asdict(config), "contenders": [asdict(run) for run in runs]}
        json_path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 1 if broken else 0


if __name__ == "__main__":
    run_main(main)
