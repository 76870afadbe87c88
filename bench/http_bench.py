"""End-to-end HTTP benchmark: one big file up and down through the real service.

Everything runs as separate processes, as in production: the Telegram Bot API
simulator (``teleuploader telegram-sim``), the service (``teleuploader serve``
on a fresh, migrated SQLite database) and curl as the client. The bench itself
only creates the test file, hashes what comes back and watches the service.

1. The simulator gets ``--bots`` tokens, a per-bot upload concurrency limit of
   1 (a second concurrent upload on a token gets Telegram's 429), a bandwidth
   limit per upload connection (default 4 MiB/s), Telegram's flood limit of 20
   messages per bot per minute into the chat, and an unlimited (or
   ``--download-bandwidth``) download link.
2. The service runs with its production settings apart from CHUNK_SIZE in
   ``--small``: in particular SENDS_PER_MINUTE is left at its default (20), so
   the per-bot pacing is on. At 4 MiB/s a 19 MiB chunk takes ~4.75 s, i.e. at
   most ~12.6 sends per bot per minute, so that pacing does not bind.
3. ``curl -T file URL`` uploads ``--size`` random bytes (``PUT /api/files/{name}``);
   the reply's sha256 and size must be the file's.
4. ``curl URL`` downloads it (``GET /f/{public_id}``); its output is piped into
   this process and hashed as it arrives, which also gives the time of the
   first *body* byte (from spawning curl, so it includes curl's start-up of a
   few ms). curl's ``time_starttransfer`` (the first byte of the response,
   i.e. the status line and headers) is reported as well.
5. The service's memory: VmHWM (the kernel's peak RSS) is reset through
   ``/proc/<pid>/clear_refs`` at the start of each phase and read at its end,
   and VmRSS is sampled every 20 ms meanwhile; a phase's peak is the larger of
   the two. The process's overall peak is the largest phase peak (what VmHWM
   would read at the end without the resets).
6. One chunk fetch, the yardstick for the time to first byte: the bench reads
   the file's first chunk (bot and file_id) from the database and fetches it
   from the simulator itself with curl, ``getFile`` then the whole file, as the
   service has to. Median of three.
7. With unlimited downloads on loopback a whole 19 MiB chunk arrives in about
   as long as the service's fixed per-request work takes, so that comparison
   says little about streaming. A probe therefore also sets the simulator's
   download bandwidth to ``--probe-bandwidth`` (default 4 MiB/s, like the
   uploads), measures the first body byte of a new download (curl is stopped
   then), checks that the service's Telegram downloads stop once the client is
   gone, fetches one chunk at that bandwidth, and restores the setting.
8. The service runs under a fake systemd watchdog (NOTIFY_SOCKET, a ping every
   0.1 s): per phase, the longest gap between two pings, as a multiple of the
   ping interval, shows how long its event loop stalled under load.

Targets (reported PASS/FAIL, never the exit status; CI machines vary):

- upload time <= 1.15 x ideal, ideal = size / (bots x per-upload bandwidth);
- time to first body byte <= one chunk fetch (at the configured and at the
  probe bandwidth);
- peak RSS <= 100 MiB + (bots + 2) x chunk size;
- no 429 from Telegram, and one message per chunk;
- once the probe's client has gone, no Telegram download is left running
  (checked for up to 10 s).

The exit status is non-zero only when something is broken: a process failed
to start or died, the upload or download failed, a hash or size did not match.

    .venv/bin/python bench/http_bench.py                 # 1 GiB, 19 MiB chunks
    .venv/bin/python bench/http_bench.py --small         # 48 MiB, 4 MiB chunks, for CI
    .venv/bin/python bench/http_bench.py --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import heapq
import itertools
import json
import math
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import (
    CHAT_ID,
    Broken,
    GiB,
    MemoryWatch,
    MiB,
    PhaseMemory,
    SimulatorProcess,
    cpu_seconds,
    free_port,
    parse_size,
    proc_status,
    run_main,
    served,
    service_env,
    simulator_process,
)

from app.config.settings import MAX_CHUNK_SIZE, Settings

TARGET_UPLOAD_RATIO = 1.15
RSS_BASE_ALLOWANCE = 100 * MiB
TELEGRAM_SENDS_PER_MINUTE = 20
CHUNK_FETCH_REPEATS = 3
READ_SIZE = 1 * MiB
FILE_NAME = "bench.bin"
DRAIN_WAIT = 10.0  # seconds to wait for Telegram downloads to stop after a client left
# The service runs under a fake systemd watchdog: WATCHDOG_USEC=0.2 s, so it
# pings every 0.1 s from its event loop, and systemd would restart it after a
# gap of 0.2 s. The longest gap under load shows how long the loop stalls.
WATCHDOG_USEC = 200_000


# --- settings -------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    size: int
    chunk_size: int


FULL = Preset(size=1 * GiB, chunk_size=MAX_CHUNK_SIZE)
SMALL = Preset(size=48 * MiB, chunk_size=4 * MiB)


@dataclass(frozen=True)
class BenchConfig:
    size: int
    chunk_size: int
    bots: int
    upload_bandwidth: int  # bytes/s per upload connection, simulated
    download_bandwidth: int | None  # bytes/s per download connection; None: unlimited
    probe_bandwidth: int | None  # bytes/s for the TTFB probe; None: no probe
    sim_sends_per_minute: int | None  # the simulator's flood limit; None: off
    log_level: str
    timeout: float  # seconds allowed for the upload and for the download
    small: bool
    workdir: Path | None
    service_env: tuple[tuple[str, str], ...] = ()

    @property
    def ideal_upload_s(self) -> float:
        return self.size / (self.bots * self.upload_bandwidth)

    def planned_chunk_sizes(self) -> list[int]:
        """CHUNK_SIZE chunks and a tail: what the service cuts when it does not
        plan chunk sizes itself (the real sizes are read from its database)."""
        sizes = [self.chunk_size] * (self.size // self.chunk_size)
        if self.size % self.chunk_size:
            sizes.append(self.size % self.chunk_size)
        return sizes

    def whole_chunk_bound_s(self, sizes: list[int]) -> float:
        """The best possible upload time when a chunk cannot be split across
        bots: the busiest bot's bytes / bandwidth, chunks dealt largest first."""
        loads = [0] * self.bots
        for size in sorted(sizes, reverse=True):
            heapq.heapreplace(loads, loads[0] + size)
        return max(loads) / self.upload_bandwidth

    @property
    def rss_target(self) -> int:
        return RSS_BASE_ALLOWANCE + (self.bots + 2) * self.chunk_size


