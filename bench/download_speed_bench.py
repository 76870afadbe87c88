"""Download speed: what one reader, ten readers and a small seek get from the pool.

Everything runs as separate processes, as in production: the Telegram Bot API
simulator and the service (``teleuploader serve`` on a fresh SQLite database,
its defaults apart from CHUNK_SIZE); the clients are threads of this process,
apart from the fair-share readers (4), which are processes.

1. A file of ``--size`` MiB of random bytes is uploaded at full speed. Then
   every Telegram file connection is paced to ``--bandwidth`` MB/s and every
   call (getFile and the file GET alike) answers ``--latency`` s late.
2. Time to first byte of a 64 KiB Range read at random offsets of the cold
   object: each offset in a chunk nobody has read yet (the service asks
   ``getFile`` first), then the same offsets again (``getFile`` cached).
3. One download of the whole file alone: its MB/s, its sha256 checked, and the
   service's RSS sampled every 50 ms (growth over the RSS just before).
4. ``--fair`` clients at once, each reading its own ``--fair-size`` MiB Range
   of the file: when the first of them finishes, the bytes each has got,
   against their mean (1.00 is an exact fair share); ``--fair-rounds``
   rounds, each one's share in every round counted. The clients are
   processes; then the same again with threads of this process, whose GIL
   serves them unequally on the client's side.

``--baseline REF`` first measures the code at git ref REF (``git archive``
into the work dir, first on PYTHONPATH), then the checkout, on the same
machine in the same run.

    .venv/bin/python bench/download_speed_bench.py --baseline main
    .venv/bin/python bench/download_speed_bench.py --size 256 --fair-size 16   # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import multiprocessing.process
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    Broken,
    MiB,
    SimulatorProcess,
    cpu_seconds,
    extract,
    rss_bytes,
    run_main,
    simulator_process,
)
from download_bench import Config, service, upload

MB = 1_000_000
SEEK = 64 * 1024


@dataclass(frozen=True)
class Options:
    size: int
    chunk_size: int
    bots: int
    bandwidth: float
    latency: float
    seeks: int
    fair: int
    fair_size: int
    fair_rounds: int
    baseline: str | None


@dataclass
class Result:
    name: str
    ttfb_cold: list[float] = field(default_factory=list)
    ttfb_cached: list[float] = field(default_factory=list)
    alone_mbps: float = 0.0
    alone_ok: bool = False
    digest: str = ""
    rss_before: int = 0
    rss_peak: int = 0
    alone_cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)  # service, simulator, elapsed
    fair_shares: list[float] = field(default_factory=list)
    fair_total_mbps: float = 0.0
    fair_threads: list[float] = field(default_factory=list)
    fair_threads_mbps: float = 0.0


def ttfb(url: str, start: int) -> float:
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-{start + SEEK - 1}"})
    began = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read(1)
        first = time.monotonic() - began
        rest = response.read()
    if response.status != 206 or 1 + len(rest) != SEEK:
        raise Broken(f"a 64 KiB Range read got {response.status}, {1 + len(rest)} bytes")
    return first


def download_alone(url: str, pid: int, result: Result) -> None:
    result.rss_before = rss_bytes(pid)
    peak = [result.rss_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_bytes(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sha = hashlib.sha256()
    size = 0
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=600) as response:
            while piece := response.read(MiB):
                sha.update(piece)
                size += len(piece)
    finally:
        elapsed = time.monotonic() - began
        done.set()
        sampler.join()
    result.rss_peak = peak[0]
    result.alone_mbps = size / elapsed / MB
    result.digest = sha.hexdigest()


def fair_run(url: str, options: Options, *, processes: bool) -> tuple[list[float], float]:
    """Each reader's bytes from the moment all have their first byte to the
    moment the first is done, while all of them compete: (each one's bytes
    against the mean, their total MB/s). The readers are processes, as
    users' clients are; or threads of this process, which share its GIL and
    so are not served alike by their own side (the row beside it shows how
    much of the spread that makes)."""
    context = multiprocessing.get_context("fork")
    got = context.Array("q", options.fair, lock=False)
    first_done = context.Event() if processes else threading.Event()
    span = options.fair_size * MiB
    stride = max(span, (options.size * MiB - span) // max(1, options.fair - 1))

    def read(index: int) -> None:
        start = min(index * stride, options.size * MiB - span)
        request = urllib.request.Request(
            url, headers={"Range": f"bytes={start}-{start + span - 1}"}
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            while piece := response.read(256 * 1024):
                got[index] += len(piece)
        first_done.set()

    readers: list[threading.Thread] | list[multiprocessing.process.BaseProcess]
    if processes:
        readers = [context.Process(target=read, args=(i,)) for i in range(options.fair)]
    else:
        readers = [threading.Thread(target=read, args=(i,)) for i in range(options.fair)]
    for reader in readers:
        reader.start()
    start: list[int] | None = None
    began = 0.0
    while not first_done.wait(0.02):
        if start is None and all(got):
            start, began = list(got), time.monotonic()
    end, elapsed = list(got), time.monotonic() - began
    for reader in readers:
        reader.join()
    if start is None:
        raise Broken("a reader finished before every reader had its first byte")
    if any(value != span for value in got):
        raise Broken(f"a reader got {min(got)} bytes of {span}")
    deltas = [after - before for before, after in zip(start, end, strict=True)]
    mean = sum(deltas) / len(deltas)
    return [value / mean for value in deltas], sum(deltas) / elapsed / MB


def measure(name: str, options: Options, workdir: Path, code: Path | None, data: bytes) -> Result:
    result = Result(name=name)
    workdir.mkdir(parents=True, exist_ok=True)
    config = Config(
        readers=1,
        size=len(data),
        chunk_size=options.chunk_size,
        bots=options.bots,
        stall=60.0,
        watch=0.0,
        buffer_bytes=None,
        connections=None,
        baseline=None,
        workdir=None,
    )
    print(f"\n== {name}", flush=True)
    with (
        simulator_process(workdir, bots=options.bots, cwd=workdir) as sim,
        service(config, sim, workdir, code) as svc,
    ):
        url = f"{svc.url}/f/{upload(svc, data)}"
        pace(sim, options)
        chunks = len(data) // options.chunk_size
        rng = random.Random(7)
        picked = rng.sample(range(chunks), min(options.seeks, chunks))
        offsets = [
            c * options.chunk_size + rng.randrange(options.chunk_size - SEEK) for c in picked
        ]
        result.ttfb_cold = [ttfb(url, offset) for offset in offsets]
        result.ttfb_cached = [ttfb(url, offset) for offset in offsets]
        print(f"ttfb cold {median(result.ttfb_cold):.3f} s", flush=True)
        pids = (svc.process.pid, sim.process.pid)
        before = [cpu_seconds(pid, children=True) for pid in pids]
        began = time.monotonic()
        download_alone(url, svc.process.pid, result)
        after = [cpu_seconds(pid, children=True) for pid in pids]
        result.alone_cpu = (after[0] - before[0], after[1] - before[1], time.monotonic() - began)
        result.alone_ok = result.digest == hashlib.sha256(data).hexdigest()
        print(f"alone {result.alone_mbps:.0f} MB/s", flush=True)
        for _ in range(options.fair_rounds):
            shares, mbps = fair_run(url, options, processes=True)
            print(" ".join(f"{share:.2f}" for share in shares), f"({mbps:.0f} MB/s)", flush=True)
            result.fair_shares += shares
            result.fair_total_mbps += mbps / options.fair_rounds
        for _ in range(options.fair_rounds):
            shares, mbps = fair_run(url, options, processes=False)
            result.fair_threads += shares
            result.fair_threads_mbps += mbps / options.fair_rounds
    return result


def pace(sim: SimulatorProcess, options: Options) -> None:
    sim.configure(download_bandwidth=options.bandwidth * MB, latency=options.latency)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def markdown(results: list[Result]) -> str:
    def row(label: str, cell: object) -> str:
        return f"| {label} | " + " | ".join(str(cell(r)) for r in results) + " |"  # type: ignore[operator]

    lines = [
        "| quantity | " + " | ".join(r.name for r in results) + " |",
        "|---|" + "---|" * len(results),
        row(
            "64 KiB Range, TTFB, getFile not cached (median / max)",
            lambda r: f"{median(r.ttfb_cold) * 1000:.0f} / {max(r.ttfb_cold) * 1000:.0f} ms",
        ),
        row(
            "64 KiB Range, TTFB, getFile cached (median / max)",
            lambda r: f"{median(r.ttfb_cached) * 1000:.0f} / {max(r.ttfb_cached) * 1000:.0f} ms",
        ),
        row("one download alone", lambda r: f"{r.alone_mbps:.0f} MB/s"),
        row("  its sha256 right", lambda r: "yes" if r.alone_ok else "NO"),
        row(
            "  CPU-s of service / simulator during it (wall s)",
            lambda r: f"{r.alone_cpu[0]:.1f} / {r.alone_cpu[1]:.1f} ({r.alone_cpu[2]:.1f})",
        ),
        row(
            "  service RSS growth during it",
            lambda r: f"{(r.rss_peak - r.rss_before) / MiB:.0f} MiB",
        ),
        row(
            "concurrent readers: each one's bytes / the mean (min .. max of all rounds)",
            lambda r: f"{min(r.fair_shares):.2f} .. {max(r.fair_shares):.2f}",
        ),
        row("  their total (mean of the rounds)", lambda r: f"{r.fair_total_mbps:.0f} MB/s"),
        row(
            "  the same readers as threads of one process (min .. max)",
            lambda r: f"{min(r.fair_threads):.2f} .. {max(r.fair_threads):.2f}",
        ),
        row("  their total", lambda r: f"{r.fair_threads_mbps:.0f} MB/s"),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="file size in MiB (1024)")
    parser.add_argument("--chunk-size", type=int, default=19, help="CHUNK_SIZE in MiB (19)")
    parser.add_argument("--bots", type=int, default=3, help="bot tokens (3)")
    parser.add_argument("--bandwidth", type=float, default=40.0, help="MB/s per connection (40)")
    parser.add_argument("--latency", type=float, default=0.02, help="s per Telegram call (0.02)")
    parser.add_argument("--seeks", type=int, default=9, help="random 64 KiB Range reads (9)")
    parser.add_argument("--fair", type=int, default=10, help="concurrent readers (10)")
    parser.add_argument("--fair-size", type=int, default=64, help="MiB each reads (64)")
    parser.add_argument(
        "--fair-rounds", type=int, default=3, help="rounds of concurrent readers (3)"
    )
    parser.add_argument("--baseline", metavar="REF", help="also measure the code at this git ref")
    args = parser.parse_args(argv)
    options = Options(
        size=args.size,
        chunk_size=args.chunk_size * MiB,
        bots=args.bots,
        bandwidth=args.bandwidth,
        latency=args.latency,
        seeks=args.seeks,
        fair=args.fair,
        fair_size=args.fair_size,
        fair_rounds=args.fair_rounds,
        baseline=args.baseline,
    )
    data = os.urandom(options.size * MiB)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="dl-speed-") as tmp:
        workdir = Path(tmp)
        try:
            if options.baseline is not None:
                code = extract(options.baseline, workdir / "baseline-code")
                name = f"before ({options.baseline})"
                results.append(measure(name, options, workdir / "before", code, data))
            results.append(measure("after (this checkout)", options, workdir / "after", None, data))
        except Broken as exc:
            print(f"BROKEN: {exc}", file=sys.stderr)
            return 1
    print(
        f"\n{options.size} MiB file, CHUNK_SIZE {options.chunk_size // MiB} MiB, {options.bots} "
        f"bots, {options.bandwidth:g} MB/s and {options.latency * 1000:g} ms per Telegram "
        f"connection; {options.fair} readers of {options.fair_size} MiB each; service defaults "
        f"otherwise (DOWNLOAD_BUFFER_BYTES 64 MiB, DOWNLOAD_CONNECTIONS 32)\n"
    )
    print(markdown(results))
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    run_main(main)
