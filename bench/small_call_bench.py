"""What one small Bot API call costs the caller: CPU per `getMe` against the
simulator (a process of its own, one bot), through the client's own sockets
(app/telegram/network.py) and through httpx's (anyio), taking turns
`--rounds` times, each `--calls` calls on uvloop, as the service runs. Per
transport the median over the rounds of this process's CPU (user + system)
per call. Small calls are most of a bot's calls apart from the chunks
themselves (getFile, deleteMessage, getChatMember, pins).

    .venv/bin/python bench/small_call_bench.py            # ~15 s

Exit status 1 only if something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import uvloop
from common import Broken, add_repo_to_path, simulator_process

add_repo_to_path()

from app.config.bot_tokens import BotToken  # noqa: E402
from app.telegram.client import BotClient, tls_context  # noqa: E402
from app.telegram.network import LoopTransport  # noqa: E402

TRANSPORTS = {
    "the client's own sockets (app/telegram/network.py)": LoopTransport,
    "httpx's own sockets (anyio)": httpx.AsyncHTTPTransport,
}


async def calls(url: str, token: str, transport: str, count: int) -> float:
    """CPU microseconds per getMe, over `count` calls after one to warm up."""
    made = TRANSPORTS[transport](verify=tls_context(), limits=httpx.Limits())
    client = BotClient(BotToken.parse(token), api_base=url, transport=made)
    try:
        await client.get_me()
        cpu = time.process_time()
        for _ in range(count):
            await client.get_me()
        return (time.process_time() - cpu) / count * 1e6
    finally:
        await client.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="turns of each transport (5)")
    parser.add_argument("--calls", type=int, default=500, help="getMe calls per turn (500)")
    args = parser.parse_args()
    results: dict[str, list[float]] = {name: [] for name in TRANSPORTS}
    with (
        tempfile.TemporaryDirectory() as workdir,
        simulator_process(Path(workdir), bots=1) as simulator,
    ):
        for _ in range(args.rounds):
            for name in TRANSPORTS:
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    took = runner.run(calls(simulator.url, simulator.tokens[0], name, args.calls))
                results[name].append(took)
    print(f"\ngetMe, {args.calls} calls a turn, median of {args.rounds}; {os.cpu_count()} CPUs")
    print("\n| transport | CPU us per call (range) |")
    print("|---|---:|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Broken as exc:
        print(f"BROKEN: {exc}", file=sys.stderr)
        sys.exit(1)