def parse_args(argv: list[str] | None = None) -> tuple[BenchConfig, Path | None]:
    parser = argparse.ArgumentParser(
        description="Upload and download one file through the real service with curl, "
        "against the Telegram simulator; report times, memory and Telegram counters.",
    )
    parser.add_argument(
        "--size", type=parse_size, help="bytes in the test file (1GiB; suffixes k/M/G)"
    )
    parser.add_argument(
        "--chunk-size", type=parse_size, help="the service's CHUNK_SIZE (19MiB, the maximum)"
    )
    parser.add_argument("--bots", type=int, default=6, help="bot tokens (6)")
    parser.add_argument(
        "--upload-bandwidth",
        type=parse_size,
        default=4 * MiB,
        help="simulated bandwidth per upload connection, bytes/s (4MiB)",
    )
    parser.add_argument(
        "--download-bandwidth",
        type=parse_size,
        default=0,
        help="simulated bandwidth per download connection, bytes/s (0 = unlimited)",
    )
    parser.add_argument(
        "--probe-bandwidth",
        type=parse_size,
        default=4 * MiB,
        help="download bandwidth of the extra time-to-first-byte probe, bytes/s (4MiB; "
        "0 = no probe; skipped when --download-bandwidth is set)",
    )
    parser.add_argument(
        "--sim-sends-per-minute",
        type=int,
        default=TELEGRAM_SENDS_PER_MINUTE,
        help="the simulator's per-bot flood limit into the chat, as Telegram's "
        f"({TELEGRAM_SENDS_PER_MINUTE}; 0 = off)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the service's LOG_LEVEL (INFO, as in production)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds allowed for the upload and for the download (10 x ideal, at least 120)",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"quick run for CI: {SMALL.size // MiB} MiB in {SMALL.chunk_size // MiB} MiB "
        "chunks (explicit flags still win)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the database, logs and test file here (default: a temp dir, removed)",
    )
    parser.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the service process, for experiments "
        "(e.g. MALLOC_MMAP_THRESHOLD_=131072); repeatable",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    extra_env = []
    for item in args.service_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--service-env wants NAME=VALUE, not {item!r}")
        extra_env.append((name, value))
    preset = SMALL if args.small else FULL
    size = args.size if args.size is not None else preset.size
    chunk_size = args.chunk_size if args.chunk_size is not None else preset.chunk_size
    if size < 1:
        parser.error("--size must be at least 1 byte")
    if not 0 < chunk_size <= MAX_CHUNK_SIZE:
        parser.error(f"--chunk-size must be between 1 and {MAX_CHUNK_SIZE} bytes (19 MiB)")
    if args.bots < 1:
        parser.error("--bots must be at least 1")
    if args.upload_bandwidth < 1:
        parser.error("--upload-bandwidth must be at least 1 byte/s")
    for name in ("download_bandwidth", "probe_bandwidth", "sim_sends_per_minute"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} cannot be negative")
    ideal = size / (args.bots * args.upload_bandwidth)
    config = BenchConfig(
        size=size,
        chunk_size=chunk_size,
        bots=args.bots,
        upload_bandwidth=args.upload_bandwidth,
        download_bandwidth=args.download_bandwidth or None,
        probe_bandwidth=(args.probe_bandwidth or None) if not args.download_bandwidth else None,
        sim_sends_per_minute=args.sim_sends_per_minute or None,
        log_level=args.log_level,
        timeout=args.timeout if args.timeout is not None else max(120.0, 10 * ideal),
        small=args.small,
        workdir=args.workdir,
        service_env=tuple(extra_env),
    )
    return config, args.json


# --- processes --------------------------------------------------------------------------


def simulator(
    config: BenchConfig, workdir: Path
) -> contextlib.AbstractContextManager[SimulatorProcess]:
    args = ["--concurrency-limit", "1", "--upload-bandwidth", str(config.upload_bandwidth)]
    if config.download_bandwidth is not None:
        args += ["--download-bandwidth", str(config.download_bandwidth)]
    if config.sim_sends_per_minute is not None:
        args += ["--sends-per-minute", str(config.sim_sends_per_minute)]
    return simulator_process(workdir, bots=config.bots, args=args, cwd=workdir)


