"""A small Range read while its bot is busy uploading: the time to its first
byte with the small-call lane off (`SMALL_CALL_LANE=false`: a bot runs one
call at a time) and on (its small calls run beside its uploads), side by
side in one run (issue 50).

One bot, so the read's getFile must use the bot the uploads keep busy; the
simulator (a process of its own) takes uploads at `--upload-bandwidth`, so
each upload call of a `--chunk` lasts a known while. Per setting, a fresh
`teleuploader serve` on a fresh SQLite database:

1. stores `--files` small files (one chunk each, never read, so no file
   path of theirs is cached);
2. starts uploading a large file and waits until the bot's upload is in
   flight at the simulator;
3. reads the first 64 KiB of each small file, one after another, each with
   a getFile nobody made before: the time from the request to the first
   byte of the body.

Printed: the median and the longest of those times per setting, and their
ratio. Timings are printed, never asserted.

    .venv/bin/python bench/small_lane_bench.py          # ~1 min
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from common import CHAT_ID, Broken, KiB, MiB, free_port, served, simulator_process
from http_bench import service_env

READ = 64 * KiB
# The simulator's stats per bot, as /_sim/stats gives them.
Bots = Callable[[], dict[str, dict[str, Any]]]


def read_times(url: str, key: str, args: argparse.Namespace, bots: Bots) -> list[float]:
    """Seconds to the first byte of each small file's first 64 KiB, read while
    a large upload keeps the bot busy."""
    auth = {"Authorization": f"Bearer {key}"}
    small = bytes(range(256)) * (args.small_size // 256)
    ids = []
    for n in range(args.files):
        response = httpx.put(
            f"{url}/api/files/small-{n}.bin", content=small, headers=auth, timeout=120
        )
        if response.status_code != 201:
            raise Broken(f"small upload: {response.status_code} {response.text[:200]}")
        ids.append(response.json()["public_id"])

    stop = threading.Event()

    def keep_uploading() -> None:
        big = b"\x5a" * args.big_size
        n = 0
        while not stop.is_set():
            httpx.put(f"{url}/api/files/big-{n}.bin", content=big, headers=auth, timeout=600)
            n += 1

    uploader = threading.Thread(target=keep_uploading, daemon=True)
    uploader.start()
    try:
        times = []
        for public_id in ids:
            # The read starts while an upload call is in flight on the bot.
            wait_for_upload(bots)
            started = time.monotonic()
            headers = {"Range": f"bytes=0-{READ - 1}"}
            with httpx.stream("GET", f"{url}/f/{public_id}", headers=headers, timeout=600) as r:
                if r.status_code != 206:
                    raise Broken(f"range read: {r.status_code}")
                pieces = r.iter_raw()
                next(pieces)
                times.append(time.monotonic() - started)
                for _ in pieces:
                    pass
        return times
    finally:
        stop.set()
        uploader.join(600)


def wait_for_upload(bots: Bots) -> None:
    """Until an upload is in flight at the simulator (the bot's one upload)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(bot["uploads_in_flight"] for bot in bots().values()):
            return
        time.sleep(0.01)
    raise Broken("no upload in flight at the simulator")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8, help="small files read (8)")
    parser.add_argument("--small-size", type=int, default=256 * KiB)
    parser.add_argument("--chunk", type=int, default=8 * MiB, help="CHUNK_SIZE (8 MiB)")
    parser.add_argument("--big-size", type=int, default=32 * MiB, help="each large upload")
    parser.add_argument(
        "--upload-bandwidth", type=int, default=8 * MiB, help="per upload, bytes/s (8 MiB)"
    )
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="small-lane-bench-") as tmp:
        workdir = Path(tmp)
        sim_dir = workdir / "sim"
        sim_dir.mkdir()
        flags = ["--concurrency-limit", "1", "--upload-bandwidth", str(args.upload_bandwidth)]
        with simulator_process(sim_dir, bots=1, args=flags, cwd=sim_dir) as sim:
            for lane in ("false", "true"):
                run_dir = workdir / f"lane-{lane}"
                run_dir.mkdir()
                env = service_env(
                    {
                        "BOT_TOKENS": sim.tokens[0],
                        "STORAGE_CHAT_ID": str(CHAT_ID),
                        "TELEGRAM_API_BASE": sim.url,
                        "DATABASE_URL": f"sqlite+aiosqlite:///{run_dir / 'db.sqlite'}",
                        "HOST": "127.0.0.1",
                        "PORT": str(free_port()),
                        "CHUNK_SIZE": str(args.chunk),
                        "SENDS_PER_MINUTE": "0",
                        "SNAPSHOT_INTERVAL_SECONDS": "0",
                        "SHUTDOWN_GRACE_SECONDS": "1",
                        "SHUTDOWN_DELAY_SECONDS": "0",
                        "LOG_LEVEL": "WARNING",
                        "SMALL_CALL_LANE": lane,
                    }
                )
                with served(env, run_dir) as service:
                    results[lane] = read_times(
                        service.url, service.key, args, lambda: sim.stats()["bots"]
                    )
    upload_seconds = args.chunk / args.upload_bandwidth
    print(
        f"1 bot; uploads of {args.chunk / MiB:.0f} MiB chunks at "
        f"{args.upload_bandwidth / MiB:.0f} MiB/s ({upload_seconds:.1f} s per call); "
        f"{args.files} reads of {READ // KiB} KiB, each with a fresh getFile"
    )
    for lane, label in (("false", "lane off"), ("true", "lane on ")):
        times = results[lane]
        print(
            f"SMALL_CALL_LANE={lane:5} ({label}): time to first byte median "
            f"{statistics.median(times) * 1000:7.1f} ms, longest {max(times) * 1000:7.1f} ms"
        )
    ratio = statistics.median(results["false"]) / statistics.median(results["true"])
    print(f"median, lane off / lane on: {ratio:.1f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
