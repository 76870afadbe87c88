"""Copies that cross each other (A->B while B->A, over and over, in parallel)
are valid requests and must all succeed, on SQLite and on Postgres: no
"source changed" 404 for a source that existed the whole time, no 503 from a
deadlock between the two writers. Afterwards each object holds one of the two
contents whole, and no Telegram message was lost or left behind."""

from __future__ import annotations

import asyncio

import pytest

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, read
from tests.running_service import INLINE, Service, ServiceFactory, eventually, payload

# Postgres too: races between copies and replacements (locking) (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends

ROUNDS = 12
PAIRS = 3  # crossing copies in flight at once, per round


async def crossing_copies(s3: S3, rounds: int) -> None:
    for _ in range(rounds):
        calls = []
        for _ in range(PAIRS):
            calls.append(
                s3("copy_object", Bucket="box", Key="a", CopySource={"Bucket": "box", "Key": "b"})
            )
            calls.append(
                s3("copy_object", Bucket="box", Key="b", CopySource={"Bucket": "box", "Key": "a"})
            )
        await asyncio.gather(*calls)


async def crossing_part_copies(s3: S3, rounds: int) -> None:
    """UploadPartCopy of A and B into uploads of each other's key, while they are
    being replaced by crossing copies."""
    for round_ in range(rounds):
        uploads = {}
        for key in ("a", "b"):
            created = await s3("create_multipart_upload", Bucket="box", Key=f"part-{key}")
            uploads[key] = created["UploadId"]
        await asyncio.gather(
            s3(
                "upload_part_copy",
                Bucket="box",
                Key="part-a",
                UploadId=uploads["a"],
                PartNumber=1,
                CopySource={"Bucket": "box", "Key": "b"},
            ),
            s3("copy_object", Bucket="box", Key="b", CopySource={"Bucket": "box", "Key": "a"}),
            s3(
                "upload_part_copy",
                Bucket="box",
                Key="part-b",
                UploadId=uploads["b"],
                PartNumber=1,
                CopySource={"Bucket": "box", "Key": "a"},
            ),
            s3("copy_object", Bucket="box", Key="a", CopySource={"Bucket": "box", "Key": "b"}),
        )
        for key, upload_id in uploads.items():
            await s3("abort_multipart_upload", Bucket="box", Key=f"part-{key}", UploadId=upload_id)
        del round_


@pytest.fixture
async def service(start_service: ServiceFactory) -> Service:
    return await start_service(s3_credentials={ACCESS_KEY: SECRET})


async def test_crossing_copies_all_succeed_and_leave_whole_objects(service: Service) -> None:
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    # In chunks, not inline: the copies share Telegram messages.
    contents = {payload(3 * INLINE, seed=1), payload(3 * INLINE, seed=2)}
    first, second = sorted(contents)
    await s3("put_object", Bucket="box", Key="a", Body=first)
    await s3("put_object", Bucket="box", Key="b", Body=second)

    await crossing_copies(s3, ROUNDS)
    await crossing_part_copies(s3, ROUNDS // 3)

    assert await read(s3, "box", "a") in contents
    assert await read(s3, "box", "b") in contents
    await s3("delete_object", Bucket="box", Key="a")
    await s3("delete_object", Bucket="box", Key="b")

    async def nothing_left() -> bool:
        return service.live_messages() == []

    await eventually(nothing_left, within=30)
