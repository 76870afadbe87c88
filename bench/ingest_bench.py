"""Ingest: how close does one raw upload come to a bare ASGI app that only
reads and hashes it?

Both run as processes under uvicorn (httptools and uvloop, as `serve` runs):

- *floor*: `bench/floor_app.py`, whose PUT reads the body and hashes it with
  MD5 and SHA-256 (the ETag and the stored digest: the least an upload of
  ours must do), then answers 201;
- *service*: `teleuploader serve` (SQLite, its defaults but the bots) in front
  of the simulator process at full speed (`--bots` bots, no bandwidth limit,
  no pacing), `PUT /api/files/{name}`. The simulator keeps none of the
  bytes (`--discard-file-bytes`: nothing is read back, and a simulator that
  kept every upload came to cost three times the CPU per byte, on the CPUs
  the service shares), and each round waits until the service's spool is
  flushed (`/metrics`), so that no upload's flush runs into the next round.

The same `--size` file of random bytes is sent by curl (`-T`, streamed from
disk) `--repeat` times to each, alternating, so that both meet the same
machine. Reported per target: the median wall time (curl's `time_total`) as
MB/s, and the server process's CPU (user + system, from /proc) per GiB; then
the ratios floor / service (the issue's target: >= 0.7 for both). The
simulator's CPU is shown apart: it is Telegram's work, not ours, but it runs
on the same CPUs.

    .venv/bin/python bench/ingest_bench.py                # 512 MiB x 3, ~1 min
    .venv/bin/python bench/ingest_bench.py --size 64M     # a quick look
    .venv/bin/python bench/ingest_bench.py --py-spy out.svg   # also profile the service

`--baseline REF` also runs the service at git ref REF (`git archive`, alone on
PYTHONPATH) beside the checkout's, with the same simulator and body: each round
uploads to the floor, then REF, then the checkout. REF's `/metrics` must
report `teleuploader_spool_unflushed_bytes` (issue 37's Complete, 2026-12).

`--py-spy PATH` records the service during one more upload with py-spy (from
PyPI: `.venv/bin/pip install py-spy`) and writes a flame graph
(`--format speedscope` if PATH ends in .json, collapsed stacks as text if
it ends in .txt).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    CHAT_ID,
    Broken,
    GiB,
    MiB,
    bench_app_command,
    cpu_seconds,
    extract,
    free_port,
    http_request,
    parse_metrics,
    parse_size,
    run_main,
    running,
    served,
    simulator_process,
    wait_until,
)


@dataclass
class Target:
    name: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    # The service's CPU until the upload's chunks are in Telegram (the
    # upload's CPU and the flush after its answer); seconds of that flush.
    flushed_cpus: list[float] = field(default_factory=list)
    flush_tails: list[float] = field(default_factory=list)

    def mb_per_s(self, size: int) -> float:
        return size / statistics.median(self.walls) / 1e6

    def cpu_per_gib(self, size: int) -> float:
        return statistics.median(self.cpus) / (size / GiB)

    def flushed_cpu_per_gib(self, size: int) -> float:
        return statistics.median(self.flushed_cpus) / (size / GiB)


FLUSH_WITHIN = 300.0


def unflushed_bytes(url: str) -> float:
    """The service's spool bytes not yet in Telegram, from /metrics."""
    status, body = http_request(f"{url}/metrics", timeout=10)
    if status != 200:
        raise Broken(f"{url}/metrics answered {status}")
    unflushed = parse_metrics(body.decode()).get("teleuploader_spool_unflushed_bytes")
    if unflushed is None:
        raise Broken(f"{url}/metrics has no teleuploader_spool_unflushed_bytes")
    return unflushed


def wait_flushed(url: str) -> float:
    """Wait until the service has sent every acknowledged byte to Telegram;
    how long that took. The next round must not share the CPUs with this
    one's flush: the floor would be slowed by it, and the simulator's CPU
    would be charged to whichever upload it overlapped."""
    began = time.monotonic()
    while unflushed_bytes(url) > 0:
        if time.monotonic() - began > FLUSH_WITHIN:
            raise Broken(f"{url} did not flush its spool within {FLUSH_WITHIN:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - began


def curl_put(url: str, path: Path, headers: dict[str, str]) -> float:
    """Upload `path` with curl -T; its time_total. Raises Broken unless 201."""
    command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total}"]
    command += ["-T", str(path)]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    done = subprocess.run([*command, url], capture_output=True, text=True, check=False)
    status, _, took = done.stdout.partition(" ")
    if done.returncode != 0 or status != "201":
        raise Broken(f"curl -T {url}: exit {done.returncode}, HTTP {status}: {done.stderr[-500:]}")
    return float(took)