@dataclass
class Service:
    url: str
    key: str
    database: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    watchdog: WatchdogWatch


@contextlib.contextmanager
def service(config: BenchConfig, sim: SimulatorProcess, workdir: Path) -> Iterator[Service]:
    """Migrate a fresh SQLite database, create a key, run `teleuploader serve`
    (common.served), with a fake systemd watchdog socket for serve."""
    database = workdir / "teleuploader.db"
    for stale in (database, *(database.with_name(database.name + s) for s in ("-wal", "-shm"))):
        stale.unlink(missing_ok=True)  # a --workdir used before: start fresh
    port = free_port()
    # Only what the bench must set; SENDS_PER_MINUTE and the rest keep their defaults.
    env = service_env(
        {
            "BOT_TOKENS": ",".join(sim.tokens),
            "STORAGE_CHAT_ID": str(CHAT_ID),
            "TELEGRAM_API_BASE": sim.url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "CHUNK_SIZE": str(config.chunk_size),
            "MAX_UPLOAD_SIZE": str(max(config.size, 50 * GiB)),
            "LOG_LEVEL": config.log_level,
            "LOG_FORMAT": "json",
            **dict(config.service_env),
        }
    )
    notify_socket = workdir / "notify.sock"
    notify_socket.unlink(missing_ok=True)
    watch = {"NOTIFY_SOCKET": str(notify_socket), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    with (
        WatchdogWatch(notify_socket) as watchdog,
        served(env, workdir, serve_env=watch) as running_service,
    ):
        yield Service(
            url=running_service.url,
            key=running_service.key,
            database=database,
            process=running_service.process,
            log_path=running_service.log_path,
            watchdog=watchdog,
        )


# --- watching the service's memory and CPU --------------------------------------------------


@dataclass
class PhaseWatchdog:
    pings: int
    longest_gap_s: float | None  # between two pings in the phase (None: fewer than two)

    @property
    def ratio(self) -> float | None:
        """The longest gap as a multiple of the ping interval (WATCHDOG_USEC / 2)."""
        interval = WATCHDOG_USEC / 2 / 1_000_000
        return None if self.longest_gap_s is None else self.longest_gap_s / interval


class WatchdogWatch:
    """Plays systemd's side of sd_notify: receives the service's datagrams on
    `path` in a thread and notes when each WATCHDOG=1 arrived."""

    def __init__(self, path: Path) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._socket.settimeout(0.2)
        self._lock = threading.Lock()
        self._pings: list[float] = []
        self._begun = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def __enter__(self) -> WatchdogWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._socket.recv(4096)
            except TimeoutError:
                continue
            if b"WATCHDOG=1" in message.split(b"\n"):
                with self._lock:
                    self._pings.append(time.monotonic())

    def begin(self) -> None:
        with self._lock:
            self._begun = time.monotonic()

    def end(self) -> PhaseWatchdog:
        with self._lock:
            pings = [at for at in self._pings if at >= self._begun]
        gaps = [later - earlier for earlier, later in itertools.pairwise(pings)]
        return PhaseWatchdog(pings=len(pings), longest_gap_s=max(gaps, default=None))


# --- the test file ------------------------------------------------------------------------


def make_test_file(path: Path, size: int) -> str:
    """`size` random bytes in `path`; returns their sha256."""
    digest = hashlib.sha256()
    block = 8 * MiB
    with path.open("wb") as out:
        left = size
        while left:
            data = os.urandom(min(block, left))
            digest.update(data)
            out.write(data)
            left -= len(data)
    return digest.hexdigest()


# --- curl -------------------------------------------------------------------------------------


def _curl_json(text: str) -> dict[str, Any]:
    """The last line of curl's `-w '%{json}'` output."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                parsed: dict[str, Any] = json.loads(line)
                return parsed
    return {}


def _enlarge_pipe(fd: int) -> None:
    """Fewer, larger reads from curl (Linux; capped by /proc/sys/fs/pipe-max-size)."""
    with contextlib.suppress(OSError, AttributeError, ImportError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, READ_SIZE)


@dataclass
class UploadResult:
    http_code: int
    curl_exit: int
    wall_s: float  # around the curl process, spawn included
    time_total_s: float  # curl's own
    time_pretransfer_s: float
    time_starttransfer_s: float  # first byte of the reply: after the whole body was taken
    size_uploaded: int
    reply: dict[str, Any]
    error: str


def upload(service: Service, path: Path, headers_file: Path, timeout: float) -> UploadResult:
    reply_path = path.with_name("upload-reply.json")
    reply_path.unlink(missing_ok=True)
    command = [
        "curl",
        "--silent",
        "--show-error",
        "-T",
        str(path),
        "-H",
        f"@{headers_file}",
        "-o",
        str(reply_path),
        "-w",
        "%{json}",
        "--max-time",
        f"{timeout:.0f}",
        f"{service.url}/api/files/{FILE_NAME}",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    info = _curl_json(done.stdout)
    reply: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(reply_path.read_text())
        if isinstance(loaded, dict):
            reply = loaded
    return UploadResult(
        http_code=int(info.get("response_code") or info.get("http_code") or 0),
        curl_exit=done.returncode,
        wall_s=wall,
        time_total_s=float(info.get("time_total", wall)),
        time_pretransfer_s=float(info.get("time_pretransfer", 0.0)),
        time_starttransfer_s=float(info.get("time_starttransfer", 0.0)),
        size_uploaded=int(info.get("size_upload", 0)),
        reply=reply,
        error=done.stderr.strip(),
    )


@dataclass
class DownloadResult:
    http_code: int
    curl_exit: int
    bytes_received: int
    sha256: str
    wall_s: float  # from spawning curl to its exit, measured here
    time_total_s: float  # curl's own
    time_starttransfer_s: float  # curl: first byte of the response (its headers)
    first_body_byte_s: float | None  # here: first byte of the body, curl's spawn included
    error: str


def _curl_download_command(url: str, headers_file: Path, timeout: float) -> list[str]:
    return [
        "curl",
        "--silent",
        "--show-error",
        "-H",
        f"@{headers_file}",
        "-o",
        "-",
        "-w",
        "%{stderr}%{json}",
        "--max-time",
        f"{timeout:.0f}",
        url,
    ]


def download(url: str, headers_file: Path, timeout: float) -> DownloadResult:
    """curl's output piped in here and hashed as it arrives."""
    digest = hashlib.sha256()
    view = memoryview(bytearray(READ_SIZE))
    received = 0
    first: float | None = None
    started = time.perf_counter()
    command = _curl_download_command(url, headers_file, timeout)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        _enlarge_pipe(process.stdout.fileno())
        while count := os.readv(process.stdout.fileno(), [view]):
            if first is None:
                first = time.perf_counter() - started
            digest.update(view[:count])
            received += count
        stderr = process.stderr.read().decode(errors="replace")
        process.wait()
    wall = time.perf_counter() - started
    info = _curl_json(stderr)
    error = "\n".join(line for line in stderr.splitlines() if not line.startswith("{"))
    return DownloadResult(
        http_code=int(info.get("response_code") or info.get("http_code") or 0),
        curl_exit=process.returncode,
        bytes_received=received,
        sha256=digest.hexdigest(),
        wall_s=wall,
        time_total_s=float(info.get("time_total", wall)),
        time_starttransfer_s=float(info.get("time_starttransfer", 0.0)),
        first_body_byte_s=first,
        error=error.strip(),
    )


def first_body_byte(url: str, headers_file: Path, timeout: float) -> float | None:
    """Seconds from spawning curl to the first byte of the body; curl is stopped then."""
    started = time.perf_counter()
    command = _curl_download_command(url, headers_file, timeout)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0
    ) as process:
        assert process.stdout is not None
        got = os.read(process.stdout.fileno(), READ_SIZE)
        first = time.perf_counter() - started if got else None
        process.terminate()
        process.wait()
    return first


