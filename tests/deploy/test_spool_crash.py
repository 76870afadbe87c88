"""Write-behind S3 parts survive kill -9.

UploadPart is acknowledged once the part is fsynced in the spool and
recorded. The serving process is then killed with SIGKILL before the parts
reach Telegram; a new process on the same database and spool adopts them,
Complete succeeds (at once: the object is pending until the flush), the
object reads back byte-exact, and every Telegram message the upload made
belongs to a chunk the object uses.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import boto3
import httpx
from botocore.config import Config
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.db.models import Chunk, SpooledPart
from tests.db.helpers import Database
from tests.deploy.conftest import (
    CRASH_TUNING,
    SETTLE_WITHIN,
    Service,
    ServiceStarter,
    Simulator,
    wait_for,
)
from tests.running_service import eventually

CHUNK = 256 * 1024
PART = 60 * 1024  # three parts fit one chunk: the flusher waits for more
ACCESS_KEY = "crash-test"
SECRET_KEY = "crash-test-secret-0123456789"


def live_messages(sim: Simulator) -> int:
    stats = httpx.get(f"{sim.url}/_sim/stats", timeout=5).json()
    return int(stats["chats"][str(sim.chat_id)]["live_messages"])


def s3(service: Service) -> object:
    # boto3 as users run it: default retries and timeouts.
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


async def count(database: Database, what: object) -> int:
    engine = create_engine(database.url)
    try:
        async with engine.connect() as connection:
            return int(await connection.scalar(select(func.count()).select_from(what)) or 0)
    finally:
        await engine.dispose()


async def test_acknowledged_parts_survive_kill_9(
    start_service: ServiceStarter,
    telegram_sim: Simulator,
    database: Database,
    engine: AsyncEngine,  # empties the tables on Postgres
    tmp_path: Path,
) -> None:
    spool = tmp_path / "spool"
    env = {
        "DATABASE_URL": database.url,
        "CHUNK_SIZE": str(CHUNK),
        "INLINE_THRESHOLD": "1024",
        "SPOOL_DIR": str(spool),
        "S3_CREDENTIALS": f"{ACCESS_KEY}:{SECRET_KEY}",
    }
    # Parts this small are the point (they wait in the spool together).
    tuning = {**CRASH_TUNING, "s3_min_part_size": 0}
    before = live_messages(telegram_sim)
    parts = [os.urandom(PART) for _ in range(3)]

    first = start_service(tmp_path / "unused.db", env=env, tuning=tuning)
    client = s3(first)
    client.create_bucket(Bucket="crash")  # type: ignore[attr-defined]
    upload = client.create_multipart_upload(Bucket="crash", Key="blob")  # type: ignore[attr-defined]
    etags = [
        client.upload_part(  # type: ignore[attr-defined]
            Bucket="crash", Key="blob", UploadId=upload["UploadId"], PartNumber=n, Body=data
        )["ETag"]
        for n, data in enumerate(parts, start=1)
    ]
    os.kill(first.proc.popen.pid, signal.SIGKILL)
    first.proc.popen.wait(10)

    # Acknowledged, and still only on local disk: nothing reached Telegram.
    assert [hashlib.md5(data).hexdigest() for data in parts] == [e.strip('"') for e in etags]
    assert await count(database, SpooledPart) == 3
    assert len(list(spool.rglob("*.part"))) == 3
    assert live_messages(telegram_sim) == before

    second = start_service(tmp_path / "unused.db", env=env, tuning=tuning)
    client = s3(second)
    done = client.complete_multipart_upload(  # type: ignore[attr-defined]
        Bucket="crash",
        Key="blob",
        UploadId=upload["UploadId"],
        MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]
        },
    )
    body = client.get_object(Bucket="crash", Key="blob")["Body"].read()  # type: ignore[attr-defined]

    assert done["ETag"].endswith('-3"')
    assert body == b"".join(parts)

    # Complete answered at spool durability: the flush may still be running.
    async def flushed() -> bool:
        return await count(database, SpooledPart) == 0

    await eventually(flushed, within=SETTLE_WITHIN)
    # One message for the three parts (cut across them), and no other.
    assert await count(database, Chunk) == 1
    wait_for(
        lambda: live_messages(telegram_sim) == before + 1,
        within=15,
        what="the upload's messages to be exactly its chunks",
    )
    wait_for(lambda: not list(spool.rglob("*.part")), within=10, what="the spool to empty")
