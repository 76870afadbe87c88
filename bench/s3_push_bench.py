"""Docker push and pull through the S3 API: how close to the Telegram links' speed?

Everything runs as separate processes, as in production: the Telegram Bot API
simulator (`teleuploader telegram-sim`: N bots, a per-connection upload and
download bandwidth, one upload at a time per bot, Telegram's per-bot budget of
sends per minute into the chat), `teleuploader serve` (SQLite, S3 on, CHUNK_SIZE
and SENDS_PER_MINUTE at their defaults unless told), and Debian's
`docker-registry` (distribution 2.8) with the `s3` storage driver pointed at the
service. An OCI image of `--layers` random layers of `--layer-mib` MiB is built
on disk, then for each client in `--clients`, on a fresh stack:

- ``skopeo``: `skopeo copy oci:... docker://...` (skopeo 1.9 pushes one layer
  at a time);
- ``parallel``: the registry API driven like `docker push` does it: every blob
  in its own thread (HEAD, POST, one streaming PATCH, PUT ?digest), then the
  manifest;

and then a pull of the image with skopeo (layers in parallel; blob GETs
answered with presigned redirects to the service unless
`--no-redirect`), digests checked.

Reported per client: push and pull wall time and their ratio to the ideal
(layer bytes / (bots x per-upload bandwidth)); the time from the push's start
until the spool is empty (with COMPLETE_WAITS_FOR=spool a push ends before its
bytes are in Telegram); Telegram messages sent per push, counted then
(the simulator's count) against the fewest possible (sum of ceil(layer bytes /
CHUNK_SIZE)); bytes sent to Telegram per layer byte; 429s; the most sends one
bot made within any 60 s of the push (sampled from /_sim/stats every 0.5 s),
to tell whether SENDS_PER_MINUTE pacing binds; and the time the registry spent
in its blob PUTs (commit + move of the upload into place: CopyObject or
UploadPartCopy, metadata only) and PATCHes (the data).

Target (printed, never fails the run): push <= 1.3 x ideal. The exit status is
non-zero only when something is broken (a push or pull failed, or a pulled blob
does not match).

    .venv/bin/python bench/s3_push_bench.py            # 3 x 100 MiB, 6 bots, 4 MiB/s
    .venv/bin/python bench/s3_push_bench.py --small    # 3 x 10 MiB, quick
    .venv/bin/python bench/s3_push_bench.py --registry-chunksize 120 --clients skopeo
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from common import (
    add_repo_to_path,
    run_main,
)

add_repo_to_path()  # for tests.*, which is not installed

from app.config.settings import Settings  # noqa: E402
from tests.deploy.conftest import Processes  # noqa: E402
from tests.http.s3.registry import (  # noqa: E402
    OCI_MANIFEST,
    Blob,
    Image,
    MiB,
    Registry,
    Stack,
    TelegramCounts,
    build_oci_image,
    missing_tools,
    process_logs,
    read_oci_image,
    skopeo_copy,
    start_registry,
    start_stack,
)

DEFAULT_CHUNK_SIZE: int = Settings.model_fields["chunk_size"].default
DEFAULT_SENDS_PER_MINUTE: int = Settings.model_fields["sends_per_minute"].default
TARGET = 1.3
REPOSITORY = "bench/image"
TAG = "v1"
CLIENTS = ("skopeo", "parallel")


@dataclass
class BenchConfig:
    layers: int = 3
    layer_mib: float = 100
    bots: int = 6
    bandwidth: int = 4 * MiB  # bytes/s per upload connection
    download_bandwidth: int = 4 * MiB
    chunk_size: int = DEFAULT_CHUNK_SIZE
    sends_per_minute: int = DEFAULT_SENDS_PER_MINUTE  # the service's pacing
    telegram_sends_per_minute: int = 20  # what the simulator enforces (429 above)
    registry_chunksize: int = 10 * MiB  # the s3 driver's default part size
    clients: list[str] = field(default_factory=lambda: list(CLIENTS))
    redirect: bool = True
    seed: int = 1
    timeout: float = 1800.0
    # COMPLETE_WAITS_FOR values to run, each client on a fresh stack per value.
    complete_waits_for: list[str] = field(default_factory=lambda: ["spool"])

    @property
    def layer_bytes(self) -> int:
        return int(self.layer_mib * MiB)


@dataclass
class Result:
    client: str
    complete_waits_for: str
    push_s: float
    push_of_ideal: float
    # From the push's start until the spool is empty (every byte in Telegram).
    flushed_s: float
    flushed_of_ideal: float
    pull_s: float
    pull_of_ideal: float
    ideal_s: float
    messages_per_push: int
    fewest_messages: int
    telegram_bytes_per_layer_byte: float
    rate_limited_push: int
    rate_limited_pull: int
    downloads_during_push: int
    peak_sends_per_bot_minute: int
    sends_per_bot: list[int]
    pacing_binds: bool
    registry_patch_s: float
    registry_put_s: float
    target_met: bool


# --- sampling the simulator during a push ------------------------------------------------


class SendSampler:
    """Samples sendDocument calls per bot every `interval` seconds."""

    def __init__(self, stack: Stack, interval: float = 0.5) -> None:
        self._stack = stack
        self._interval = interval
        self._stop = threading.Event()
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        stats = self._stack.sim_stats()
        sends = {bot: data["calls"].get("sendDocument", 0) for bot, data in stats["bots"].items()}
        self.samples.append((time.monotonic(), sends))

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                self._sample()
            self._stop.wait(self._interval)

    def __enter__(self) -> SendSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample()

    def sends_per_bot(self) -> list[int]:
        first, last = self.samples[0][1], self.samples[-1][1]
        return [last[bot] - first.get(bot, 0) for bot in sorted(last)]

    def peak_per_window(self, window: float = 60.0) -> int:
        """The most sends one bot made within any `window` seconds (sampled)."""
        peak = 0
        for i, (t, counts) in enumerate(self.samples):
            base = self.samples[0][1]
            for earlier_t, earlier in self.samples[:i]:
                if earlier_t <= t - window:
                    base = earlier
            for bot, count in counts.items():
                peak = max(peak, count - base.get(bot, 0))
        return peak


# --- a docker-like parallel push over the registry API ------------------------------------


def _blob_path(layout: Path, blob: Blob) -> Path:
    algorithm, hex_digest = blob.digest.split(":", 1)
    return layout / "blobs" / algorithm / hex_digest


def _file_pieces(path: Path, piece: int = MiB) -> Iterator[bytes]:
    with path.open("rb") as file:
        while data := file.read(piece):
            yield data


def push_parallel(registry: Registry, layout: Path, image: Image, *, timeout: float) -> None:
    """Every blob in its own thread, then the manifest: what `docker push` does
    (its default is 5 uploads at once)."""
    base = httpx.URL(registry.url)

    def upload(blob: Blob) -> None:
        with httpx.Client(timeout=timeout) as http:
            blob_url = f"{registry.url}/v2/{REPOSITORY}/blobs/{blob.digest}"
            if http.head(blob_url).status_code == 200:
                return
            started = http.post(f"{registry.url}/v2/{REPOSITORY}/blobs/uploads/")
            if started.status_code != 202:
                raise RuntimeError(f"POST upload: {started.status_code} {started.text}")
            patched = http.patch(
                base.join(started.headers["location"]),
                content=_file_pieces(_blob_path(layout, blob)),
                headers={"Content-Type": "application/octet-stream"},
            )
            if patched.status_code != 202:
                raise RuntimeError(f"PATCH: {patched.status_code} {patched.text}")
            done = http.put(
                base.join(patched.headers["location"]).copy_merge_params({"digest": blob.digest})
            )
            if done.status_code != 201:
                raise RuntimeError(f"PUT ?digest: {done.status_code} {done.text}")

    blobs = [image.config, *image.layers]
    with ThreadPoolExecutor(max_workers=5) as pool:
        for future in [pool.submit(upload, blob) for blob in blobs]:
            future.result()
    manifest = httpx.put(
        f"{registry.url}/v2/{REPOSITORY}/manifests/{TAG}",
        content=image.manifest,
        headers={"Content-Type": OCI_MANIFEST},
        timeout=timeout,
    )
    if manifest.status_code != 201:
        raise RuntimeError(f"PUT manifest: {manifest.status_code} {manifest.text}")


# --- the registry's own account of its requests -------------------------------------------

_DURATION = re.compile(r"^([0-9.]+)(ns|µs|us|ms|s|m)$")
_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    total = 0.0
    # Go durations such as "1m2.5s", "97.4ms", "624.4µs".
    for part in re.findall(r"[0-9.]+(?:ns|µs|us|ms|s|m)", text.strip('"')):
        match = _DURATION.match(part)
        if match:
            total += float(match.group(1)) * _UNITS[match.group(2)]
    return total


def registry_upload_seconds(log_text: str) -> tuple[float, float]:
    """Seconds the registry spent answering blob-upload PATCHes and PUTs."""
    patch = put = 0.0
    for line in log_text.splitlines():
        if 'msg="response completed"' not in line or "/blobs/uploads/" not in line:
            continue
        found = re.search(r"http\.response\.duration=(\S+)", line)
        if found is None:
            continue
        seconds = _seconds(found.group(1))
        if "http.request.method=PATCH" in line:
            patch += seconds
        elif "http.request.method=PUT" in line:
            put += seconds
    return patch, put


# --- one client, on a fresh stack ---------------------------------------------------------


def run_client(
    client: str,
    config: BenchConfig,
    layout: Path,
    image: Image,
    directory: Path,
    waits_for: str = "spool",
) -> Result:
    processes = Processes(directory)
    try:
        stack = start_stack(
            processes,
            directory / "stack",
            bots=config.bots,
            chunk_size=config.chunk_size,
            sim_args=[
                "--upload-bandwidth",
                str(config.bandwidth),
                "--download-bandwidth",
                str(config.download_bandwidth),
                "--sends-per-minute",
                str(config.telegram_sends_per_minute),
                "--concurrency-limit",
                "1",
            ],
            service_env={
                "SENDS_PER_MINUTE": str(config.sends_per_minute),
                "COMPLETE_WAITS_FOR": waits_for,
                "LOG_LEVEL": "WARNING",
            },
        )
        registry = start_registry(
            processes,
            directory,
            stack,
            redirect=config.redirect,
            chunk_size=config.registry_chunksize,
            log_level="info",
        )
        reference = f"docker://{registry.host}/{REPOSITORY}:{TAG}"
        stack.reset_sim_stats()
        before = TelegramCounts.of(stack.sim_stats())
        with SendSampler(stack) as sampler:
            started = time.monotonic()
            if client == "skopeo":
                skopeo_copy(
                    f"oci:{layout}:{TAG}", reference, directory=directory, timeout=config.timeout
                )
            else:
                push_parallel(registry, layout, image, timeout=config.timeout)
            push_s = time.monotonic() - started
            # With COMPLETE_WAITS_FOR=spool the push ends before its bytes are
            # in Telegram: the flush goes on, and the counts wait for it.
            wait_for_empty_spool(directory / "stack" / "spool", config.timeout)
            flushed_s = time.monotonic() - started
        pushed = TelegramCounts.of(stack.sim_stats()) - before

        before_pull = TelegramCounts.of(stack.sim_stats())
        pulled_dir = directory / "pulled"
        pull = skopeo_copy(
            reference, f"oci:{pulled_dir}:{TAG}", directory=directory, timeout=config.timeout
        )
        pulled = TelegramCounts.of(stack.sim_stats()) - before_pull
        got = read_oci_image(pulled_dir, TAG)
        if got.layers != image.layers or got.manifest != image.manifest:
            raise RuntimeError("the pulled image differs from the pushed one")
        patch_s, put_s = registry_upload_seconds(registry.proc.stderr())
    except BaseException:
        print(process_logs(processes, 3000), file=sys.stderr)
        raise
    finally:
        processes.stop_all()

    ideal = image.layer_bytes / (config.bots * config.bandwidth)
    peak = sampler.peak_per_window()
    return Result(
        client=client,
        complete_waits_for=waits_for,
        push_s=push_s,
        push_of_ideal=push_s / ideal,
        flushed_s=flushed_s,
        flushed_of_ideal=flushed_s / ideal,
        pull_s=pull.seconds,
        pull_of_ideal=pull.seconds / ideal,
        ideal_s=ideal,
        messages_per_push=pushed.messages,
        fewest_messages=sum(math.ceil(layer.size / config.chunk_size) for layer in image.layers),
        telegram_bytes_per_layer_byte=pushed.bytes_received / image.layer_bytes,
        rate_limited_push=pushed.rate_limited,
        rate_limited_pull=pulled.rate_limited,
        downloads_during_push=pushed.downloads,
        peak_sends_per_bot_minute=peak,
        sends_per_bot=sampler.sends_per_bot(),
        pacing_binds=config.sends_per_minute > 0 and peak >= config.sends_per_minute,
        registry_patch_s=patch_s,
        registry_put_s=put_s,
        target_met=push_s / ideal <= TARGET,
    )


def wait_for_empty_spool(spool: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(spool.rglob("*.part")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the spool {spool} did not empty within {timeout:g} s")
        time.sleep(0.05)


# --- output ---------------------------------------------------------------------------------


def markdown_table(results: list[Result]) -> str:
    header = (
        "| client | Complete waits for | push (s) | push / ideal | flushed / ideal "
        "| pull (s) | pull / ideal "
        "| messages / push "
        "| fewest | Telegram bytes / layer byte | 429s push / pull | peak sends / bot / min "
        "| pacing binds | registry PATCH / PUT (s) | target |"
    )
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
    rows = [
        f"| {r.client} | {r.complete_waits_for} | {r.push_s:.1f} | {r.push_of_ideal:.2f} "
        f"| {r.flushed_of_ideal:.2f} "
        f"| {r.pull_s:.1f} "
        f"| {r.pull_of_ideal:.2f} | {r.messages_per_push} | {r.fewest_messages} "
        f"| {r.telegram_bytes_per_layer_byte:.3f} | {r.rate_limited_push} / {r.rate_limited_pull} "
        f"| {r.peak_sends_per_bot_minute} | {'yes' if r.pacing_binds else 'no'} "
        f"| {r.registry_patch_s:.1f} / {r.registry_put_s:.1f} "
        f"| {'met' if r.target_met else 'NOT met'} |"
        for r in results
    ]
    return "\n".join([header, rule, *rows])


def describe(config: BenchConfig, image: Image) -> str:
    ideal = image.layer_bytes / (config.bots * config.bandwidth)
    return (
        f"{config.layers} layers x {config.layer_mib:g} MiB ({image.layer_bytes / MiB:.1f} MiB "
        f"as pushed), {config.bots} bots at {config.bandwidth / MiB:g} MiB/s up and "
        f"{config.download_bandwidth / MiB:g} MiB/s down per connection, "
        f"CHUNK_SIZE {config.chunk_size / MiB:g} MiB, SENDS_PER_MINUTE "
        f"{config.sends_per_minute} (Telegram simulator enforces "
        f"{config.telegram_sends_per_minute}), registry chunksize "
        f"{config.registry_chunksize / MiB:g} MiB, redirects "
        f"{'on' if config.redirect else 'off'}; ideal {ideal:.1f} s; target push <= "
        f"{TARGET} x ideal"
    )


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, Path | None]:
    defaults = BenchConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=None, help="layers in the image (3)")
    parser.add_argument("--layer-mib", type=float, default=None, help="MiB per layer (100)")
    parser.add_argument("--bots", type=int, default=defaults.bots)
    parser.add_argument(
        "--bandwidth", type=float, default=4.0, help="MiB/s per upload connection (4)"
    )
    parser.add_argument(
        "--download-bandwidth", type=float, default=4.0, help="MiB/s per download (4)"
    )
    parser.add_argument(
        "--chunk-size",
        type=float,
        default=None,
        help=f"CHUNK_SIZE in MiB (the service's default, {DEFAULT_CHUNK_SIZE / MiB:g})",
    )
    parser.add_argument(
        "--sends-per-minute",
        type=int,
        default=defaults.sends_per_minute,
        help="the service's SENDS_PER_MINUTE (its default; 0: no pacing)",
    )
    parser.add_argument(
        "--telegram-sends-per-minute",
        type=int,
        default=defaults.telegram_sends_per_minute,
        help="the per-bot budget the simulator enforces with 429s (20)",
    )
    parser.add_argument(
        "--registry-chunksize",
        type=float,
        default=defaults.registry_chunksize / MiB,
        help="the registry's s3 `chunksize` (its part size) in MiB (10, the driver's default)",
    )
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help="comma-separated: skopeo (layers one at a time), parallel (docker-like)",
    )
    parser.add_argument(
        "--complete-waits-for",
        default="spool",
        help="comma-separated COMPLETE_WAITS_FOR values to compare in one run (spool, telegram)",
    )
    parser.add_argument("--no-redirect", action="store_true", help="redirect: disable: true")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--timeout", type=float, default=defaults.timeout)
    parser.add_argument("--small", action="store_true", help="3 x 10 MiB layers, quick")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(CLIENTS)
    if unknown or not clients:
        parser.error(f"--clients: choose from {', '.join(CLIENTS)}")
    waits = [w.strip() for w in args.complete_waits_for.split(",") if w.strip()]
    if not waits or set(waits) - {"spool", "telegram"}:
        parser.error("--complete-waits-for: choose from spool, telegram")
    config = BenchConfig(
        layers=args.layers if args.layers is not None else 3,
        layer_mib=args.layer_mib if args.layer_mib is not None else (10 if args.small else 100),
        bots=args.bots,
        bandwidth=int(args.bandwidth * MiB),
        download_bandwidth=int(args.download_bandwidth * MiB),
        chunk_size=int(args.chunk_size * MiB) if args.chunk_size else DEFAULT_CHUNK_SIZE,
        sends_per_minute=args.sends_per_minute,
        telegram_sends_per_minute=args.telegram_sends_per_minute,
        registry_chunksize=int(args.registry_chunksize * MiB),
        clients=clients,
        redirect=not args.no_redirect,
        seed=args.seed,
        timeout=args.timeout,
        complete_waits_for=waits,
    )
    return config, args.json


def main(argv: list[str] | None = None) -> int:
    config, json_path = parse_args(argv)
    problem = missing_tools()
    if problem is not None:
        print(f"s3_push_bench: {problem}", file=sys.stderr)
        return 2
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="s3-push-bench-") as temp:
        directory = Path(temp)
        layout = directory / "image"
        image = build_oci_image(
            layout, [config.layer_bytes] * config.layers, tag=TAG, seed=config.seed
        )
        print(describe(config, image), file=sys.stderr)
        for client in config.clients:
            for waits_for in config.complete_waits_for:
                print(f"== {client}, Complete waits for {waits_for}", file=sys.stderr)
                try:
                    result = run_client(
                        client,
                        config,
                        layout,
                        image,
                        directory / f"{client}-{waits_for}",
                        waits_for,
                    )
                except (RuntimeError, AssertionError, httpx.HTTPError) as exc:
                    print(f"s3_push_bench: {client} is broken: {exc}", file=sys.stderr)
                    return 1
                results.append(result)
    print(describe(config, image))
    print()
    print(markdown_table(results))
    if json_path is not None:
        payload: dict[str, Any] = {
            "config": asdict(config),
            "layer_bytes": image.layer_bytes,
            "results": [asdict(r) for r in results],
        }
        json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_main(main)