@dataclass
class ChunkFetch:
    """One chunk read straight from the simulator: getFile, then the file."""

    chunk_bytes: int
    bot_id: int
    getfile_s: list[float] = field(default_factory=list)
    download_s: list[float] = field(default_factory=list)
    first_byte_s: list[float] = field(default_factory=list)  # of the file download

    @property
    def totals(self) -> list[float]:
        return [a + b for a, b in zip(self.getfile_s, self.download_s, strict=True)]

    @property
    def median_s(self) -> float:
        return statistics.median(self.totals) if self.totals else float("nan")


def chunk_sizes(database: Path, public_id: str) -> list[int]:
    """The sizes of the chunks the service cut the object into, in order."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT c.size FROM pieces p "
            "JOIN chunks c ON c.id = p.chunk_id JOIN objects o ON o.id = p.object_id "
            "WHERE o.public_id = ? ORDER BY p.start",
            (public_id,),
        ).fetchall()
    return [int(row[0]) for row in rows]


def first_chunk(database: Path, public_id: str) -> tuple[int, str, int]:
    """(bot_id, file_id, size) of the chunk holding the object's first byte."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        row = db.execute(
            "SELECT cc.bot_id, cc.file_id, c.size FROM pieces p "
            "JOIN chunks c ON c.id = p.chunk_id JOIN objects o ON o.id = p.object_id "
            "JOIN chunk_copies cc ON cc.chunk_id = c.id "
            "WHERE o.public_id = ? ORDER BY p.start, cc.id LIMIT 1",
            (public_id,),
        ).fetchone()
    if row is None:
        raise Broken(f"the database has no chunk for object {public_id}")
    return int(row[0]), str(row[1]), int(row[2])


def measure_chunk_fetch(
    sim: SimulatorProcess, database: Path, public_id: str, repeats: int = CHUNK_FETCH_REPEATS
) -> ChunkFetch:
    """What the service must do for a chunk, done by curl: getFile, then the file."""
    bot_id, file_id, size = first_chunk(database, public_id)
    token = next((t for t in sim.tokens if t.split(":", 1)[0] == str(bot_id)), None)
    if token is None:
        raise Broken(f"chunk stored by bot {bot_id}, which the simulator does not know")
    result = ChunkFetch(chunk_bytes=size, bot_id=bot_id)
    # The token goes in the URL, as Telegram wants; it is a simulator token.
    getfile_url = f"{sim.url}/bot{token}/getFile?file_id={urllib.parse.quote(file_id, safe='')}"
    for _ in range(repeats):
        got = subprocess.run(
            ["curl", "-sS", "-w", "%{stderr}%{json}", "-o", "-", getfile_url],
            capture_output=True,
            check=False,
        )
        answer: Any = None
        with contextlib.suppress(ValueError):
            answer = json.loads(got.stdout or b"{}")
        result_field = answer.get("result") if isinstance(answer, dict) else None
        path = result_field.get("file_path") if isinstance(result_field, dict) else None
        if got.returncode != 0 or not path:
            raise Broken(f"getFile on the simulator failed: {got.stdout[:200]!r}")
        file_url = f"{sim.url}/file/bot{token}/{path}"
        fetched = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{json}", file_url],
            capture_output=True,
            text=True,
            check=False,
        )
        info = _curl_json(fetched.stdout)
        if fetched.returncode != 0 or int(info.get("size_download", -1)) != size:
            raise Broken(f"downloading a chunk from the simulator failed: {fetched.stderr}")
        result.getfile_s.append(float(_curl_json(got.stderr.decode()).get("time_total", 0.0)))
        result.download_s.append(float(info["time_total"]))
        result.first_byte_s.append(float(info["time_starttransfer"]))
    return result


