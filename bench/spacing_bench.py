"""What the official server's spacing of equal uploads costs one bot, side
by side in one run: spacing off, spacing on with equal chunks (what the
writer cuts a body of known length into, and what every full chunk of a
stream is), and spacing on with chunks a few bytes apart.

telegram-bot-api's Client.cpp (`on_cmd`): per bot, a query whose files total
more than 100,000 bytes waits until clamp(size * 1e-7, 0.2, 0.9) s after the
previous one of the *same* total size (a second of burst), and is refused
with 429 "retry after 60" once that schedule runs more than 5 s ahead. The
simulator follows it with `upload_spacing` (app/telegram/simulator/rules.py).

Each variant sends the same number of documents through one bot of the
project's Dispatcher (one call per token at a time, as the service does), to
a simulator whose uploads cross a link of --bandwidth bytes/s, so that an
upload takes about as long as it would to a fast Telegram data centre. The
simulator reports how many uploads the spacing held back, for how long, and
any 429.

    .venv/bin/python bench/spacing_bench.py
    .venv/bin/python bench/spacing_bench.py --size 19922944 --count 8 --bandwidth 50e6

The exit status is non-zero if any variant met a 429: one call per token at
a time must never push the schedule 5 s ahead.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from dataclasses import dataclass

import structlog

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator

CHAT = -1001000000001


@dataclass
class Result:
    variant: str
    seconds: float
    spaced: int
    waited: float
    rate_limited: int


async def run(variant: str, *, spacing: bool, vary: bool, args: argparse.Namespace) -> Result:
    sim = TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(1),
            chat_ids=[CHAT],
            upload_bandwidth=args.bandwidth,
            upload_spacing=spacing,
            keep_file_bytes=False,
            max_upload_bytes=max(50 * 1024 * 1024, args.size + 1024),
        )
    )
    async with run_simulator(sim) as url:
        client = BotClient(BotToken.parse(sim.tokens[0]), api_base=url)
        dispatcher = Dispatcher([client], chat_ids=[CHAT], max_attempts=1)
        await dispatcher.start()
        try:
            started = time.perf_counter()
            # The writer has every chunk of a stream in flight at once, one
            # per bot: here all of them queue on the one bot.
            sends = [
                dispatcher.send_document(
                    bytes(args.size - (index % 64 if vary else 0)), f"{index}.bin", chat_id=CHAT
                )
                for index in range(args.count)
            ]
            outcomes = await asyncio.gather(*sends, return_exceptions=True)
            seconds = time.perf_counter() - started
        finally:
            await dispatcher.stop(grace=0)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    stats = sim.stats()[sim.bot_ids[0]]
    if failed and not stats.rate_limited:
        raise failed[0]
    return Result(
        variant, seconds, stats.spaced_uploads, stats.spacing_wait_seconds, stats.rate_limited
    )


async def main(args: argparse.Namespace) -> int:
    results = [
        await run("spacing off", spacing=False, vary=False, args=args),
        await run("spacing on, equal chunks", spacing=True, vary=False, args=args),
        await run("spacing on, sizes 0-63 B apart", spacing=True, vary=True, args=args),
    ]
    spacing = min(max(args.size * 1e-7, 0.2), 0.9)
    upload = args.size / args.bandwidth
    print(
        f"{args.count} uploads of {args.size:,} bytes through one bot at "
        f"{args.bandwidth / 1e6:g} MB/s ({upload:.2f} s each; the rule spaces equal "
        f"ones {spacing:.2f} s apart)"
    )
    base = results[0].seconds
    for r in results:
        print(
            f"  {r.variant:<32} {r.seconds:6.2f} s  x{r.seconds / base:4.2f}  "
            f"held back {r.spaced:3d} ({r.waited:5.2f} s in all)  429s {r.rate_limited}"
        )
    return 1 if any(r.rate_limited for r in results) else 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2 * 1024 * 1024, help="bytes per upload")
    parser.add_argument("--count", type=int, default=20, help="uploads per variant")
    parser.add_argument(
        "--bandwidth", type=float, default=20e6, help="bytes/s of the simulated upload link"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
