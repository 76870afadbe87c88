"""What sending a chunk to Telegram costs, by the size of the pieces it is in.

An upload's chunk is kept in the pieces the client's body arrived in
(app/telegram/chunk_pieces.py) and each piece is one trip through httpx,
httpcore, h11 and a socket write (app/telegram/network.py; one row goes
through httpx's own sockets, anyio's, instead). This bench sends the same 19 MiB chunks
through one `BotClient` to the simulator (a process of its own, one bot) as
one buffer (cut by the client into 1 MiB copies, as a spooled part is sent)
and in pieces of several sizes, every piece a `bytes` of its own made before
the clock starts; the sizes take turns, `--rounds` times. Per size, the
median over the rounds of this process's CPU per GiB sent (user + system)
and of its speed. It answers where a piece is long enough to send as it is
rather than join with its neighbours (`UNCOPIED_PIECE`).

    .venv/bin/python bench/send_pieces_bench.py             # ~1 min
    .venv/bin/python bench/send_pieces_bench.py --rounds 5 --chunks 12 --json out.json
    .venv/bin/python bench/send_pieces_bench.py --tls     # the simulator on HTTPS

Exit status 1 only if something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import uvloop
from common import CHAT_ID, Broken, MiB, add_repo_to_path, simulator_process

add_repo_to_path()

from app.config.bot_tokens import BotToken  # noqa: E402
from app.telegram.chunk_pieces import ChunkPieces, PiecesBody  # noqa: E402
from app.telegram.client import BotClient, tls_context  # noqa: E402
from app.telegram.network import LoopTransport  # noqa: E402

CHUNK = 19 * MiB
# "buffer": one bytearray, as the spool's flusher sends; "joined": 8 KiB
# pieces as a ChunkPieces joins them (app.telegram.chunk_pieces); a number:
# pieces of that size, each sent as it is (a PiecesBody, nothing joined);
# "anyio": 256,000-byte pieces through httpx on its own network backend
# (anyio), as before app/telegram/network.py; "socket": the same pieces in the
# same multipart request written straight to a socket, no HTTP client (the
# floor of any client).
SHAPES: list[str | int] = [
    "buffer",
    "joined",
    8 * 1024,
    64 * 1024,
    256_000,
    "anyio",
    MiB,
    "socket",
]
SMALL = 8 * 1024
UPLOAD_PIECE = 256_000  # what curl's body arrives in (ingest_bench.py)


async def raw_send(
    url: str, token: str, pieces: list[bytes], name: str, tls: ssl.SSLContext | None
) -> None:
    """sendDocument as one multipart POST written with `writelines`, its
    answer read to the end; no retries, no timeouts: a measuring stick."""
    host, port = url.split("://")[1].split(":")
    boundary = "piecesbenchboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="chat_id"\r\n\r\n{CHAT_ID}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="document"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    length = len(head) + sum(map(len, pieces)) + len(tail)
    request = (
        f"POST /bot{token}/sendDocument HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(host, int(port), ssl=tls)
    try:
        writer.writelines([request, head, *pieces, tail])
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    if not answer.startswith(b"HTTP/1.1 200"):
        raise Broken(f"the simulator refused the raw sendDocument: {answer[:200]!r}")


async def send_round(
    url: str, token: str, shape: str | int, chunks: int, tls: ssl.SSLContext | None
) -> tuple[float, float]:
    """(CPU-s per GiB, MiB/s) of sending `chunks` chunks shaped `shape`."""
    # The client's own transport (app/telegram/network.py), or for "anyio"
    # httpx's; with TLS, each trusting the bench's CA.
    verify = tls or tls_context()
    limits = httpx.Limits()
    if shape == "anyio":
        transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    else:
        transport = LoopTransport(verify=verify, limits=limits)
    client = BotClient(BotToken.parse(token), api_base=url, transport=transport)
    source = os.urandom(CHUNK)

    def make() -> bytearray | ChunkPieces | PiecesBody | list[bytes]:
        if shape == "buffer":
            return bytearray(source)
        size = {"joined": SMALL, "socket": UPLOAD_PIECE, "anyio": UPLOAD_PIECE}.get(
            str(shape), shape
        )
        assert isinstance(size, int)
        pieces = [bytes(source[at : at + size]) for at in range(0, CHUNK, size)]
        if shape == "joined":
            return ChunkPieces(pieces)
        return pieces if shape == "socket" else PiecesBody(tuple(pieces), CHUNK)

    async def send(data: bytearray | ChunkPieces | PiecesBody | list[bytes], name: str) -> None:
        if isinstance(data, list):
            await raw_send(url, token, data, name, tls)
        else:
            await client.send_document(CHAT_ID, data, name)

    try:
        await send(make(), "warm-up.bin")
        prepared: list[bytearray | ChunkPieces | PiecesBody | list[bytes] | None] = [
            make() for _ in range(chunks)
        ]
        cpu, wall = time.process_time(), time.perf_counter()
        for index in range(chunks):
            data = prepared[index]
            assert data is not None
            await send(data, f"{index}.bin")
            prepared[index] = None
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await client.aclose()
    gib = chunks * CHUNK / 2**30
    return cpu / gib, gib * 1024 / wall


def local_tls(workdir: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 from a CA of the bench's own (trustme),
    its PEM files in `workdir`, and a client context that trusts the CA."""
    import trustme  # a development dependency, as the tests' TLS servers use

    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    cert, key = workdir / "sim-cert.pem", workdir / "sim-key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return cert, key, context


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="turns of every size (3)")
    parser.add_argument("--chunks", type=int, default=8, help="19 MiB chunks per turn (8)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    parser.add_argument(
        "--tls", action="store_true", help="the simulator serves HTTPS, as Telegram does"
    )
    args = parser.parse_args()
    results: dict[str | int, list[tuple[float, float]]] = {shape: [] for shape in SHAPES}
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        tls = local_tls(workdir) if args.tls else None
        simulator = stack.enter_context(simulator_process(workdir, bots=1, tls=tls))
        context = tls[2] if tls else None
        url, token = simulator.url, simulator.tokens[0]
        for _ in range(args.rounds):
            for shape in SHAPES:
                # uvloop, as the service runs (asyncio's own loop joins what
                # writelines is given, a copy of the whole chunk).
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    sent = send_round(url, token, shape, args.chunks, context)
                    results[shape].append(runner.run(sent))
    over = "HTTPS (TLS 1.3)" if args.tls else "plain HTTP"
    print(f"\nsending 19 MiB chunks over {over}, median of {args.rounds}; {os.cpu_count()} CPUs")
    print("\n| shape | pieces per chunk | CPU-s per GiB (range) | MiB/s |")
    print("|---|---:|---:|---:|")
    for shape, rows in results.items():
        cpus = [cpu for cpu, _ in rows]
        names = {
            "buffer": "one buffer (1 MiB copies)",
            "joined": "8 KiB pieces, joined",
            "socket": "256,000-byte pieces, no HTTP client",
            "anyio": "256,000-byte pieces as they are, httpx's own sockets (anyio)",
        }
        name = names[shape] if isinstance(shape, str) else f"{shape:,}-byte pieces as they are"
        piece = {"socket": UPLOAD_PIECE, "anyio": UPLOAD_PIECE, "buffer": MiB, "joined": MiB}.get(
            str(shape), shape
        )
        count = -(-CHUNK // int(piece))
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