# --- simulator counters --------------------------------------------------------------------


@dataclass
class TelegramCounters:
    send_document_calls: int
    messages_stored: int
    rate_limited: int  # 429s the simulator gave, any reason
    errors: dict[str, int]
    get_file_calls: int
    file_downloads: int
    max_concurrent_uploads_per_token: int
    max_concurrent_calls_per_token: int
    sends_per_bot: dict[str, int]
    bytes_received: int
    bytes_sent: int


def _messages(stats: dict[str, Any]) -> int:
    return sum(int(chat["messages"]) for chat in stats["chats"].values())


def _downloads_in_flight(stats: dict[str, Any]) -> int:
    return sum(int(bot["downloads_in_flight"]) for bot in stats["bots"].values())


def counters(stats: dict[str, Any], messages_before: int) -> TelegramCounters:
    bots: dict[str, dict[str, Any]] = stats["bots"]
    errors: dict[str, int] = {}
    for bot in bots.values():
        for status, count in bot["errors"].items():
            errors[str(status)] = errors.get(str(status), 0) + int(count)
    return TelegramCounters(
        send_document_calls=sum(int(b["calls"].get("sendDocument", 0)) for b in bots.values()),
        messages_stored=_messages(stats) - messages_before,
        rate_limited=sum(int(b["rate_limited"]) for b in bots.values()),
        errors=errors,
        get_file_calls=sum(int(b["calls"].get("getFile", 0)) for b in bots.values()),
        file_downloads=sum(int(b["downloads"]) for b in bots.values()),
        max_concurrent_uploads_per_token=max(
            int(b["max_concurrent_uploads"]) for b in bots.values()
        ),
        max_concurrent_calls_per_token=max(int(b["max_concurrent_calls"]) for b in bots.values()),
        sends_per_bot={k: int(b["calls"].get("sendDocument", 0)) for k, b in bots.items()},
        bytes_received=sum(int(b["bytes_received"]) for b in bots.values()),
        bytes_sent=sum(int(b["bytes_sent"]) for b in bots.values()),
    )


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Phase:
    memory: PhaseMemory
    service_cpu_s: float
    simulator_cpu_s: float
    telegram: TelegramCounters | None = None
    watchdog: PhaseWatchdog | None = None


@dataclass
class Probe:
    """Time to first byte with the simulator's downloads throttled."""

    bandwidth: int
    first_body_byte_s: float | None
    chunk_fetch: ChunkFetch
    # Telegram downloads the service still had running this long after the
    # client went away (None: they had all stopped within DRAIN_WAIT seconds).
    downloads_left_after_s: float | None
    downloads_left: int


@dataclass
class Report:
    config: dict[str, Any]
    sha256: str = ""
    startup: Phase | None = None
    upload: UploadResult | None = None
    upload_ok: bool = False
    upload_phase: Phase | None = None
    download: DownloadResult | None = None
    download_ok: bool = False
    download_phase: Phase | None = None
    chunk_sizes: list[int] = field(default_factory=list)  # as stored, from the database
    chunk_fetch: ChunkFetch | None = None
    probe: Probe | None = None
    broken: list[str] = field(default_factory=list)

    def phases(self) -> list[Phase]:
        return [p for p in (self.startup, self.upload_phase, self.download_phase) if p]

    def sizes(self, config: BenchConfig) -> list[int]:
        """The chunks as stored, or as planned when the upload did not get that far."""
        return self.chunk_sizes or config.planned_chunk_sizes()


def check_upload(config: BenchConfig, report: Report) -> None:
    up = report.upload
    assert up is not None
    if up.curl_exit != 0 or up.http_code != 201:
        raise Broken(
            f"upload failed: curl exit {up.curl_exit}, HTTP {up.http_code}, "
            f"{up.error or json.dumps(up.reply)[:500]}"
        )
    if up.reply.get("sha256") != report.sha256:
        raise Broken(f"upload: sha256 {up.reply.get('sha256')} in the reply, file {report.sha256}")
    if up.reply.get("size_bytes") != config.size:
        raise Broken(f"upload: size {up.reply.get('size_bytes')} in the reply, file {config.size}")
    report.upload_ok = True


def check_download(config: BenchConfig, report: Report) -> None:
    down = report.download
    assert down is not None
    if down.curl_exit != 0 or down.http_code != 200:
        raise Broken(
            f"download failed: curl exit {down.curl_exit}, HTTP {down.http_code}: {down.error}"
        )
    if down.bytes_received != config.size:
        raise Broken(f"download: {down.bytes_received} bytes received of {config.size}")
    if down.sha256 != report.sha256:
        raise Broken(f"download: sha256 {down.sha256}, file {report.sha256}")
    report.download_ok = True


