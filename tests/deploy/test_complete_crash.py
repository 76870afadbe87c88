"""kill -9 between an answered Complete and the flush loses nothing.

With COMPLETE_WAITS_FOR=spool (the default) Complete answers while the
parts are still only in the spool (the simulator holds every send). The
object reads back byte-exact from the spool; then the process is killed with
SIGKILL. A new process on the same database and spool, with sends let
through, flushes the parts and finalises the object: it reads back
byte-exact, the spool is empty and its bytes are chunks in Telegram.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import boto3
import httpx
from botocore.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.models import MultipartUpload, Piece, SpooledPart
from tests.db.helpers import Database
from tests.deploy.conftest import Service, ServiceStarter, Simulator, wait_for
from tests.deploy.test_spool_crash import count
from tests.running_service import eventually

CHUNK = 256 * 1024
PART = 60 * 1024  # three parts fit one chunk: spooled, one message
ACCESS_KEY = "complete-crash"
SECRET_KEY = "complete-crash-secret-0123456789"


def s3(service: Service) -> object:
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def gate(sim: Simulator, action: str) -> None:
    httpx.post(f"{sim.url}/_sim/{action}/sendDocument", timeout=5).raise_for_status()


async def test_a_completed_object_in_the_spool_survives_kill_9(
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
    tuning = {"s3_min_part_size": 0}
    parts = [os.urandom(PART) for _ in range(3)]
    whole = b"".join(parts)

    gate(telegram_sim, "hold")
    try:
        first = start_service(tmp_path / "unused.db", env=env, tuning=tuning)
        client = s3(first)
        client.create_bucket(Bucket="crash")  # type: ignore[attr-defined]
        upload = client.create_multipart_upload(Bucket="crash", Key="blob")  # type: ignore[attr-defined]
        listed = [
            {
                "PartNumber": n,
                "ETag": client.upload_part(  # type: ignore[attr-defined]
                    Bucket="crash", Key="blob", UploadId=upload["UploadId"], PartNumber=n, Body=data
                )["ETag"],
            }
            for n, data in enumerate(parts, start=1)
        ]
        done = client.complete_multipart_upload(  # type: ignore[attr-defined]
            Bucket="crash",
            Key="blob",
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": listed},
        )
        served = client.get_object(Bucket="crash", Key="blob")["Body"].read()  # type: ignore[attr-defined]

        # Answered, readable, and still only on this disk.
        assert done["ETag"].endswith('-3"')
        assert served == whole
        assert await count(database, SpooledPart) == 3
        assert await count(database, Piece) == 0
        os.kill(first.proc.popen.pid, signal.SIGKILL)
        first.proc.popen.wait(10)
    finally:
        gate(telegram_sim, "release")

    second = start_service(tmp_path / "unused.db", env=env, tuning=tuning)
    client = s3(second)
    assert client.get_object(Bucket="crash", Key="blob")["Body"].read() == whole  # type: ignore[attr-defined]

    async def finalised() -> bool:
        return (
            await count(database, SpooledPart) == 0
            and await count(database, MultipartUpload) == 0
            and await count(database, Piece) > 0
        )

    await eventually(finalised, within=15)
    wait_for(lambda: not list(spool.rglob("*.part")), within=10, what="the spool to empty")
    # Read from its chunks in Telegram now.
    assert client.get_object(Bucket="crash", Key="blob")["Body"].read() == whole  # type: ignore[attr-defined]
