"""A tus upload survives kill -9 of the serving process.

Mid-PATCH: part of the file is acknowledged (204, Upload-Offset); a second
PATCH is cut off by SIGKILL while its bytes are being written to the spool.
A new process on the same database and spool reports an offset that counts
every acknowledged byte and no byte that was not made durable; tuspy resumes
from there, and the file reads back byte-exact.

Right after a concatenation: the final upload is acknowledged while its
partials' bytes are only in the spool; a new process reads the file and
settles it into Telegram.
"""

from __future__ import annotations

import io
import os
import signal
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from tusclient.client import TusClient

from app.db.engine import create_engine
from app.db.models import MultipartUpload, Piece, SpooledPart
from tests.db.helpers import Database
from tests.deploy.conftest import (
    CRASH_TUNING,
    SETTLE_WITHIN,
    Service,
    ServiceStarter,
    Simulator,
    wait_for,
)
from tests.deploy.test_complete_crash import gate
from tests.running_service import eventually

CHUNK = 256 * 1024
TUS = {"Tus-Resumable": "1.0.0"}
NAME = "filename YS5iaW4="  # a.bin


async def count(database: Database, what: object) -> int:
    engine = create_engine(database.url)
    try:
        async with engine.connect() as connection:
            return int(await connection.scalar(select(func.count()).select_from(what)) or 0)
    finally:
        await engine.dispose()


def files(spool: Path, pattern: str) -> list[Path]:
    return [path for path in spool.rglob(pattern) if path.is_file()]


OCTETS = {"Content-Type": "application/offset+octet-stream"}


def create_and_acknowledge(service: Service, data: bytes, acknowledged: int) -> str:
    """Create the upload and PATCH its first bytes; its path."""
    headers = {**service.auth, **TUS}
    created = httpx.post(
        f"{service.url}/api/tus/",
        headers={**headers, "Upload-Length": str(len(data)), "Upload-Metadata": NAME},
    )
    assert created.status_code == 201, created.text
    path = urlsplit(created.headers["location"]).path
    patched = httpx.patch(
        f"{service.url}{path}",
        content=data[:acknowledged],
        headers={**headers, **OCTETS, "Upload-Offset": "0"},
    )
    assert patched.status_code == 204, patched.text
    assert patched.headers["upload-offset"] == str(acknowledged)
    return path


def kill_mid_patch(service: Service, path: str, data: bytes, start: int, end: int) -> None:
    """PATCH the rest, send bytes [start, end) of it, and SIGKILL the server
    once they are being written to the spool."""
    address = urlsplit(service.url)
    spool = Path(service.env["SPOOL_DIR"])
    head = (
        f"PATCH {path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Authorization: {service.auth['Authorization']}\r\nTus-Resumable: 1.0.0\r\n"
        f"Content-Type: {OCTETS['Content-Type']}\r\n"
        f"Upload-Offset: {start}\r\nContent-Length: {len(data) - start}\r\n\r\n"
    )
    with socket.create_connection((address.hostname, address.port)) as sock:
        sock.sendall(head.encode() + data[start:end])
        wait_for(
            lambda: any(path.stat().st_size > 0 for path in files(spool, "*.tmp")),
            within=15,
            what="the second PATCH's bytes to reach the spool",
        )
        os.kill(service.proc.pid, signal.SIGKILL)
        service.proc.wait(10)


def put_and_read_back(service: Service, name: str, data: bytes) -> bytes:
    put = httpx.put(
        f"{service.url}/api/files/{name}", content=data, headers=service.auth, timeout=120
    )
    assert put.status_code == 201, put.text
    return httpx.get(f"{service.url}/f/{put.json()['public_id']}", timeout=60).content


def offset_of(service: Service, path: str) -> int:
    looked = httpx.head(f"{service.url}{path}", headers={**service.auth, **TUS})
    assert looked.status_code == 200, looked.text
    return int(looked.headers["upload-offset"])


def resume_with_tuspy(service: Service, path: str, data: bytes) -> int:
    """Finish the upload as tuspy resumes one; the offset it resumed from."""
    client = TusClient(f"{service.url}/api/tus/", headers=service.auth)
    uploader = client.uploader(
        file_stream=io.BytesIO(data), url=f"{service.url}{path}", chunk_size=len(data)
    )
    resumed_from = int(uploader.offset)
    uploader.upload()
    return resumed_from


def download(service: Service, path: str) -> bytes:
    looked = httpx.head(f"{service.url}{path}", headers={**service.auth, **TUS})
    return httpx.get(looked.headers["x-file-url"]).content