def ttfb_probe(
    config: BenchConfig,
    sim: SimulatorProcess,
    svc: Service,
    url: str,
    headers_file: Path,
    public_id: str,
) -> Probe:
    """First body byte and one chunk fetch with throttled downloads, then restore."""
    assert config.probe_bandwidth is not None
    sim.configure(download_bandwidth=config.probe_bandwidth)
    try:
        first = first_body_byte(url, headers_file, config.timeout)
        # The client is gone: the service's Telegram downloads should stop too.
        left, left_after = 0, None
        deadline = time.monotonic() + DRAIN_WAIT
        started = time.monotonic()
        while (left := _downloads_in_flight(sim.stats())) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            left_after = time.monotonic() - started
        fetch = measure_chunk_fetch(sim, svc.database, public_id, repeats=1)
    finally:
        sim.configure(download_bandwidth=config.download_bandwidth)
    return Probe(
        bandwidth=config.probe_bandwidth,
        first_body_byte_s=first,
        chunk_fetch=fetch,
        downloads_left_after_s=left_after,
        downloads_left=left,
    )


def run_phases(config: BenchConfig, workdir: Path, report: Report) -> None:
    print(describe(config), flush=True)
    test_file = workdir / FILE_NAME
    started = time.perf_counter()
    report.sha256 = make_test_file(test_file, config.size)
    print(
        f"test file: {_fmt_mib(config.size)} of random bytes in "
        f"{time.perf_counter() - started:.1f} s, sha256 {report.sha256}",
        flush=True,
    )
    with simulator(config, workdir) as sim, service(config, sim, workdir) as svc:
        pid = svc.process.pid
        print(f"simulator pid {sim.process.pid} at {sim.url}; service pid {pid} at {svc.url}")
        headers_file = workdir / "headers.txt"
        headers_file.write_text(f"Authorization: Bearer {svc.key}\n")
        headers_file.chmod(0o600)
        with MemoryWatch(pid) as memory:
            # Startup: everything before the first request (VmHWM since exec).
            status = proc_status(pid)
            hwm, rss = status.get("VmHWM", 0), status.get("VmRSS", 0)
            report.startup = Phase(
                memory=PhaseMemory(hwm, hwm, rss, rss, 1),
                service_cpu_s=cpu_seconds(pid),
                simulator_cpu_s=cpu_seconds(sim.process.pid),
            )

            def begin() -> tuple[float, float, int]:
                sim.reset_stats()
                memory.begin()
                svc.watchdog.begin()
                return cpu_seconds(pid), cpu_seconds(sim.process.pid), _messages(sim.stats())

            def end(begun: tuple[float, float, int]) -> Phase:
                mem = memory.end()
                return Phase(
                    memory=mem,
                    service_cpu_s=cpu_seconds(pid) - begun[0],
                    simulator_cpu_s=cpu_seconds(sim.process.pid) - begun[1],
                    telegram=counters(sim.stats(), begun[2]),
                    watchdog=svc.watchdog.end(),
                )

            print(f"upload: curl -T {FILE_NAME} {svc.url}/api/files/{FILE_NAME}", flush=True)
            begun = begin()
            report.upload = upload(svc, test_file, headers_file, config.timeout)
            report.upload_phase = end(begun)
            print(f"  {report.upload.time_total_s:.2f} s, HTTP {report.upload.http_code}")
            check_upload(config, report)
            public_id = str(report.upload.reply["public_id"])
            report.chunk_sizes = chunk_sizes(svc.database, public_id)

            url = f"{svc.url}/f/{public_id}"
            print(f"download: curl {url} | sha256", flush=True)
            begun = begin()
            report.download = download(url, headers_file, config.timeout)
            report.download_phase = end(begun)
            print(f"  {report.download.time_total_s:.2f} s, HTTP {report.download.http_code}")
            check_download(config, report)

        print("one chunk fetch straight from the simulator (getFile + file) ...", flush=True)
        report.chunk_fetch = measure_chunk_fetch(sim, svc.database, public_id)
        if config.probe_bandwidth is not None:
            print(
                f"time-to-first-byte probe at {_fmt_rate(config.probe_bandwidth)} downloads ...",
                flush=True,
            )
            report.probe = ttfb_probe(config, sim, svc, url, headers_file, public_id)
        if svc.process.poll() is not None:
            raise Broken(f"the service exited with {svc.process.returncode}")


# --- reporting ----------------------------------------------------------------------------


def _fmt_mib(value: float) -> str:
    return f"{value / MiB:.1f} MiB"


def _fmt_rate(value: float) -> str:
    return f"{value / MiB:g} MiB/s"


def _fmt_ms(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.2f} s"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def targets(config: BenchConfig, report: Report) -> dict[str, bool | None]:
    up, down, fetch, probe = report.upload, report.download, report.chunk_fetch, report.probe
    peaks = [p.memory.peak for p in report.phases()]
    telegram = report.upload_phase.telegram if report.upload_phase else None
    ttfb = down.first_body_byte_s if down and report.download_ok else None
    probe_ttfb = probe.first_body_byte_s if probe else None
    return {
        "upload_ratio": (
            up.time_total_s / config.ideal_upload_s <= TARGET_UPLOAD_RATIO
            if up and report.upload_ok
            else None
        ),
        "ttfb": ttfb <= fetch.median_s if ttfb is not None and fetch else None,
        "ttfb_probe": (
            probe_ttfb <= probe.chunk_fetch.median_s if probe and probe_ttfb is not None else None
        ),
        "probe_downloads_stopped": probe.downloads_left == 0 if probe else None,
        "peak_rss": max(peaks) <= config.rss_target if peaks else None,
        "no_429": telegram.rate_limited == 0 if telegram else None,
        "one_message_per_chunk": (
            telegram.messages_stored == len(report.sizes(config)) if telegram else None
        ),
    }


