"""What sending a chunk to Telegram costs, by the size of the pieces it is in.

An upload's chunk is kept in the pieces the client's body arrived in
(app/telegram/chunk_pieces.py) and each piece is one trip through httpx,
httpcore, h11 and a socket write. This bench sends the same 19 MiB chunks
through one `BotClient` to the simulator (a process of its own, one bot) as
one buffer (cut by the client into 1 MiB copies, as a spooled part is sent)
and in pieces of several sizes, every piece a `bytes` of its own made before
the clock starts; the sizes take turns, `--rounds` times. Per size, the
median over the rounds of this process's CPU per GiB sent (user + system)
and of its speed. It answers where a piece is long enough to send as it is
rather than join with its neighbours (`UNCOPIED_PIECE`).

    .venv/bin/python bench/send_pieces_bench.py             # ~1 min
    .venv/bin/python bench/send_pieces_bench.py --rounds 5 --chunks 12 --json out.json

Exit status 1 only if something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import CHAT_ID, Broken, MiB, add_repo_to_path, simulator_process

add_repo_to_path()

from app.bot_tokens import BotToken  # noqa: E402
from app.telegram.chunk_pieces import ChunkPieces, PiecesBody  # noqa: E402
from app.telegram.client import BotClient  # noqa: E402

CHUNK = 19 * MiB
# "buffer": one bytearray, as the spool's flusher sends; "joined": 8 KiB
# pieces as a ChunkPieces joins them (app.telegram.chunk_pieces); a number:
# pieces of that size, each sent as it is (a PiecesBody, nothing joined).
SHAPES: list[str | int] = ["buffer", "joined", 8 * 1024, 64 * 1024, 256_000, MiB]
SMALL = 8 * 1024


async def send_round(url: str, token: str, shape: str | int, chunks: int) -> tuple[float, float]:
    """(CPU-s per GiB, MiB/s) of sending `chunks` chunks shaped `shape`."""
    client = BotClient(BotToken.parse(token), api_base=url)
    source = os.urandom(CHUNK)

    def make() -> bytearray | ChunkPieces | PiecesBody:
        if shape == "buffer":
            return bytearray(source)
        size = SMALL if shape == "joined" else int(shape)
        pieces = [bytes(source[at : at + size]) for at in range(0, CHUNK, size)]
        if shape == "joined":
            return ChunkPieces(pieces)
        return PiecesBody(tuple(pieces), CHUNK)

    try:
        await client.send_document(CHAT_ID, make(), "warm-up.bin")
        prepared: list[bytearray | ChunkPieces | PiecesBody | None] = [
            make() for _ in range(chunks)
        ]
        cpu, wall = time.process_time(), time.perf_counter()
        for index in range(chunks):
            data = prepared[index]
            assert data is not None
            await client.send_document(CHAT_ID, data, f"{index}.bin")
            prepared[index] = None
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await client.aclose()
    gib = chunks * CHUNK / 2**30
    return cpu / gib, gib * 1024 / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="turns of every size (3)")
    parser.add_argument("--chunks", type=int, default=8, help="19 MiB chunks per turn (8)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args()
    results: dict[str | int, list[tuple[float, float]]] = {shape: [] for shape in SHAPES}
    with (
        tempfile.TemporaryDirectory() as workdir,
        simulator_process(Path(workdir), bots=1) as simulator,
    ):
        url, token = simulator.url, simulator.tokens[0]
        for _ in range(args.rounds):
            for shape in SHAPES:
                results[shape].append(asyncio.run(send_round(url, token, shape, args.chunks)))
    print(f"\nsending 19 MiB chunks, median of {args.rounds}; {os.cpu_count()} CPUs")
    print("\n| shape | pieces per chunk | CPU-s per GiB (range) | MiB/s |")
    print("|---|---:|---:|---:|")
    for shape, rows in results.items():
        cpus = [cpu for cpu, _ in rows]
        names = {"buffer": "one buffer (1 MiB copies)", "joined": "8 KiB pieces, joined"}
        name = names[shape] if isinstance(shape, str) else f"{shape:,}-byte pieces as they are"
        count = -(-CHUNK // (MiB if isinstance(shape, str) else shape))
        print(
            f"| {name} | {count} | {statistics.median(cpus):.2f} ({min(cpus):.2f}-{max(cpus):.2f}) "
            f"| {statistics.median(speed for _, speed in rows):.0f} |"
        )
    if args.json:
        numbers = {str(shape): [cpu for cpu, _ in rows] for shape, rows in results.items()}
        args.json.write_text(json.dumps({"cpu_seconds_per_gib": numbers}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Broken as exc:
        print(f"BROKEN: {exc}", file=sys.stderr)
        sys.exit(1)
