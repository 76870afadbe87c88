"""Paced throughput with 1, 2 and 3 storage chats, side by side in one run.

Telegram lets a bot post about 20 messages a minute into one chat, so with a
steady backlog the dispatcher's pacing (SENDS_PER_MINUTE per (bot, chat)) is
the binding limit, not bandwidth. Each extra storage chat adds every bot's
budget again; this measures how much of that the dispatcher turns into posts.

For each number of chats it starts a fresh Telegram simulator (in this
process: pacing, not CPU, is the limit) that enforces the budget per (bot,
chat) over a sliding window, and a dispatcher paced the same way. Far more
small documents than the window allows are kept waiting at all times; after
--windows windows the run stops. The simulator's post log is then counted:
posts per window against the ideal (bots x chats x budget), the ratio to one
chat, 429s given, and the most posts any (bot, chat) made in one window (at
most the budget, or the simulator would have refused them).

The window is shortened (--window seconds instead of Telegram's 60) so the
run takes seconds; the budget per window is what matters, and it is the same
in the simulator and the dispatcher.

    .venv/bin/python bench/chats_bench.py
    .venv/bin/python bench/chats_bench.py --bots 4 --budget 20 --window 3 --windows 4

The exit status is non-zero only when something is broken: a 429 from the
simulator (the pacing let a pair exceed its budget) or a send that failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections import deque
from dataclasses import dataclass

import structlog

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.simulator import (
    Post,
    SimulatorConfig,
    TelegramSimulator,
    make_tokens,
    run_simulator,
)

FIRST_CHAT = -1001000000001
DOCUMENT = b"x" * 1024


@dataclass
class Result:
    chats: int
    posts: int
    seconds: float
    per_window: float
    ideal_per_window: int
    rate_limited: int
    busiest_pair: int
    failed: int


def busiest_pair(posts: list[Post], window: float) -> int:
    """The most posts one (bot, chat) made within any `window` seconds."""
    times: dict[tuple[int, int], deque[float]] = {}
    most = 0
    for post in posts:
        recent = times.setdefault((post.bot_id, post.chat_id), deque())
        recent.append(post.posted_at)
        while recent[0] <= post.posted_at - window:
            recent.popleft()
        most = max(most, len(recent))
    return most


async def run_one(chats: int, args: argparse.Namespace) -> Result:
    chat_ids = [FIRST_CHAT - i for i in range(chats)]
    sim = TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(args.bots),
            chat_ids=chat_ids,
            sends_per_minute=args.budget,
            send_window=args.window,
        )
    )
    ideal = args.bots * chats * args.budget
    failed = 0
    async with run_simulator(sim) as url:
        clients = [BotClient(BotToken.parse(token), api_base=url) for token in sim.tokens]
        pool = Dispatcher(
            clients, chat_ids=chat_ids, sends_per_minute=args.budget, pacing_window=args.window
        )
        await pool.start()
        backlog = asyncio.Semaphore(4 * ideal)
        tasks: set[asyncio.Task[None]] = set()

        async def send(index: int) -> None:
            nonlocal failed
            try:
                await pool.send_document(DOCUMENT, f"{index}.bin")
            except Exception:
                failed += 1
            finally:
                backlog.release()

        async def produce() -> None:
            index = 0
            while True:
                await backlog.acquire()
                index += 1
                task = asyncio.create_task(send(index))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

        started = time.monotonic()
        producer = asyncio.create_task(produce())
        await asyncio.sleep(args.windows * args.window)
        producer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await producer
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pool.stop(grace=0)
    seconds = args.windows * args.window
    posts = [p for p in sim.posts() if p.posted_at - started < seconds]
    return Result(
        chats=chats,
        posts=len(posts),
        seconds=seconds,
        per_window=len(posts) / args.windows,
        ideal_per_window=ideal,
        rate_limited=sum(stats.rate_limited for stats in sim.stats().values()),
        busiest_pair=busiest_pair(posts, args.window),
        failed=failed,
    )


def report(results: list[Result], args: argparse.Namespace) -> None:
    print(
        f"\n{args.bots} bots, budget {args.budget} posts per (bot, chat) per "
        f"{args.window:g} s window, {args.windows} windows per run\n"
    )
    header = (
        f"{'chats':>5} {'posts':>6} {'posts/window':>13} {'ideal':>6} {'of ideal':>9} "
        f"{'vs 1 chat':>10} {'429s':>5} {'busiest (bot, chat)':>20}"
    )
    print(header)
    print("-" * len(header))
    base = results[0].per_window or 1.0
    for r in results:
        print(
            f"{r.chats:>5} {r.posts:>6} {r.per_window:>13.1f} {r.ideal_per_window:>6} "
            f"{r.per_window / r.ideal_per_window:>9.2f} {r.per_window / base:>9.2f}x "
            f"{r.rate_limited:>5} {r.busiest_pair:>14}/{args.budget}"
        )
    print()


async def main_async(args: argparse.Namespace) -> int:
    results = [await run_one(chats, args) for chats in args.chats]
    report(results, args)
    broken = [r for r in results if r.rate_limited or r.failed or r.busiest_pair > args.budget]
    for r in broken:
        print(
            f"BROKEN with {r.chats} chats: {r.rate_limited} 429s, {r.failed} failed sends, "
            f"busiest pair {r.busiest_pair} > budget {args.budget}",
            file=sys.stderr,
        )
    return 1 if broken else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bots", type=int, default=3)
    parser.add_argument("--budget", type=int, default=5, help="posts per (bot, chat) per window")
    parser.add_argument("--window", type=float, default=2.0, help="seconds (Telegram: 60)")
    parser.add_argument("--windows", type=int, default=3, help="windows per run")
    parser.add_argument(
        "--chats", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2, 3]
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