def markdown(config: BenchConfig, report: Report) -> str:
    met = targets(config, report)
    up, down, fetch, probe = report.upload, report.download, report.chunk_fetch, report.probe
    sizes = report.sizes(config)
    rows: list[tuple[str, str, str, str]] = [
        (
            "file size",
            f"{_fmt_mib(config.size)} ({len(sizes)} chunks of up to {_fmt_mib(max(sizes))}; "
            f"CHUNK_SIZE {_fmt_mib(config.chunk_size)})",
            "",
            "",
        ),
        (
            "bots x per-upload bandwidth",
            f"{config.bots} x {_fmt_rate(config.upload_bandwidth)}"
            f" = {_fmt_rate(config.bots * config.upload_bandwidth)}",
            "",
            "",
        ),
        ("ideal upload time = size / (bots x bandwidth)", f"{config.ideal_upload_s:.2f} s", "", ""),
        (
            "best possible with whole chunks per bot",
            f"{config.whole_chunk_bound_s(sizes):.2f} s",
            "",
            "info",
        ),
    ]
    if up is not None and report.upload_ok:
        rows += [
            (
                "upload time (curl -T, time_total)",
                f"{up.time_total_s:.2f} s ({config.size / up.time_total_s / MiB:.1f} MiB/s)",
                f"<= {TARGET_UPLOAD_RATIO * config.ideal_upload_s:.2f} s",
                "",
            ),
            (
                "upload time / ideal",
                f"{up.time_total_s / config.ideal_upload_s:.3f}",
                f"<= {TARGET_UPLOAD_RATIO}",
                _verdict(met["upload_ratio"]),
            ),
        ]
    downloads = (
        "unlimited" if config.download_bandwidth is None else _fmt_rate(config.download_bandwidth)
    )
    if down is not None and report.download_ok:
        rate = config.size / down.time_total_s / MiB if down.time_total_s else 0.0
        rows += [
            (
                f"download throughput (curl; Telegram downloads {downloads})",
                f"{rate:.1f} MiB/s ({down.time_total_s:.2f} s)",
                "",
                "info",
            ),
            (
                "TTFB: response headers (curl time_starttransfer)",
                _fmt_ms(down.time_starttransfer_s),
                "",
                "info",
            ),
            (
                "TTFB: first body byte (from spawning curl)",
                _fmt_ms(down.first_body_byte_s),
                "<= one chunk fetch",
                _verdict(met["ttfb"]),
            ),
        ]
    if fetch is not None:
        rows.append(
            (
                f"one chunk fetch, downloads {downloads} (getFile + file, median of "
                f"{len(fetch.totals)})",
                f"{_fmt_ms(fetch.median_s)} (getFile {_fmt_ms(statistics.median(fetch.getfile_s))},"
                f" {_fmt_mib(fetch.chunk_bytes)})",
                "",
                "",
            )
        )
    if probe is not None:
        rows += [
            (
                f"probe, downloads at {_fmt_rate(probe.bandwidth)}: TTFB, first body byte",
                _fmt_ms(probe.first_body_byte_s),
                "<= one chunk fetch",
                _verdict(met["ttfb_probe"]),
            ),
            (
                f"probe: one chunk fetch at {_fmt_rate(probe.bandwidth)}",
                f"{_fmt_ms(probe.chunk_fetch.median_s)} "
                f"(estimate {_fmt_ms(probe.chunk_fetch.chunk_bytes / probe.bandwidth)})",
                "",
                "",
            ),
            (
                f"probe: Telegram downloads still running {DRAIN_WAIT:g} s after curl left",
                str(probe.downloads_left),
                "0",
                _verdict(met["probe_downloads_stopped"]),
            ),
        ]
    for name, phase in (("upload", report.upload_phase), ("download", report.download_phase)):
        if phase is not None:
            rows.append(
                (
                    f"peak RSS during {name}",
                    f"{_fmt_mib(phase.memory.peak)} (from {_fmt_mib(phase.memory.start_rss)})",
                    f"<= {_fmt_mib(config.rss_target)}",
                    "",
                )
            )
    for name, phase in (("upload", report.upload_phase), ("download", report.download_phase)):
        watched = phase.watchdog if phase is not None else None
        if watched is not None and watched.ratio is not None:
            rows.append(
                (
                    f"watchdog during {name}: longest gap between pings / ping interval",
                    f"{watched.ratio:.2f}x ({_fmt_ms(watched.longest_gap_s)}, "
                    f"{watched.pings} pings)",
                    "< 2.00x (a gap of WATCHDOG_USEC: systemd restarts the service)",
                    "info",
                )
            )
    peaks = [p.memory.peak for p in report.phases()]
    if peaks:
        rows.append(
            (
                "peak RSS of the service (VmHWM)",
                _fmt_mib(max(peaks)),
                f"<= 100 MiB + ({config.bots} + 2) x {_fmt_mib(config.chunk_size)} "
                f"= {_fmt_mib(config.rss_target)}",
                _verdict(met["peak_rss"]),
            )
        )
    telegram = report.upload_phase.telegram if report.upload_phase else None
    if telegram is not None:
        rows += [
            (
                "Telegram messages (sendDocument calls / stored)",
                f"{telegram.send_document_calls} / {telegram.messages_stored}",
                f"{len(sizes)} stored",
                _verdict(met["one_message_per_chunk"]),
            ),
            (
                "429s from Telegram (upload)",
                str(telegram.rate_limited),
                "0",
                _verdict(met["no_429"]),
            ),
        ]
    header = "| quantity | measured | target | verdict |\n|---|---|---|---|"
    return "\n".join([header, *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)])


