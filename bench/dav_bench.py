"""WebDAV against the native API: a big PUT and GET each way, side by side,
and a PROPFIND of a folder of 10,000 entries.

Everything runs as separate processes, as in production: the Telegram Bot API
simulator (``teleuploader telegram-sim``), the service (``teleuploader serve``
on a fresh SQLite database, its defaults but CHUNK_SIZE and MAX_UPLOAD_SIZE)
and the client, plain ``http.client`` connections of this process.

1. Transfers, ``--rounds`` times, the two faces in turns (native first in odd
   rounds, WebDAV first in even ones, so neither always runs on a warmer
   service): a PUT of ``--size`` MiB streamed with a Content-Length
   (``PUT /api/files/NAME`` with a Bearer key; ``PUT /dav/NAME`` with Basic),
   then a GET of it read whole (``GET /f/ID``; ``GET /dav/NAME``). Each
   timing is the client's, from the request's first byte to the answer's
   last; the sizes and ETags are checked.
2. Listing: ``--entries`` files are written straight into the service's
   database (tiny inline objects under one folder), then PROPFIND
   ``Depth: 1`` of the folder is timed ``--listings`` times, with the body
   rclone's owncloud vendor sends and with an empty body (allprop); the whole
   207 is read and its responses counted.

Exit status 1 only when something is broken (a process did not start, a
transfer came back short); the numbers are for reading.

    .venv/bin/python bench/dav_bench.py                    # 1 GiB, 10,000 entries
    .venv/bin/python bench/dav_bench.py --size 64 --entries 1000 --listings 3   # quicker
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common import (
    CHAT_ID,
    Broken,
    MiB,
    ServedService,
    add_repo_to_path,
    cpu_seconds,
    free_port,
    served,
    simulator_process,
)
from download_bench import _settings_names

BLOCK = 4 * MiB
OWNCLOUD_PROPFIND = (
    b'<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">'
    b"<d:prop><d:displayname/><d:getlastmodified/><d:getcontentlength/><d:resourcetype/>"
    b"<oc:checksums/><oc:permissions/></d:prop></d:propfind>"
)
FOLDER = "bench-folder"


@dataclass(frozen=True)
class Options:
    size: int
    rounds: int
    entries: int
    listings: int
    bots: int
    chunk_size: int


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="MiB per transfer (1024)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of transfers (2)")
    parser.add_argument("--entries", type=int, default=10_000, help="files in the folder listed")
    parser.add_argument("--listings", type=int, default=5, help="PROPFINDs timed, each body (5)")
    parser.add_argument("--bots", type=int, default=8, help="bot tokens (8)")
    parser.add_argument("--chunk-size", type=int, default=19, help="CHUNK_SIZE in MiB (19)")
    args = parser.parse_args(argv)
    return Options(
        size=args.size * MiB,
        rounds=args.rounds,
        entries=args.entries,
        listings=args.listings,
        bots=args.bots,
        chunk_size=args.chunk_size * MiB,
    )


# --- the client -------------------------------------------------------------------------


def _connection(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=600)


def _body(size: int) -> Iterator[bytes]:
    """`size` bytes: one random block, sent again and again (the service
    hashes and stores every byte; nothing dedupes)."""
    block = os.urandom(BLOCK)
    sent = 0
    while sent < size:
        piece = block[: min(BLOCK, size - sent)]
        sent += len(piece)
        yield piece


def _timed(
    url: str, method: str, path: str, headers: dict[str, str], body: object = None
) -> tuple[float, int, int]:
    """(seconds, status, bytes read) of one request read whole."""
    connection = _connection(url)
    started = time.perf_counter()
    connection.request(method, path, body=body, headers=headers)  # type: ignore[arg-type]
    response = connection.getresponse()
    read = 0
    while piece := response.read(MiB):
        read += len(piece)
    seconds = time.perf_counter() - started
    connection.close()
    return seconds, response.status, read


@dataclass
class Transfer:
    put: float
    get: float
    # The service's CPU seconds for each.
    put_cpu: float = 0.0
    get_cpu: float = 0.0


def _native(svc: ServedService, name: str, size: int) -> Transfer:
    bearer = {"Authorization": f"Bearer {svc.key}"}
    cpu = cpu_seconds(svc.process.pid)
    put, status, _ = _timed(
        svc.url,
        "PUT",
        f"/api/files/{name}",
        {**bearer, "Content-Length": str(size)},
        _body(size),
    )
    if status != 201:
        raise Broken(f"native PUT answered {status}")
    put_cpu = cpu_seconds(svc.process.pid) - cpu
    public_id = _public_id(svc, name)
    cpu = cpu_seconds(svc.process.pid)
    get, status, read = _timed(svc.url, "GET", f"/f/{public_id}", {})
    if status != 200 or read != size:
        raise Broken(f"native GET answered {status} with {read} bytes of {size}")
    return Transfer(put, get, put_cpu, cpu_seconds(svc.process.pid) - cpu)


def _public_id(svc: ServedService, name: str) -> str:
    connection = _connection(svc.url)
    connection.request(
        "GET", f"/api/files?prefix={name}", headers={"Authorization": f"Bearer {svc.key}"}
    )
    items = json.loads(connection.getresponse().read())["items"]
    connection.close()
    (item,) = items
    return str(item["public_id"])


def _dav(svc: ServedService, name: str, size: int) -> Transfer:
    basic = {"Authorization": "Basic " + base64.b64encode(f"bench:{svc.key}".encode()).decode()}
    cpu = cpu_seconds(svc.process.pid)
    put, status, _ = _timed(
        svc.url, "PUT", f"/dav/{name}", {**basic, "Content-Length": str(size)}, _body(size)
    )
    if status != 201:
        raise Broken(f"WebDAV PUT answered {status}")
    put_cpu = cpu_seconds(svc.process.pid) - cpu
    cpu = cpu_seconds(svc.process.pid)
    get, status, read = _timed(svc.url, "GET", f"/dav/{name}", basic)
    if status != 200 or read != size:
        raise Broken(f"WebDAV GET answered {status} with {read} bytes of {size}")
    return Transfer(put, get, put_cpu, cpu_seconds(svc.process.pid) - cpu)


# --- the folder of many entries -----------------------------------------------------------


def _fill_folder(database: Path, entries: int) -> None:
    """`entries` tiny files under named/FOLDER/, straight into the database
    (as many uploads would leave them, without the hour they would take)."""
    add_repo_to_path()
    import asyncio

    from sqlalchemy import insert

    from app.db.engine import create_engine
    from app.db.models import StoredObject
    from app.db.object_rows import ObjectSpec, new_public_id, row_values
    from app.db.types import utcnow

    async def fill() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{database}")
        now = utcnow()
        rows = []
        for n in range(entries):
            data = b"%d" % n
            spec = ObjectSpec(
                bucket="_native",
                key=f"named/{FOLDER}/file-{n:06d}.txt",
                name=f"file-{n:06d}.txt",
                content_type="text/plain",
                size=len(data),
                etag='"0123456789abcdef0123456789abcdef"',
                md5="0123456789abcdef0123456789abcdef",
                inline_data=data,
            )
            rows.append(row_values(spec, new_public_id(), now, now))
        async with engine.begin() as connection:
            await connection.execute(insert(StoredObject), rows)
        await engine.dispose()

    asyncio.run(fill())


def _listings(svc: ServedService, options: Options) -> dict[str, list[tuple[float, float]]]:
    """Per body: (seconds, the service's CPU seconds) of each PROPFIND."""
    basic = {
        "Authorization": "Basic " + base64.b64encode(f"bench:{svc.key}".encode()).decode(),
        "Depth": "1",
    }
    found: dict[str, list[tuple[float, float]]] = {}
    for label, body in (("rclone's owncloud PROPFIND", OWNCLOUD_PROPFIND), ("allprop", b"")):
        found[label] = []
        for _ in range(options.listings):
            cpu = cpu_seconds(svc.process.pid)
            seconds, status, _ = _timed(svc.url, "PROPFIND", f"/dav/{FOLDER}/", basic, body)
            if status != 207:
                raise Broken(f"PROPFIND answered {status}")
            found[label].append((seconds, cpu_seconds(svc.process.pid) - cpu))
    return found


def _check_listing(svc: ServedService, entries: int) -> int:
    connection = _connection(svc.url)
    basic = base64.b64encode(f"bench:{svc.key}".encode()).decode()
    connection.request(
        "PROPFIND",
        f"/dav/{FOLDER}/",
        body=OWNCLOUD_PROPFIND,
        headers={"Authorization": f"Basic {basic}", "Depth": "1"},
    )
    text = connection.getresponse().read()
    connection.close()
    listed = text.count(b"<D:response>") - 1
    if listed != entries:
        raise Broken(f"the PROPFIND listed {listed} entries of {entries}")
    return len(text)


# --- the run ------------------------------------------------------------------------------


def run(options: Options, workdir: Path) -> None:
    with simulator_process(workdir, bots=options.bots) as sim:
        database = workdir / "teleuploader.db"
        env = {k: v for k, v in os.environ.items() if k not in _settings_names()}
        env.update(
            {
                "BOT_TOKENS": ",".join(sim.tokens),
                "STORAGE_CHAT_ID": str(CHAT_ID),
                "TELEGRAM_API_BASE": sim.url,
                "DATABASE_URL": f"sqlite+aiosqlite:///{database}",
                "HOST": "127.0.0.1",
                "PORT": str(free_port()),
                "CHUNK_SIZE": str(options.chunk_size),
                "MAX_UPLOAD_SIZE": str(max(options.size, 64 * MiB)),
                "LOG_LEVEL": "WARNING",
                "LOG_FORMAT": "json",
            }
        )
        with served(env, workdir) as svc:
            transfers: dict[str, list[Transfer]] = {"native": [], "WebDAV": []}
            for number in range(options.rounds):
                faces = ["native", "WebDAV"] if number % 2 == 0 else ["WebDAV", "native"]
                for face in faces:
                    name = f"big-{number}-{face.lower()}.bin"
                    measure = _native if face == "native" else _dav
                    transfers[face].append(measure(svc, name, options.size))
                    print(f"  round {number + 1}, {face}: done", file=sys.stderr)
            _fill_folder(database, options.entries)
            size = _check_listing(svc, options.entries)
            listings = _listings(svc, options)
    _report(options, transfers, listings, size)


def _report(
    options: Options,
    transfers: dict[str, list[Transfer]],
    listings: dict[str, list[tuple[float, float]]],
    listing_bytes: int,
) -> None:
    mib = options.size / MiB
    print(f"\n{mib:.0f} MiB each way, {options.rounds} rounds (seconds; MiB/s)\n")
    print(
        "| face | PUT s (each round) | GET s (each round) | PUT MiB/s | GET MiB/s "
        "| service CPU s, PUT | service CPU s, GET |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    means = {}
    for face, runs in transfers.items():
        put = statistics.mean(run.put for run in runs)
        get = statistics.mean(run.get for run in runs)
        means[face] = (put, get)
        print(
            f"| {face} | {', '.join(f'{run.put:.1f}' for run in runs)} "
            f"| {', '.join(f'{run.get:.1f}' for run in runs)} "
            f"| {mib / put:.0f} | {mib / get:.0f} "
            f"| {statistics.mean(run.put_cpu for run in runs):.1f} "
            f"| {statistics.mean(run.get_cpu for run in runs):.1f} |"
        )
    put_ratio = means["WebDAV"][0] / means["native"][0]
    get_ratio = means["WebDAV"][1] / means["native"][1]
    print(
        f"\nWebDAV / native time: PUT {put_ratio:.2f}x, GET {get_ratio:.2f}x (target: within 1.1x)"
    )
    print(
        f"\nPROPFIND Depth 1 of a folder of {options.entries:,} files "
        f"({listing_bytes / 1e6:.1f} MB of XML), {options.listings} times each:\n"
    )
    print("| body | median ms | slowest ms | service CPU ms (median) |")
    print("| --- | ---: | ---: | ---: |")
    for label, runs in listings.items():
        seconds = [wall for wall, _ in runs]
        cpu = [used for _, used in runs]
        print(
            f"| {label} | {statistics.median(seconds) * 1000:.0f} | {max(seconds) * 1000:.0f} "
            f"| {statistics.median(cpu) * 1000:.0f} |"
        )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="dav-bench-") as directory:
            run(options, Path(directory))
    except Broken as exc:
        print(f"dav_bench: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
