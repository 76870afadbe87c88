"""Durability, measured as a new user would try it: what a lost message, a
lost chat and a flipped byte do to stored objects, with one copy and with
two; what REPLICAS=2 costs in upload goodput; what a scrub pass costs.

Everything runs against `teleuploader telegram-sim` (a process: the faults
are its /_sim controls) and `teleuploader serve` (a process: `--code` runs
another revision's service, e.g. the one before replicas, against the same
simulator and the same steps):

1. **Losses.** Six objects (three chunks each) are stored, then, each time
   on a fresh database and simulator: one message is taken down; one of the
   storage chats is lost; one byte of one message is flipped. Each object is
   then downloaded: whole and right, refused (an error, or a download cut
   off), or, the one thing that must never happen, a 200 with wrong bytes.
2. **Goodput.** The same upload with REPLICAS=1 and REPLICAS=2, side by
   side, against bots of a fixed bandwidth: bytes per second against the
   pool's ideal (bots x bandwidth), and REPLICAS=2's against half of it.
3. **Scrub cost.** A full pass over the copies stored in 2 (shallow:
   getFile each; deep: every copy read whole), its Telegram calls and its
   seconds, scaled to 10,000 chunks.

    .venv/bin/python bench/durability_bench.py
    .venv/bin/python bench/durability_bench.py --code /tmp/before   # an older tree's service

The exit status is non-zero only when something is broken (a 200 with
wrong bytes, or a step that failed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from common import (
    Broken,
    SimulatorProcess,
    free_port,
    http_request,
    run_main,
    served,
    service_env,
    simulator_process,
    teleuploader_command,
)

MiB = 1024 * 1024
CHATS = [-1001000000001, -1001000000002]


@dataclass
class Outcome:
    whole: int = 0
    refused: int = 0
    wrong: int = 0  # a 200 with other bytes: never acceptable


def sim_args(bots: int, chats: list[int], bandwidth: float | None) -> list[str]:
    args = ["--concurrency-limit", "1"]
    for chat in chats[1:]:
        args += ["--chat-id", str(chat)]
    if bandwidth is not None:
        args += ["--upload-bandwidth", str(bandwidth)]
    return args


def env_for(sim: SimulatorProcess, workdir: Path, replicas: int, chunk: int) -> dict[str, str]:
    return service_env(
        {
            "BOT_TOKENS": ",".join(sim.tokens),
            "STORAGE_CHAT_IDS": ",".join(str(chat) for chat in CHATS),
            "TELEGRAM_API_BASE": sim.url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
            "HOST": "127.0.0.1",
            "PORT": str(free_port()),
            "SENDS_PER_MINUTE": "0",
            "CHUNK_SIZE": str(chunk),
            "INLINE_THRESHOLD": "1024",
            "REPLICAS": str(replicas),
            "SCRUB_PERIOD_SECONDS": "0",
            "LOG_LEVEL": "WARNING",
            "SPOOL_DIR": str(workdir / "spool"),
        }
    )


def upload(url: str, key: str, files: int, size: int) -> dict[str, bytes]:
    stored = {}
    with httpx.Client(base_url=url, timeout=300) as http:
        for n in range(files):
            data = random.Random(n).randbytes(size + n)
            response = http.put(
                f"/api/files/f{n}.bin", content=data, headers={"Authorization": f"Bearer {key}"}
            )
            if response.status_code != 201:
                raise Broken(f"upload {n}: {response.status_code} {response.text[:200]}")
            stored[response.json()["public_id"]] = data
    return stored


def download_all(url: str, files: dict[str, bytes]) -> Outcome:
    outcome = Outcome()
    with httpx.Client(base_url=url, timeout=120) as http:
        for public_id, data in files.items():
            try:
                response = http.get(f"/f/{public_id}")
            except httpx.HTTPError:
                outcome.refused += 1  # cut off: never ended short
                continue
            if response.status_code != 200:
                outcome.refused += 1
            elif response.content == data:
                outcome.whole += 1
            else:
                outcome.wrong += 1
    return outcome


def messages(workdir: Path) -> list[tuple[int, int]]:
    """(chat, message) of every chunk's document, from the service's database
    (either schema: copies in chunk_copies, or the chunk rows themselves)."""
    with sqlite3.connect(workdir / "bench.db") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        table = "chunk_copies" if "chunk_copies" in tables else "chunks"
        return [(int(c), int(m)) for c, m in db.execute(f"SELECT chat_id, message_id FROM {table}")]


def control(sim: SimulatorProcess, path: str) -> None:
    status, body = http_request(f"{sim.url}{path}", method="POST", body={})
    if status != 200:
        raise Broken(f"the simulator refused {path}: {status} {body[:200]!r}")


def losses(args: argparse.Namespace, replicas: int) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    for fault in ("one message taken down", "one of two chats lost", "one byte flipped"):
        with tempfile.TemporaryDirectory(prefix="durability-") as scratch:
            workdir = Path(scratch)
            with simulator_process(
                workdir, bots=args.bots, args=sim_args(args.bots, CHATS, None), chat_id=CHATS[0]
            ) as sim:
                env = env_for(sim, workdir, replicas, args.chunk)
                with served(env, workdir, code=args.code) as service:
                    files = upload(service.url, service.key, 6, 3 * args.chunk - 1000)
                    stored = messages(workdir)
                    chat, message = random.Random(1).choice(stored)
                    if fault.startswith("one message"):
                        control(sim, f"/_sim/messages/{chat}/{message}/take-down")
                    elif fault.startswith("one of two"):
                        control(sim, f"/_sim/chats/{CHATS[1]}/lose")
                    else:
                        control(sim, f"/_sim/messages/{chat}/{message}/corrupt")
                    results[fault] = download_all(service.url, files)
    return results


def goodput(args: argparse.Namespace, replicas: int) -> float:
    with tempfile.TemporaryDirectory(prefix="durability-") as scratch:
        workdir = Path(scratch)
        with simulator_process(
            workdir,
            bots=args.bots,
            args=sim_args(args.bots, CHATS, args.bandwidth),
            chat_id=CHATS[0],
        ) as sim:
            env = env_for(sim, workdir, replicas, args.chunk)
            with served(env, workdir, code=args.code) as service:
                size = args.goodput_mib * MiB
                started = time.perf_counter()
                upload(service.url, service.key, 1, size)
                return size / (time.perf_counter() - started)


def scrub_cost(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="durability-") as scratch:
        workdir = Path(scratch)
        with simulator_process(
            workdir, bots=args.bots, args=sim_args(args.bots, CHATS, None), chat_id=CHATS[0]
        ) as sim:
            env = env_for(sim, workdir, 2, args.scrub_chunk)
            with served(env, workdir) as service:
                upload(service.url, service.key, args.scrub_files, 4 * args.scrub_chunk)
                copies = len(messages(workdir))
                costs: dict[str, float] = {"copies": copies}
                for deep in (False, True):
                    sim.reset_stats()
                    started = time.perf_counter()
                    run_scrub(service.url, service.key, deep=deep)
                    seconds = time.perf_counter() - started
                    calls = sum(sum(bot["calls"].values()) for bot in sim.stats()["bots"].values())
                    name = "deep" if deep else "shallow"
                    costs[f"{name}_seconds_per_10k"] = seconds * 10_000 / copies
                    costs[f"{name}_calls_per_10k"] = calls * 10_000 / copies
                costs["deep_bytes_per_10k"] = 10_000 * args.scrub_chunk
                return costs


def run_scrub(url: str, key: str, *, deep: bool) -> None:
    command = [*teleuploader_command(), "scrub", "--wait", "--json", "--url", url, "--key", key]
    if not deep:
        command.append("--shallow")
    import subprocess

    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise Broken(f"teleuploader scrub failed: {done.stderr[-1000:]}")
    report = json.loads(done.stdout)
    if report["lost_objects"]:
        raise Broken(f"the scrub found lost objects: {report}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bots", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=256 * 1024, help="CHUNK_SIZE for 1 and 2")
    parser.add_argument("--bandwidth", type=float, default=4 * MiB, help="bytes/s per upload")
    parser.add_argument("--goodput-mib", type=int, default=64)
    parser.add_argument("--scrub-chunk", type=int, default=64 * 1024)
    parser.add_argument("--scrub-files", type=int, default=100)
    parser.add_argument("--code", type=Path, default=None, help="another tree's service")
    parser.add_argument("--skip", action="append", default=[], help="losses, goodput, scrub")
    args = parser.parse_args()
    broken = False
    print(f"machine: {os.cpu_count()} CPUs; service code: {args.code or 'this checkout'}")
    if "losses" not in args.skip:
        replica_counts = [1] if args.code is not None else [1, 2]
        print("\n| fault | REPLICAS | whole | refused | 200 with wrong bytes |")
        print("|---|---:|---:|---:|---:|")
        for replicas in replica_counts:
            for fault, outcome in losses(args, replicas).items():
                print(
                    f"| {fault} | {replicas} | {outcome.whole} of 6 | {outcome.refused} | "
                    f"{outcome.wrong} |"
                )
                broken |= outcome.wrong > 0
    if "goodput" not in args.skip and args.code is None:
        ideal = args.bots * args.bandwidth
        one = goodput(args, 1)
        two = goodput(args, 2)
        print(f"\ngoodput, {args.bots} bots at {args.bandwidth / MiB:g} MiB/s each:")
        print(f"- REPLICAS=1: {one / MiB:.2f} MiB/s = {one / ideal:.2f} of the pool's ideal")
        print(
            f"- REPLICAS=2: {two / MiB:.2f} MiB/s = {two / ideal:.2f} of the ideal, "
            f"{two / (ideal / 2):.2f} of half the ideal (target >= 0.90); "
            f"{two / one:.2f} of REPLICAS=1"
        )
    if "scrub" not in args.skip and args.code is None:
        costs = scrub_cost(args)
        print(f"\nscrub, per 10,000 chunk copies (measured over {costs['copies']:.0f}):")
        print(
            f"- shallow (getFile each): {costs['shallow_calls_per_10k']:.0f} Telegram calls, "
            f"{costs['shallow_seconds_per_10k']:.0f} s"
        )
        print(
            f"- deep (read whole): {costs['deep_calls_per_10k']:.0f} Telegram calls, "
            f"{costs['deep_seconds_per_10k']:.0f} s, "
            f"{costs['deep_bytes_per_10k'] / MiB:.0f} MiB read at this chunk size"
        )
    return 1 if broken else 0


if __name__ == "__main__":
    run_main(main)