def describe(config: BenchConfig) -> str:
    downloads = (
        "unlimited" if config.download_bandwidth is None else _fmt_rate(config.download_bandwidth)
    )
    sends = Settings.model_fields["sends_per_minute"].default
    flood = (
        f"{config.sim_sends_per_minute} messages/bot/min" if config.sim_sends_per_minute else "off"
    )
    return (
        f"simulator: {config.bots} bots, {_fmt_rate(config.upload_bandwidth)} per upload "
        f"connection, downloads {downloads}, 1 upload per token at a time, flood limit {flood}\n"
        f"service: CHUNK_SIZE={config.chunk_size} ({_fmt_mib(config.chunk_size)}), "
        f"SENDS_PER_MINUTE={sends} (its default: the production pacing), "
        f"LOG_LEVEL={config.log_level}"
        + "".join(f", {name}={value}" for name, value in config.service_env)
    )


def diagnostics(report: Report) -> str:
    lines = []
    if report.startup is not None:
        lines.append(f"startup: peak RSS {_fmt_mib(report.startup.memory.peak)}")
    for name, phase in (("upload", report.upload_phase), ("download", report.download_phase)):
        if phase is None:
            continue
        mem = phase.memory
        lines.append(
            f"{name}: service CPU {phase.service_cpu_s:.1f} s, simulator CPU "
            f"{phase.simulator_cpu_s:.1f} s; RSS {_fmt_mib(mem.start_rss)} -> peak "
            f"{_fmt_mib(mem.peak)} (sampled {_fmt_mib(mem.peak_rss_sampled)}, VmHWM "
            f"{_fmt_mib(mem.peak_rss_hwm or 0)}) -> {_fmt_mib(mem.end_rss)} at the end"
        )
        t = phase.telegram
        if t is not None:
            lines.append(
                f"  Telegram: sendDocument {t.send_document_calls} (per bot "
                f"{sorted(t.sends_per_bot.values())}), getFile {t.get_file_calls}, file "
                f"downloads {t.file_downloads}, errors {t.errors or 'none'}, max concurrent "
                f"uploads per token {t.max_concurrent_uploads_per_token}"
            )
    if report.download is not None:
        spawn = report.download.wall_s - report.download.time_total_s
        lines.append(f"download: curl start-up and exit took {spawn * 1000:.0f} ms in all")
    if report.probe is not None and report.probe.downloads_left:
        lines.append(
            f"probe: {report.probe.downloads_left} Telegram downloads were still running "
            f"{report.probe.downloads_left_after_s:.1f} s after the client went away"
        )
    return "\n".join(lines)


def json_document(config: BenchConfig, report: Report) -> dict[str, Any]:
    up, down, fetch = report.upload, report.download, report.chunk_fetch
    return {
        **asdict(report),
        "derived": {
            "chunks": len(report.sizes(config)),
            "ideal_upload_s": config.ideal_upload_s,
            "whole_chunk_bound_s": config.whole_chunk_bound_s(report.sizes(config)),
            "upload_ratio": (
                up.time_total_s / config.ideal_upload_s if up and report.upload_ok else None
            ),
            "download_mib_s": (
                config.size / down.time_total_s / MiB
                if down and report.download_ok and down.time_total_s
                else None
            ),
            "chunk_fetch_median_s": fetch.median_s if fetch else None,
            "peak_rss_bytes": max((p.memory.peak for p in report.phases()), default=None),
            "rss_target_bytes": config.rss_target,
            "service_sends_per_minute": Settings.model_fields["sends_per_minute"].default,
        },
        "targets": targets(config, report),
    }


def main(argv: list[str] | None = None) -> int:
    config, json_path = parse_args(argv)
    if shutil.which("curl") is None:
        print("http_bench: curl is not installed", file=sys.stderr)
        return 2
    report = Report(config={**asdict(config), "workdir": str(config.workdir or "")})
    with contextlib.ExitStack() as stack:
        if config.workdir is not None:
            config.workdir.mkdir(parents=True, exist_ok=True)
            workdir = config.workdir
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="http-bench-")))
        try:
            run_phases(config, workdir, report)
        except Broken as exc:
            report.broken.append(str(exc))
        except KeyboardInterrupt:
            report.broken.append("interrupted")
    print()
    print(markdown(config, report))
    print()
    print(diagnostics(report))
    for problem in report.broken:
        print(f"BROKEN: {problem}", file=sys.stderr)
    if json_path is not None:
        document = json_document(config, report)
        json_path.write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"numbers written to {json_path}")
    return 1 if report.broken else 0


if __name__ == "__main__":
    run_main(main)