async def test_an_upload_resumes_after_kill_9_mid_patch(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    database: Database,
    engine: AsyncEngine,  # empties the tables on Postgres
    tmp_path: Path,
) -> None:
    spool = tmp_path / "spool"
    env = {"DATABASE_URL": database.url, "CHUNK_SIZE": str(CHUNK), "SPOOL_DIR": str(spool)}
    data = os.urandom(4 * 1024 * 1024 + 321)
    acknowledged = 600 * 1024
    sent = acknowledged + 2 * 1024 * 1024

    # The default lease (15 s): the second process starts well within it.
    # A dead instance's spool file that no row names is swept once it is this
    # old (an hour by default: the instance might only have stalled).
    tuning = {"unnamed_spool_file_age_seconds": 1.0}
    first = start_service(tmp_path / "unused.db", env=env, api_key=True, tuning=tuning)
    path = create_and_acknowledge(first, data, acknowledged)
    kill_mid_patch(first, path, data, acknowledged, sent)

    second = start_service(tmp_path / "unused.db", env=env, tuning=tuning)
    second.key = first.key
    # The dead process's bot leases pass only once they expire: an upload
    # that comes meanwhile waits for the bots, it is not refused.
    fresh = os.urandom(3 * CHUNK)
    assert put_and_read_back(second, "after-restart.bin", fresh) == fresh
    offset = offset_of(second, path)
    # Every acknowledged byte, and nothing that was not made durable.
    assert acknowledged <= offset <= sent
    assert resume_with_tuspy(second, path, data) == offset

    assert offset_of(second, path) == len(data)
    assert download(second, path) == data

    # Completion answered at spool durability: the flush may still be running.
    async def flushed() -> bool:
        return await count(database, SpooledPart) == 0

    await eventually(flushed, within=SETTLE_WITHIN)
    # The dead process's half-written segment was swept, every flushed file deleted.
    wait_for(lambda: not files(spool, "*"), within=SETTLE_WITHIN, what="the spool to be empty")


async def test_a_final_upload_acknowledged_from_the_spool_survives_kill_9(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    database: Database,
    engine: AsyncEngine,  # empties the tables on Postgres
    tmp_path: Path,
) -> None:
    """Concatenation answers while the partials' bytes are only in the spool
    (the simulator holds every send), and the process is killed right after.
    A new one reads the file byte-exact and settles it into Telegram."""
    spool = tmp_path / "spool"
    env = {"DATABASE_URL": database.url, "CHUNK_SIZE": str(CHUNK), "SPOOL_DIR": str(spool)}
    pieces = [os.urandom(CHUNK + 1000), os.urandom(3000), os.urandom(2 * CHUNK)]
    whole = b"".join(pieces)
    across = (CHUNK + 500, CHUNK + 5000)  # from the first partial into the third

    gate(telegram_sim, "hold")
    try:
        first = start_service(tmp_path / "unused.db", env=env, api_key=True, tuning=CRASH_TUNING)
        final = concatenate(first, [create_partial(first, piece) for piece in pieces])
        assert final.status_code == 201, final.text
        public_id = final.headers["x-file-id"]
        # Answered, readable, and still only on this disk.
        assert read(first, public_id) == whole
        assert await count(database, SpooledPart) > 0
        assert await count(database, Piece) == 0
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
    finally:
        gate(telegram_sim, "release")

    second = start_service(tmp_path / "unused.db", env=env, tuning=CRASH_TUNING)
    second.key = first.key
    assert read(second, public_id) == whole
    assert read(second, public_id, across) == whole[across[0] : across[1] + 1]

    async def settled() -> bool:
        return (
            await count(database, SpooledPart) == 0
            and await count(database, MultipartUpload) == 0
            and await count(database, Piece) > 0
        )

    await eventually(settled, within=SETTLE_WITHIN)
    wait_for(lambda: not files(spool, "*"), within=SETTLE_WITHIN, what="the spool to be empty")
    # From its chunks in Telegram now.
    assert read(second, public_id) == whole
    assert read(second, public_id, across) == whole[across[0] : across[1] + 1]
    assert file_id_of(second, urlsplit(final.headers["location"]).path) == public_id


def create_partial(service: Service, data: bytes) -> str:
    """A partial upload with all its bytes; its URL."""
    headers = {**service.auth, **TUS}
    created = httpx.post(
        f"{service.url}/api/tus/",
        headers={**headers, "Upload-Length": str(len(data)), "Upload-Concat": "partial"},
    )
    assert created.status_code == 201, created.text
    url = created.headers["location"]
    patched = httpx.patch(url, content=data, headers={**headers, **OCTETS, "Upload-Offset": "0"})
    assert patched.status_code == 204, patched.text
    return url


def concatenate(service: Service, urls: list[str]) -> httpx.Response:
    return httpx.post(
        f"{service.url}/api/tus/",
        headers={**service.auth, **TUS, "Upload-Concat": "final;" + " ".join(urls)},
    )


def file_id_of(service: Service, path: str) -> str:
    looked = httpx.head(f"{service.url}{path}", headers={**service.auth, **TUS})
    assert looked.status_code == 200, looked.text
    return looked.headers["x-file-id"]


def read(service: Service, public_id: str, byte_range: tuple[int, int] | None = None) -> bytes:
    headers = {} if byte_range is None else {"Range": "bytes={}-{}".format(*byte_range)}
    response = httpx.get(f"{service.url}/f/{public_id}", headers=headers)
    assert response.status_code == (200 if byte_range is None else 206), response.text
    return response.content