def timed(pid: int, upload: Callable[[], float]) -> tuple[float, float]:
    before = cpu_seconds(pid)
    wall = upload()
    time.sleep(0.2)  # the server's last bookkeeping after the answer
    return wall, cpu_seconds(pid) - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="512M", help="bytes per upload (512M)")
    parser.add_argument("--repeat", type=int, default=3, help="uploads per target (3)")
    parser.add_argument("--bots", type=int, default=6, help="simulator bots (6)")
    parser.add_argument("--py-spy", type=Path, metavar="PATH", help="profile one more upload")
    parser.add_argument(
        "--baseline", metavar="REF", help="also run the service at this git ref, in turn"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args()
    size = parse_size(args.size)

    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as temp:
        workdir = Path(temp)
        body = workdir / "body.bin"
        with body.open("wb") as out:
            for _ in range(0, size, 16 * MiB):
                out.write(os.urandom(min(16 * MiB, size - out.tell())))
        floor = Target("bare ASGI app (read + MD5 + SHA-256)")
        sim_cpu: list[float] = []
        floor_port = free_port()
        floor_command = bench_app_command("floor_app:app", floor_port)
        # No upload is read back: a simulator that kept them all grew by 512
        # MiB a round, and past a GiB or so its CPU per byte tripled (the
        # kernel zeroing fresh pages), taken from the CPUs the service shares.
        sim_args = ["--concurrency-limit", "1", "--discard-file-bytes"]
        with (
            running(floor_command, workdir / "floor.log") as floor_process,
            simulator_process(workdir, bots=2 * args.bots, args=sim_args, cwd=workdir) as sim,
        ):
            floor_url = f"http://127.0.0.1:{floor_port}"
            wait_until(floor_process, f"{floor_url}/", workdir / "floor.log", "the floor app")
            env = {
                key: value
                for key, value in os.environ.items()
                if not key.startswith(("BOT_", "STORAGE_", "DATABASE_", "CHUNK_"))
            }
            env.update(
                BOT_TOKENS=",".join(sim.tokens[args.bots :]),
                STORAGE_CHAT_ID=str(CHAT_ID),
                TELEGRAM_API_BASE=sim.url,
                DATABASE_URL=f"sqlite+aiosqlite:///{workdir / 'teleuploader.db'}",
                HOST="127.0.0.1",
                PORT=str(free_port()),
                MAX_UPLOAD_SIZE=str(max(size, GiB)),
                LOG_LEVEL="WARNING",
                SNAPSHOT_INTERVAL_SECONDS="0",
                # No pacing: a few rounds of 512 MiB are more sends a minute
                # than Telegram's budget, and the wait is not the ingest's.
                SENDS_PER_MINUTE="0",
                # The bench reads the unflushed bytes from it (wait_flushed).
                METRICS_ACCESS="public",
            )
            services = [Target("teleuploader")]
            with contextlib.ExitStack() as stack:
                running_services = []
                if args.baseline is not None:
                    code = extract(args.baseline, workdir / "baseline-code")
                    services.insert(0, Target(f"teleuploader at {args.baseline}"))
                    before = workdir / "before"
                    before.mkdir()
                    before_env = dict(env)
                    # Bots of its own: two services on one bot would collide
                    # (their databases share no lease), and Telegram
                    # answers a collision with a long 429.
                    before_env.update(
                        BOT_TOKENS=",".join(sim.tokens[: args.bots]),
                        DATABASE_URL=f"sqlite+aiosqlite:///{before / 'teleuploader.db'}",
                        PORT=str(free_port()),
                    )
                    running_services.append(
                        stack.enter_context(served(before_env, before, code=code))
                    )
                running_services.append(stack.enter_context(served(env, workdir)))
                for n in range(args.repeat):
                    wall, cpu = timed(
                        floor_process.pid, lambda: curl_put(f"{floor_url}/x", body, {})
                    )
                    floor.walls.append(wall)
                    floor.cpus.append(cpu)
                    line = f"round {n + 1}: floor {wall:.2f} s / {cpu:.2f} CPU-s"
                    for target, running_service in zip(services, running_services, strict=True):
                        auth = {"Authorization": f"Bearer {running_service.key}"}
                        pid = running_service.process.pid
                        sim_before, service_before = cpu_seconds(sim.process.pid), cpu_seconds(pid)
                        url = f"{running_service.url}/api/files/ingest-{n}.bin"
                        wall, cpu = timed(pid, lambda url=url, auth=auth: curl_put(url, body, auth))
                        tail = wait_flushed(running_service.url)
                        flushed_cpu = cpu_seconds(pid) - service_before
                        target.walls.append(wall)
                        target.cpus.append(cpu)
                        target.flushed_cpus.append(flushed_cpu)
                        target.flush_tails.append(tail)
                        line += (
                            f", {target.name} {wall:.2f} s / {cpu:.2f} CPU-s"
                            f" (flushed {tail:.2f} s later, {flushed_cpu:.2f} CPU-s in all)"
                        )
                        if target is services[-1]:
                            sim_cpu.append(cpu_seconds(sim.process.pid) - sim_before)
                            line += f", simulator {sim_cpu[-1]:.2f} CPU-s"
                    print(line, flush=True)
                if args.py_spy is not None:
                    latest = running_services[-1]
                    auth = {"Authorization": f"Bearer {latest.key}"}
                    profile(latest.process.pid, args.py_spy, latest.url, body, auth)
            service = services[-1]

    ratios = {
        "wall": service.mb_per_s(size) / floor.mb_per_s(size),
        "cpu": floor.cpu_per_gib(size) / service.cpu_per_gib(size),
    }
    print(
        f"\ningest of {size / MiB:.0f} MiB, median of {args.repeat};"
        f" {os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n"
    )
    print("| target | MB/s | server CPU-s per GiB | with the flush to Telegram |")
    print("|---|---:|---:|---:|")
    print(f"| {floor.name} | {floor.mb_per_s(size):.0f} | {floor.cpu_per_gib(size):.2f} | |")
    for target in services:
        print(
            f"| {target.name} | {target.mb_per_s(size):.0f} | {target.cpu_per_gib(size):.2f}"
            f" | {target.flushed_cpu_per_gib(size):.2f}"
            f" (done {statistics.median(target.flush_tails):.2f} s after the answer) |"
        )
    print(
        f"| simulator (Telegram's side, apart) | | | "
        f"{statistics.median(sim_cpu) / (size / GiB):.2f} |"
    )
    print()
    for target in services:
        print(
            f"{target.name} / floor: {target.mb_per_s(size) / floor.mb_per_s(size):.2f} of"
            f" the floor's speed, {floor.cpu_per_gib(size) / target.cpu_per_gib(size):.2f} of"
            " its CPU efficiency (target >= 0.7 each)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "size": size,
                    "floor": {"walls": floor.walls, "cpus": floor.cpus},
                    "service": {
                        "walls": service.walls,
                        "cpus": service.cpus,
                        "flushed_cpus": service.flushed_cpus,
                        "flush_tails": service.flush_tails,
                    },
                    "simulator_cpus": sim_cpu,
                    "ratios": ratios,
                },
                indent=2,
            )
        )
    return 0


def profile(pid: int, out: Path, url: str, body: Path, auth: dict[str, str]) -> None:
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise Broken(f"py-spy is not installed next to {sys.executable}: pip install py-spy")
    # .json: speedscope; .txt: collapsed stacks, one line each (greppable).
    form = {".json": "speedscope", ".txt": "raw"}.get(out.suffix, "flamegraph")
    command = [str(spy), "record", "--pid", str(pid), "--rate", "250", "--format", form]
    with subprocess.Popen([*command, "--output", str(out)], stderr=subprocess.DEVNULL) as spying:
        time.sleep(1.0)
        curl_put(f"{url}/api/files/profiled.bin", body, auth)
        spying.send_signal(2)
        spying.wait(timeout=60)
    print(f"profile written to {out}")


if __name__ == "__main__":
    run_main(main)
