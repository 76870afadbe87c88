"""Upload benchmark: the predecessor's round-robin pool against our per-bot dispatcher.

It starts the Telegram Bot API simulator as a separate process (so that the
server's work does not share an event loop, or a CPU, with the client's), with
a per-connection upload bandwidth, a per-bot concurrency limit of 1 and short
collision 429s, then pushes the same chunks from many concurrent producers
through two contenders, one after the other, on the same simulator:

(a) ``round-robin``: the predecessor's design. One global semaphore of N slots
    (N = number of bots); every attempt takes a slot, then a bot index from a
    counter mod N (``claimBotIndex()``), and calls ``BotClient.send_document``
    directly. On 429 it releases the slot, sleeps ``retry_after`` and tries
    again on the next round-robin index; transient errors are retried too; at
    most 10 attempts per chunk.
(b) ``dispatcher``: ``app.telegram.dispatcher.Dispatcher`` (one worker per
    token, least-loaded pick, 429 cooldown with job migration).

Per contender it reports wall time, goodput, goodput as a share of the ideal
(N bots x per-upload bandwidth), 429s and the largest number of concurrent
calls on one token (both as counted by the simulator), and p50/p99 job latency
(from submit to result). Then three timings the tests leave out, as ratios:
uploads on every token at once against one alone, the dispatcher's return
from a collision 429 against retry_after, and its pacing against the window.

The exit status is non-zero only when something is broken: a job failed (or
did not finish within --timeout), a document came back with the wrong size, or
the dispatcher had two calls in flight on one token. Timing targets are
reported but never fail the run: CI machines vary.

With chunks of one size every simulated upload takes the same time, so uploads
finish in the order they started and the round-robin counter rarely lands on a
busy bot; ``--size-spread 0.5`` (chunks of 50-100 % of --chunk-size, the same
sequence for both) makes them finish out of order, as real traffic does.

    .venv/bin/python bench/dispatcher_bench.py                    # 300 x 1 MiB, 24 producers
    .venv/bin/python bench/dispatcher_bench.py --size-spread 0.5  # uneven chunks
    .venv/bin/python bench/dispatcher_bench.py --small            # quick, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import common
import structlog
from common import (
    CHAT_ID,
    KiB,
    MiB,
    SimulatorProcess,
    run_main,
)

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import RateLimited, TransientError
from app.telegram.types import StoredDocument

TARGET_SHARE_OF_IDEAL = 0.90
# Distinct payloads generated before the clock starts; chunk i sends POOL[i % len].
PAYLOAD_POOL = 16

SendFn = Callable[[bytes, str], Awaitable[StoredDocument]]


# --- settings -------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    chunks: int
    chunk_size: int
    producers: int


FULL = Preset(chunks=300, chunk_size=1 * MiB, producers=24)
SMALL = Preset(chunks=36, chunk_size=256 * KiB, producers=24)


@dataclass(frozen=True)
class BenchConfig:
    chunks: int
    chunk_size: int
    producers: int
    bots: int
    bandwidth: int  # bytes/s per upload connection
    retry_after: int  # seconds, the simulator's collision 429
    timeout: float  # seconds allowed per contender
    small: bool
    # Chunk i is chunk_size minus a random 0..size_spread share of it (0: all equal).
    size_spread: float = 0.0
    seed: int = 1

    @property
    def ideal_bytes_per_s(self) -> float:
        return float(self.bots * self.bandwidth)


def parse_args(argv: list[str] | None = None) -> tuple[BenchConfig, Path | None]:
    parser = argparse.ArgumentParser(
        description="Round-robin pool (predecessor) vs per-bot dispatcher, on the simulator.",
    )
    parser.add_argument("--chunks", type=int, help=f"chunks to upload ({FULL.chunks})")
    parser.add_argument(
        "--chunk-size", type=int, help=f"bytes per chunk ({FULL.chunk_size} = 1 MiB)"
    )
    parser.add_argument("--producers", type=int, help=f"concurrent producers ({FULL.producers})")
    parser.add_argument("--bots", type=int, default=6, help="bot tokens in the pool (6)")
    parser.add_argument(
        "--bandwidth",
        type=int,
        default=4 * MiB,
        help="simulated upload bandwidth per connection, bytes/s (4 MiB/s)",
    )
    parser.add_argument(
        "--retry-after", type=int, default=3, help="retry_after of a collision 429, seconds (3)"
    )
    parser.add_argument(
        "--size-spread",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="make chunk sizes vary: each is --chunk-size minus a random share of up to "
        "FRACTION of it, the same sequence for both contenders (0 = all equal)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the chunk sizes (1)")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds allowed per contender (600)"
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"quick run for CI: {SMALL.chunks} chunks of {SMALL.chunk_size // KiB} KiB "
        "(explicit flags still win)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    preset = SMALL if args.small else FULL
    config = BenchConfig(
        chunks=args.chunks if args.chunks is not None else preset.chunks,
        chunk_size=args.chunk_size if args.chunk_size is not None else preset.chunk_size,
        producers=args.producers if args.producers is not None else preset.producers,
        bots=args.bots,
        bandwidth=args.bandwidth,
        retry_after=args.retry_after,
        timeout=args.timeout,
        small=args.small,
        size_spread=args.size_spread,
        seed=args.seed,
    )
    for name in ("chunks", "chunk_size", "producers", "bots", "bandwidth", "retry_after"):
        if getattr(config, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0.0 <= config.size_spread < 1.0:
        parser.error("--size-spread must be at least 0 and below 1")
    return config, args.json


# --- the workload ------------------------------------------------------------------------


class Workload:
    """The chunks both contenders upload: same sizes, same bytes, made before timing."""

    def __init__(self, config: BenchConfig) -> None:
        rng = random.Random(config.seed)
        spread = int(config.chunk_size * config.size_spread)
        self.sizes = [
            config.chunk_size - (rng.randint(0, spread) if spread else 0)
            for _ in range(config.chunks)
        ]
        self._pool = [
            os.urandom(config.chunk_size) for _ in range(min(PAYLOAD_POOL, config.chunks))
        ]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def chunk(self, index: int) -> bytes:
        data = self._pool[index % len(self._pool)]
        size = self.sizes[index]
        return data if size == len(data) else data[:size]


# --- the simulator as a separate process ----------------------------------------------


def simulator_process(
    config: BenchConfig, workdir: Path
) -> contextlib.AbstractContextManager[SimulatorProcess]:
    """Start `teleuploader telegram-sim` on a free port; stop it on the way out."""
    return common.simulator_process(
        workdir,
        bots=config.bots,
        args=[
            "--concurrency-limit",
            "1",
            "--collision-retry-after",
            str(config.retry_after),
            "--upload-bandwidth",
            str(config.bandwidth),
        ],
        ready_within=30.0,
        grace=10.0,
    )


async def sim_stats(sim: SimulatorProcess) -> dict[str, Any]:
    # In a thread: a blocking request would stall the event loop meanwhile.
    return await asyncio.to_thread(sim.stats)


async def sim_reset_stats(sim: SimulatorProcess) -> None:
    await asyncio.to_thread(sim.reset_stats)


def make_clients(sim: SimulatorProcess) -> list[BotClient]:
    return [BotClient(BotToken.parse(token), api_base=sim.url) for token in sim.tokens]


# --- contender (a): the predecessor's round-robin pool ------------------------------


class RoundRobinPool:
    """The design the dispatcher replaced, written as it worked.

    A global queue with concurrency N (here an `asyncio.Semaphore(N)`) runs the
    uploads; each one, when it starts, takes the next bot index from a shared
    counter (`claimBotIndex()`: counter mod N) and calls that bot directly.
    Nothing stops two running uploads from holding the same index: as soon as
    uploads finish out of order, the counter wraps onto a bot that is still busy.

    On 429 the attempt gives its slot back, sleeps `retry_after` (as Telegram
    asks) and tries again with a fresh index; transient errors (timeouts, 5xx,
    dropped connections) are retried after a short pause; anything else
    propagates. At most `max_attempts` attempts per upload. Giving the slot
    back while sleeping is the kinder reading of the old code: sleeping inside
    the slot would idle a whole upload lane for every 429.
    """

    def __init__(
        self,
        clients: list[BotClient],
        *,
        chat_id: int,
        max_attempts: int = 10,
        transient_pause: float = 0.5,
    ) -> None:
        self.clients = clients
        self.chat_id = chat_id
        self.max_attempts = max_attempts
        self.transient_pause = transient_pause
        self._slots = asyncio.Semaphore(len(clients))
        self._counter = itertools.count()
        self.attempts = 0
        self.rate_limited = 0
        self.transient = 0

    def claim_bot_index(self) -> int:
        return next(self._counter) % len(self.clients)

    async def send_document(self, data: bytes, filename: str) -> StoredDocument:
        last_error: Exception | None = None
        for _attempt in range(self.max_attempts):
            async with self._slots:
                client = self.clients[self.claim_bot_index()]
                self.attempts += 1
                try:
                    return await client.send_document(self.chat_id, data, filename)
                except RateLimited as exc:
                    self.rate_limited += 1
                    last_error, pause = exc, exc.retry_after
                except TransientError as exc:
                    self.transient += 1
                    last_error, pause = exc, self.transient_pause
            await asyncio.sleep(pause)
        assert last_error is not None
        raise last_error

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self.clients))


# --- driving a contender ------------------------------------------------------------


@dataclass
class Result:
    name: str
    wall_s: float
    chunks_ok: int
    chunks_failed: int  # failed or unfinished
    goodput_mib_s: float
    share_of_ideal: float
    rate_limited: int  # 429s given, per the simulator
    max_calls_per_token: int  # max concurrent Bot API calls on one token, per the simulator
    max_uploads_per_token: int  # max concurrent uploads holding the upload slot
    send_document_calls: int
    messages_stored: int
    latency_p50_s: float
    latency_p99_s: float
    latency_max_s: float
    failures: list[str] = field(default_factory=list)
    client_side: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n*q/100), at least 1
    return ordered[int(rank) - 1]


@dataclass
class DriveOutcome:
    wall_s: float
    latencies: list[float]
    failures: list[str]
    bytes: int  # payload bytes of the chunks that were stored


async def drive(send: SendFn, config: BenchConfig, workload: Workload, label: str) -> DriveOutcome:
    """`config.producers` producers take the next chunk number, send it, wait for it."""
    next_chunk = itertools.count()
    latencies: list[float] = []
    failures: list[str] = []
    stored_bytes = 0

    async def producer() -> None:
        while (index := next(next_chunk)) < config.chunks:
            data = workload.chunk(index)
            submitted = time.perf_counter()
            try:
                document = await send(data, f"{label}-chunk-{index:05d}.bin")
            except Exception as exc:  # any failure is a broken run, reported below
                failures.append(f"chunk {index}: {type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - submitted)
            nonlocal stored_bytes
            stored_bytes += len(data)
            if document.size != len(data):
                failures.append(f"chunk {index}: stored {document.size} of {len(data)} bytes")

    started = time.perf_counter()
    tasks = [asyncio.create_task(producer()) for _ in range(config.producers)]
    try:
        async with asyncio.timeout(config.timeout):
            await asyncio.gather(*tasks)
    except TimeoutError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        unfinished = config.chunks - len(latencies) - len(failures)
        failures.append(
            f"timed out after {config.timeout:.0f} s with {unfinished} chunks unfinished"
        )
    wall = time.perf_counter() - started
    return DriveOutcome(wall_s=wall, latencies=latencies, failures=failures, bytes=stored_bytes)


def summarise(
    name: str,
    config: BenchConfig,
    outcome: DriveOutcome,
    stats: dict[str, Any],
    messages_before: int,
    client_side: dict[str, Any],
) -> Result:
    bots = stats["bots"].values()
    messages = _messages(stats) - messages_before
    ok = len(outcome.latencies)
    goodput = outcome.bytes / outcome.wall_s if outcome.wall_s > 0 else 0.0
    return Result(
        name=name,
        wall_s=outcome.wall_s,
        chunks_ok=ok,
        chunks_failed=config.chunks - ok,
        goodput_mib_s=goodput / MiB,
        share_of_ideal=goodput / config.ideal_bytes_per_s,
        rate_limited=sum(int(b["rate_limited"]) for b in bots),
        max_calls_per_token=max(int(b["max_concurrent_calls"]) for b in bots),
        max_uploads_per_token=max(int(b["max_concurrent_uploads"]) for b in bots),
        send_document_calls=sum(int(b["calls"].get("sendDocument", 0)) for b in bots),
        messages_stored=messages,
        latency_p50_s=percentile(outcome.latencies, 50),
        latency_p99_s=percentile(outcome.latencies, 99),
        latency_max_s=max(outcome.latencies, default=float("nan")),
        failures=outcome.failures,
        client_side=client_side,
    )


def _messages(stats: dict[str, Any]) -> int:
    return sum(int(chat["messages"]) for chat in stats["chats"].values())


async def run_round_robin(sim: SimulatorProcess, config: BenchConfig, workload: Workload) -> Result:
    pool = RoundRobinPool(make_clients(sim), chat_id=CHAT_ID)
    try:
        # Same warm-up as the dispatcher gets: one getMe per bot opens its connection.
        await asyncio.gather(*(client.get_me() for client in pool.clients))
        await sim_reset_stats(sim)
        before = _messages(await sim_stats(sim))
        outcome = await drive(pool.send_document, config, workload, "rr")
        stats = await sim_stats(sim)
    finally:
        await pool.aclose()
    client_side = {
        "attempts": pool.attempts,
        "rate_limited": pool.rate_limited,
        "transient": pool.transient,
    }
    return summarise("round-robin (predecessor)", config, outcome, stats, before, client_side)


async def run_dispatcher(sim: SimulatorProcess, config: BenchConfig, workload: Workload) -> Result:
    dispatcher = Dispatcher(make_clients(sim), chat_ids=[CHAT_ID], sends_per_minute=0)
    await dispatcher.start()
    try:
        checked = await asyncio.gather(
            *(
                dispatcher.call(bot_id, "getMe", lambda c: c.get_me())
                for bot_id in dispatcher.workers
            ),
            return_exceptions=True,
        )
        broken = {
            bot: str(err)
            for bot, err in zip(dispatcher.workers, checked, strict=True)
            if isinstance(err, BaseException)
        }
        if broken:
            raise RuntimeError(f"getMe failed on the simulator: {broken}")
        await sim_reset_stats(sim)
        before = _messages(await sim_stats(sim))
        outcome = await drive(dispatcher.send_document, config, workload, "pb")
        stats = await sim_stats(sim)
        status = dispatcher.status()
    finally:
        await dispatcher.stop(grace=5.0)
    client_side = {
        "sends": sum(s.sends for s in status),
        "rate_limited": sum(s.rate_limited for s in status),
        "errors": {
            kind: sum(s.errors.get(kind, 0) for s in status)
            for kind in sorted({k for s in status for k in s.errors})
        },
        "sends_per_bot": {str(s.bot_id): s.sends for s in status},
    }
    return summarise("per-bot dispatcher (ours)", config, outcome, stats, before, client_side)


# --- timings the tests leave out ---------------------------------------------------------
#
# The tests assert orders and counts that hold on any machine (tests/telegram/
# test_simulator.py: uploads on several tokens are in flight at once;
# test_dispatcher.py: no call reaches a bot that is cooling down, pacing keeps
# a bot within Telegram's window). How long these take is measured here, as
# ratios, printed and never judged.

PACING_WINDOW_S = 1.0


@dataclass
class Timings:
    upload_alone_s: float  # one upload on one token
    uploads_together_s: float  # one upload on every token at once
    parallel_ratio: float  # together / alone: 1.0 when tokens do not slow each other down
    # The dispatcher's only bot gets a collision 429 (retry_after); from submit
    # to the stored document. None when no collision could be provoked.
    cooldown_wait_s: float | None
    cooldown_ratio: float | None  # cooldown_wait_s / retry_after
    cooldown_ideal_ratio: float  # (retry_after + one upload) / retry_after
    # Two sends per PACING_WINDOW_S on one bot, four at once: from the first
    # stored document to the third.
    pacing_gap_s: float
    pacing_ratio: float  # pacing_gap_s / PACING_WINDOW_S: just above 1 is ideal


async def _uploads_in_flight(sim: SimulatorProcess, bot_id: str) -> int:
    stats = await sim_stats(sim)
    return int(stats["bots"][bot_id]["calls_in_flight"])


async def measure_cooldown(sim: SimulatorProcess, data: bytes) -> float | None:
    """A dispatcher with one bot sends while another client's long upload holds
    that token's upload slot: Telegram's collision 429, the bot cools down for
    retry_after, the job waits and is sent again."""
    token = BotToken.parse(sim.tokens[0])
    blocker = BotClient(token, api_base=sim.url)
    dispatcher = Dispatcher(
        [BotClient(token, api_base=sim.url)], chat_ids=[CHAT_ID], sends_per_minute=0
    )
    await dispatcher.start()
    try:
        await sim_reset_stats(sim)
        holding = asyncio.create_task(
            blocker.send_document(CHAT_ID, data * 4, "timing-blocker.bin")
        )
        while not await _uploads_in_flight(sim, str(token.bot_id)):
            if holding.done():
                break
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        await dispatcher.send_document(data, "timing-cooldown.bin")
        waited = time.perf_counter() - started
        await holding
        stats = await sim_stats(sim)
    finally:
        await dispatcher.stop(grace=5.0)
        await blocker.aclose()
    return waited if int(stats["bots"][str(token.bot_id)]["rate_limited"]) else None


async def measure_pacing(sim: SimulatorProcess) -> float:
    token = BotToken.parse(sim.tokens[0])
    dispatcher = Dispatcher(
        [BotClient(token, api_base=sim.url)],
        chat_ids=[CHAT_ID],
        sends_per_minute=2,
        pacing_window=PACING_WINDOW_S,
    )
    await dispatcher.start()
    stored: list[float] = []

    async def send(index: int) -> None:
        await dispatcher.send_document(b"p" * 1024, f"timing-pacing-{index}.bin")
        stored.append(time.perf_counter())

    try:
        await asyncio.gather(*(send(index) for index in range(4)))
    finally:
        await dispatcher.stop(grace=5.0)
    stored.sort()
    return stored[2] - stored[0]


async def measure_timings(sim: SimulatorProcess, config: BenchConfig) -> Timings:
    data = os.urandom(config.chunk_size)
    clients = make_clients(sim)
    try:
        await asyncio.gather(*(client.get_me() for client in clients))
        started = time.perf_counter()
        await clients[0].send_document(CHAT_ID, data, "timing-alone.bin")
        alone = time.perf_counter() - started
        started = time.perf_counter()
        await asyncio.gather(
            *(
                client.send_document(CHAT_ID, data, f"timing-together-{index}.bin")
                for index, client in enumerate(clients)
            )
        )
        together = time.perf_counter() - started
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    cooldown = await measure_cooldown(sim, data)
    pacing_gap = await measure_pacing(sim)
    return Timings(
        upload_alone_s=alone,
        uploads_together_s=together,
        parallel_ratio=together / alone,
        cooldown_wait_s=cooldown,
        cooldown_ratio=None if cooldown is None else cooldown / config.retry_after,
        cooldown_ideal_ratio=(config.retry_after + config.chunk_size / config.bandwidth)
        / config.retry_after,
        pacing_gap_s=pacing_gap,
        pacing_ratio=pacing_gap / PACING_WINDOW_S,
    )


def timings_text(config: BenchConfig, timings: Timings) -> str:
    if timings.cooldown_wait_s is None or timings.cooldown_ratio is None:
        cooldown = "no collision could be provoked (the blocking upload ended first)"
    else:
        cooldown = (
            f"{timings.cooldown_wait_s:.2f} s = {timings.cooldown_ratio:.2f}x retry_after "
            f"(ideal {timings.cooldown_ideal_ratio:.2f}x: retry_after + one upload)"
        )
    return "\n".join(
        [
            "timings (printed, never judged; the tests check the orders behind them):",
            f"- {config.bots} uploads on {config.bots} tokens at once / one upload alone: "
            f"{timings.parallel_ratio:.2f}x ({timings.uploads_together_s:.3f} s / "
            f"{timings.upload_alone_s:.3f} s; ideal 1.00x)",
            f"- dispatcher back from a {config.retry_after} s collision 429: {cooldown}",
            f"- dispatcher pacing, 2 sends per {PACING_WINDOW_S:g} s: third send "
            f"{timings.pacing_gap_s:.2f} s after the first = {timings.pacing_ratio:.2f}x "
            "the window (ideal: just above 1.00x)",
        ]
    )


# --- reporting --------------------------------------------------------------------------


def markdown_table(results: list[Result]) -> str:
    header = (
        "| contender | wall (s) | goodput (MiB/s) | of ideal | 429s | max calls/token "
        "| p50 latency (s) | p99 latency (s) | failed chunks |"
    )
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    rows = [
        f"| {r.name} | {r.wall_s:.2f} | {r.goodput_mib_s:.2f} | {r.share_of_ideal:.3f} "
        f"| {r.rate_limited} | {r.max_calls_per_token} | {r.latency_p50_s:.2f} "
        f"| {r.latency_p99_s:.2f} | {r.chunks_failed} |"
        for r in results
    ]
    return "\n".join([header, rule, *rows])


def describe(config: BenchConfig, workload: Workload) -> str:
    sizes = f"{config.chunk_size / MiB:g} MiB"
    if config.size_spread:
        sizes = f"{min(workload.sizes) / MiB:.2f}..{max(workload.sizes) / MiB:.2f} MiB"
    return (
        f"{config.chunks} chunks x {sizes} ({workload.total_bytes / MiB:g} MiB), "
        f"{config.producers} producers, {config.bots} bots, "
        f"{config.bandwidth / MiB:g} MiB/s per upload, "
        f"collision retry_after {config.retry_after} s; "
        f"ideal {config.ideal_bytes_per_s / MiB:g} MiB/s = "
        f"{workload.total_bytes / config.ideal_bytes_per_s:.2f} s"
    )


def problems(round_robin: Result, ours: Result, config: BenchConfig) -> list[str]:
    """What makes the run broken (non-zero exit); timings never do."""
    found: list[str] = []
    for result in (round_robin, ours):
        found += [f"{result.name}: {failure}" for failure in result.failures[:10]]
        if len(result.failures) > 10:
            found.append(f"{result.name}: ... {len(result.failures) - 10} more failures")
        if not result.failures and result.messages_stored < config.chunks:
            found.append(
                f"{result.name}: the simulator holds {result.messages_stored} new messages "
                f"for {config.chunks} chunks"
            )
    if ours.max_calls_per_token >= 2:
        found.append(
            f"{ours.name}: {ours.max_calls_per_token} calls were in flight on one token at once"
        )
    return found


async def race(
    sim: SimulatorProcess, config: BenchConfig, workload: Workload
) -> tuple[Result, Result, Timings]:
    """Both contenders, one after the other, on the same simulator; then the timings."""
    round_robin = await run_round_robin(sim, config, workload)
    print(f"  done: {round_robin.name} in {round_robin.wall_s:.2f} s", flush=True)
    ours = await run_dispatcher(sim, config, workload)
    print(f"  done: {ours.name} in {ours.wall_s:.2f} s", flush=True)
    timings = await measure_timings(sim, config)
    print("  done: timings", flush=True)
    return round_robin, ours, timings


def report(
    config: BenchConfig,
    workload: Workload,
    round_robin: Result,
    ours: Result,
    timings: Timings,
    json_path: Path | None,
) -> int:
    """Print the table and the verdicts; write the JSON; return the exit status."""
    print()
    print(markdown_table([round_robin, ours]))
    print()
    print(timings_text(config, timings))
    print()
    target_met = ours.share_of_ideal >= TARGET_SHARE_OF_IDEAL and ours.rate_limited == 0
    print(
        f"target (ours >= {TARGET_SHARE_OF_IDEAL:.2f} of ideal and zero 429s): "
        f"{'met' if target_met else 'NOT met'} "
        f"({ours.share_of_ideal:.3f} of ideal, {ours.rate_limited} 429s)"
    )
    if round_robin.goodput_mib_s > 0:
        speedup = ours.goodput_mib_s / round_robin.goodput_mib_s
        print(f"goodput of ours / predecessor's: {speedup:.2f}x")
    found = problems(round_robin, ours, config)
    for problem in found:
        print(f"BROKEN: {problem}", file=sys.stderr)
    if json_path is not None:
        document = {
            "config": asdict(config),
            "total_bytes": workload.total_bytes,
            "ideal_mib_s": config.ideal_bytes_per_s / MiB,
            "target": {"share_of_ideal": TARGET_SHARE_OF_IDEAL, "max_429s": 0, "met": target_met},
            "results": [asdict(round_robin), asdict(ours)],
            "timings": asdict(timings),
            "broken": found,
        }
        json_path.write_text(json.dumps(_no_nan(document), indent=2, allow_nan=False) + "\n")
        print(f"numbers written to {json_path}")
    return 1 if found else 0


def _no_nan(value: Any) -> Any:
    """NaN (a percentile of no values) as JSON null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _no_nan(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_no_nan(item) for item in value]
    return value


def configure_logging() -> None:
    """Warnings and errors only, on stderr (stdout carries the table)."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
    # httpx logs request URLs (which carry the bot token) at INFO.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    config, json_path = parse_args(argv)
    configure_logging()
    workload = Workload(config)
    print(describe(config, workload), flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="dispatcher-bench-") as tmp,
        simulator_process(config, Path(tmp)) as sim,
    ):
        print(f"simulator: pid {sim.process.pid} at {sim.url}", flush=True)
        round_robin, ours, timings = asyncio.run(race(sim, config, workload))
        if sim.process.poll() is not None:
            print(f"the simulator died:\n{sim.log_path.read_text()}", file=sys.stderr)
            return 1
    return report(config, workload, round_robin, ours, timings, json_path)


if __name__ == "__main__":
    run_main(main)
