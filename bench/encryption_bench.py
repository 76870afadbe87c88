"""Encryption at rest: what sealing costs, sealed vs plain, in one run.

Two services run side by side as separate processes (`teleuploader serve`,
each on a SQLite database and a Telegram simulator of its own, all on this
machine): one without keys, one with ENCRYPTION_KEYS. They are used in
turns, never at once, for `--rounds` rounds:

1. upload a file of ``--size`` random bytes (``PUT /api/files/{name}``):
   goodput, and the service's CPU seconds (utime + stime from /proc) per GiB;
2. download it whole (sha256 checked): throughput and CPU per GiB;
3. ``--ranges`` reads of 1 KiB in the middle of the object: the time to the
   first byte of the body (median), the getFile path cached by then.

The table gives the medians of the rounds and the ratios sealed / plain;
the issue asks for goodput and download ratios of at least 0.9 and a TTFB
that rises by at most one frame's work (opening 64 KiB: well under 1 ms).

Exit status 1 only when something is broken (a process did not start, a
download came back wrong); the numbers are for reading.

    .venv/bin/python bench/encryption_bench.py                 # 256 MiB, 3 rounds
    .venv/bin/python bench/encryption_bench.py --small         # 16 MiB, 1 round
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    Broken,
    GiB,
    MiB,
    ServedService,
    cpu_seconds,
    free_port,
    run_main,
    served,
    simulator_process,
)

KEY = "bench:" + base64.b64encode(bytes(range(32))).decode()


@dataclass
class Round:
    upload_mb_s: float
    download_mb_s: float
    upload_cpu_s_per_gib: float
    download_cpu_s_per_gib: float
    ttfb_ms: float


@dataclass
class Side:
    name: str
    service: ServedService
    rounds: list[Round] = field(default_factory=list)


def connection(url: str) -> http.client.HTTPConnection:
    parsed = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=300)


def upload(side: Side, data: bytes, name: str) -> tuple[str, float, float]:
    """(public id, seconds, service CPU seconds)."""
    conn = connection(side.service.url)
    cpu = cpu_seconds(side.service.process.pid)
    started = time.perf_counter()
    conn.request(
        "PUT",
        f"/api/files/{name}",
        body=data,
        headers={"Authorization": f"Bearer {side.service.key}"},
    )
    response = conn.getresponse()
    body = response.read()
    took = time.perf_counter() - started
    used = cpu_seconds(side.service.process.pid) - cpu
    conn.close()
    if response.status != 201:
        raise Broken(f"{side.name}: upload answered {response.status}: {body[:300]!r}")
    return json.loads(body)["public_id"], took, used


def download(side: Side, public_id: str, digest: bytes) -> tuple[float, float]:
    conn = connection(side.service.url)
    cpu = cpu_seconds(side.service.process.pid)
    started = time.perf_counter()
    conn.request("GET", f"/f/{public_id}")
    response = conn.getresponse()
    hasher = hashlib.sha256()
    while piece := response.read(1 << 20):
        hasher.update(piece)
    took = time.perf_counter() - started
    used = cpu_seconds(side.service.process.pid) - cpu
    conn.close()
    if response.status != 200 or hasher.digest() != digest:
        raise Broken(f"{side.name}: the download came back wrong ({response.status})")
    return took, used


def ttfb(side: Side, public_id: str, size: int, count: int) -> float:
    """Median seconds to the first body byte of a 1 KiB Range in the middle."""
    times = []
    middle = size // 2 + 12_345  # not on a frame or block boundary
    for _ in range(count):
        conn = connection(side.service.url)
        started = time.perf_counter()
        conn.request("GET", f"/f/{public_id}", headers={"Range": f"bytes={middle}-{middle + 1023}"})
        response = conn.getresponse()
        first = response.read(1)
        times.append(time.perf_counter() - started)
        rest = response.read()
        conn.close()
        if response.status != 206 or len(first + rest) != 1024:
            raise Broken(f"{side.name}: the Range read answered {response.status}")
    return statistics.median(times)


@contextlib.contextmanager
def side(name: str, workdir: Path, env_extra: dict[str, str], chunk: int) -> Iterator[Side]:
    home = workdir / name
    home.mkdir()
    with simulator_process(home, bots=4) as sim:
        env = {
            **os.environ,
            "BOT_TOKENS": ",".join(sim.tokens),
            "STORAGE_CHAT_ID": "-1001000000001",
            "TELEGRAM_API_BASE": sim.url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{home / 'bench.db'}",
            "SENDS_PER_MINUTE": "0",
            "CHUNK_SIZE": str(chunk),
            "MAX_UPLOAD_SIZE": str(8 * GiB),
            "HOST": "127.0.0.1",
            "PORT": str(free_port()),
            "LOG_LEVEL": "WARNING",
            **env_extra,
        }
        env.pop("ENCRYPTION_KEYS_FILE", None)
        if "ENCRYPTION_KEYS" not in env_extra:
            env.pop("ENCRYPTION_KEYS", None)
        with served(env, home) as service:
            yield Side(name, service)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256 * MiB, help="bytes per file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranges", type=int, default=20, help="Range reads per round")
    parser.add_argument("--chunk-size", type=int, default=19 * MiB)
    parser.add_argument("--small", action="store_true", help="16 MiB, 1 round (CI)")
    args = parser.parse_args()
    if args.small:
        args.size, args.rounds, args.ranges = 16 * MiB, 1, 5
    data = os.urandom(args.size)
    digest = hashlib.sha256(data).digest()
    with tempfile.TemporaryDirectory(prefix="encryption-bench-") as tmp:
        workdir = Path(tmp)
        with (
            side("plain", workdir, {}, args.chunk_size) as plain,
            side("sealed", workdir, {"ENCRYPTION_KEYS": KEY}, args.chunk_size) as sealed,
        ):
            for number in range(args.rounds):
                for current in (plain, sealed) if number % 2 == 0 else (sealed, plain):
                    public_id, up_s, up_cpu = upload(current, data, f"round-{number}.bin")
                    down_s, down_cpu = download(current, public_id, digest)
                    first_byte = ttfb(current, public_id, args.size, args.ranges)
                    gib = args.size / GiB
                    current.rounds.append(
                        Round(
                            upload_mb_s=args.size / up_s / 1e6,
                            download_mb_s=args.size / down_s / 1e6,
                            upload_cpu_s_per_gib=up_cpu / gib,
                            download_cpu_s_per_gib=down_cpu / gib,
                            ttfb_ms=first_byte * 1000,
                        )
                    )
                    print(
                        f"round {number + 1} {current.name}: {current.rounds[-1]}", file=sys.stderr
                    )
    report(plain, sealed, args)
    return 0


def report(plain: Side, sealed: Side, args: argparse.Namespace) -> None:
    def median(one: Side, name: str) -> float:
        return statistics.median(getattr(round_, name) for round_ in one.rounds)

    print(
        f"\n{args.size // MiB} MiB file, CHUNK_SIZE {args.chunk_size}, {args.rounds} rounds "
        f"(medians), {os.cpu_count()} CPUs\n"
    )
    print("| measure | plain | sealed | sealed / plain |")
    print("| --- | ---: | ---: | ---: |")
    rows = [
        ("upload goodput (MB/s)", "upload_mb_s"),
        ("download throughput (MB/s)", "download_mb_s"),
        ("service CPU per GiB uploaded (s)", "upload_cpu_s_per_gib"),
        ("service CPU per GiB downloaded (s)", "download_cpu_s_per_gib"),
        ("TTFB of a 1 KiB Range in the middle (ms)", "ttfb_ms"),
    ]
    for label, name in rows:
        a, b = median(plain, name), median(sealed, name)
        print(f"| {label} | {a:.2f} | {b:.2f} | {b / a:.2f} |")


if __name__ == "__main__":
    run_main(main)
