"""CompleteMultipartUpload at spool durability (COMPLETE_WAITS_FOR=spool, the
default): the object is there at once, read from the spool until the
flusher has sent its parts, then an ordinary object (app.db.pending)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import boto3
import pytest
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import ClientError, ResponseStreamingError

from app.config.settings import Settings
from tests.http.s3.test_write_behind import spool_files, upload_parts
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

# Postgres too: pending objects are rows of both backends' schemas.
pytestmark = pytest.mark.both_backends

ACCESS_KEY = "AKIDCOMPLETESPOOL"
SECRET = "complete-at-spool-test-secret-0123456"
PART = 40 * 1024  # under half the pool (3 bots x 64 KiB): spooled
PARTS = 5


def s3_client(service: Service) -> BaseClient:
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        # One attempt: a refused read must show, not be retried away.
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )


async def call(client: BaseClient, operation: str, **params: Any) -> Any:
    return await asyncio.to_thread(getattr(client, operation), **params)


async def read(client: BaseClient, **params: Any) -> bytes:
    params.setdefault("Key", "blob")
    answer = await call(client, "get_object", Bucket="box", **params)
    return bytes(await asyncio.to_thread(answer["Body"].read))


@pytest.fixture
async def service(start_service: ServiceFactory) -> Service:
    return await start_service(s3_credentials={ACCESS_KEY: SECRET}, s3_min_part_size=0)


async def complete_upload(client: BaseClient, parts: list[bytes]) -> dict[str, Any]:
    """Upload `parts` and complete them; returns Complete's answer."""
    upload_id, etags = await upload_parts(client, parts)
    listed = [{"PartNumber": number, "ETag": etag} for number, etag in enumerate(etags, start=1)]
    return dict(
        await call(
            client,
            "complete_multipart_upload",
            Bucket="box",
            Key="blob",
            UploadId=upload_id,
            MultipartUpload={"Parts": listed},
        )
    )


async def test_complete_answers_at_once_and_reads_come_from_the_spool_until_the_flush(
    service: Service,
) -> None:
    client = s3_client(service)
    parts = [payload(PART, seed=n) for n in range(PARTS)]
    whole = b"".join(parts)
    expected_etag = hashlib.md5(
        b"".join(hashlib.md5(p).digest() for p in parts), usedforsecurity=False
    ).hexdigest()

    with service.sim.holding("sendDocument"):
        async with asyncio.timeout(20):
            done = await complete_upload(client, parts)
            head = await call(client, "head_object", Bucket="box", Key="blob")
            listed = await call(client, "list_objects_v2", Bucket="box")
            uploads = await call(client, "list_multipart_uploads", Bucket="box")
            content = await read(client)
            # Across the boundary of parts 2 and 3.
            start, end = 2 * PART - 100, 2 * PART + 99
            ranged = await read(client, Range=f"bytes={start}-{end}")
        assert service.live_messages() == []  # nothing reached Telegram yet
        assert spool_files(service)

    assert done["ETag"] == f'"{expected_etag}-{PARTS}"'
    assert head["ETag"] == done["ETag"] and head["ContentLength"] == len(whole)
    assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [("blob", len(whole))]
    assert "Uploads" not in uploads
    assert content == whole
    assert ranged == whole[start : end + 1]

    # Released: the flusher sends the parts in full chunks and finalises.
    await eventually(lambda: not spool_files(service), within=20)
    assert await read(client) == whole
    assert len(service.live_messages()) <= -(-len(whole) // CHUNK) + 1


async def test_a_deleted_pending_object_leaves_no_spool_file_and_no_message(
    service: Service,
) -> None:
    client = s3_client(service)
    with service.sim.holding("sendDocument"):
        await complete_upload(client, [payload(PART, seed=n) for n in range(PARTS)])
        await call(client, "delete_object", Bucket="box", Key="blob")
        with pytest.raises(ClientError):
            await call(client, "head_object", Bucket="box", Key="blob")

    async def clean() -> bool:
        return not service.live_messages() and not spool_files(service)

    await eventually(clean, within=20)


async def test_a_corrupted_spool_file_fails_the_read(service: Service) -> None:
    client = s3_client(service)
    with service.sim.holding("sendDocument"):
        await complete_upload(client, [payload(PART, seed=n) for n in range(PARTS)])
        for file in spool_files(service):
            data = bytearray(file.read_bytes())
            data[len(data) // 2] ^= 0xFF  # same size, one bit pattern off
            file.write_bytes(bytes(data))

        with pytest.raises(ClientError) as caught:
            await read(client)
        with pytest.raises(ClientError) as ranged:
            await read(client, Range="bytes=10-20")

    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    assert ranged.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502


async def test_copies_of_a_pending_object_are_pending_too_and_cost_no_second_upload(
    service: Service,
) -> None:
    """A registry moves every finished blob: a copy (CopyObject, or
    UploadPartCopy of ranges), then a delete of the source. Both copies are
    answered before anything reached Telegram, read back byte-exact, and
    once flushed share the source's chunks: its bytes were sent once."""
    client = s3_client(service)
    parts = [payload(PART, seed=n) for n in range(PARTS)]
    whole = b"".join(parts)
    cut = 2 * PART + 1000  # the copied ranges do not follow part boundaries

    with service.sim.holding("sendDocument"):
        async with asyncio.timeout(20):
            await complete_upload(client, parts)
            await call(
                client,
                "copy_object",
                Bucket="box",
                Key="copied",
                CopySource={"Bucket": "box", "Key": "blob"},
            )
            moved = await call(client, "create_multipart_upload", Bucket="box", Key="moved")
            listed = []
            for number, byte_range in enumerate(
                [f"bytes=0-{cut - 1}", f"bytes={cut}-{len(whole) - 1}"], start=1
            ):
                answer = await call(
                    client,
                    "upload_part_copy",
                    Bucket="box",
                    Key="moved",
                    UploadId=moved["UploadId"],
                    PartNumber=number,
                    CopySource={"Bucket": "box", "Key": "blob"},
                    CopySourceRange=byte_range,
                )
                listed.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
            await call(
                client,
                "complete_multipart_upload",
                Bucket="box",
                Key="moved",
                UploadId=moved["UploadId"],
                MultipartUpload={"Parts": listed},
            )
            await call(client, "delete_object", Bucket="box", Key="blob")
            copied = await read(client, Key="copied")
            moved_bytes = await read(client, Key="moved")
            ranged = await read(client, Key="moved", Range=f"bytes={cut - 10}-{cut + 9}")
        assert service.live_messages() == []

    assert copied == whole and moved_bytes == whole
    assert ranged == whole[cut - 10 : cut + 10]
    await eventually(lambda: not spool_files(service), within=20)
    assert await read(client, Key="copied") == whole
    assert await read(client, Key="moved") == whole
    # The source's bytes went to Telegram once, for all three objects.
    assert len(service.live_messages()) <= -(-len(whole) // CHUNK) + 1


async def test_a_pending_object_copied_onto_its_own_key_keeps_its_bytes(
    service: Service,
) -> None:
    client = s3_client(service)
    parts = [payload(PART, seed=n) for n in range(PARTS)]
    with service.sim.holding("sendDocument"):
        await complete_upload(client, parts)
        # New metadata, same key: the copy replaces its own source.
        await call(
            client,
            "copy_object",
            Bucket="box",
            Key="blob",
            CopySource={"Bucket": "box", "Key": "blob"},
            Metadata={"state": "replaced"},
            MetadataDirective="REPLACE",
        )
        assert await read(client) == b"".join(parts)

    await eventually(lambda: not spool_files(service), within=20)
    head = await call(client, "head_object", Bucket="box", Key="blob")
    assert head["Metadata"] == {"state": "replaced"}
    assert await read(client) == b"".join(parts)


@pytest.mark.parametrize(
    "retention",
    [Settings.model_fields["trash_retention_seconds"].default, 0],
    ids=["trash", "final"],
)
async def test_a_bucket_whose_pending_object_was_deleted_is_deleted_at_once(
    start_service: ServiceFactory, retention: float
) -> None:
    """What `aws s3 rb --force`, `rclone purge` and every test-suite teardown
    do, with boto3's defaults: complete, delete the object, delete the bucket,
    before the flush. The deleted object's upload (in the trash with it, or
    kept for a copy's bytes when deletes are final) held the bucket until
    the flush: BucketNotEmpty. The flush then finishes as before."""
    service = await start_service(
        s3_credentials={ACCESS_KEY: SECRET}, s3_min_part_size=0, trash_retention_seconds=retention
    )
    client = boto3.client(  # no Config: boto3's defaults, retries included
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    parts = [payload(PART, seed=n) for n in range(PARTS)]
    with service.sim.holding("sendDocument"):
        async with asyncio.timeout(20):
            await complete_upload(client, parts)
            await call(client, "create_bucket", Bucket="kept")
            # A copy elsewhere needs the deleted object's bytes.
            await call(client, "copy_object", Bucket="kept", Key="copy", CopySource="box/blob")
            await call(client, "delete_object", Bucket="box", Key="blob")
            await call(client, "delete_bucket", Bucket="box")
            buckets = await call(client, "list_buckets")
        assert [b["Name"] for b in buckets["Buckets"]] == ["kept"]

    await eventually(lambda: not spool_files(service), within=20)
    answer = await call(client, "get_object", Bucket="kept", Key="copy")
    assert await asyncio.to_thread(answer["Body"].read) == b"".join(parts)
    # Sent once, for the copy (and the trashed object, sharing its chunks).
    assert len(service.live_messages()) <= -(-PART * PARTS // CHUNK) + 1


async def test_a_spool_file_damaged_before_its_flush_is_never_served(service: Service) -> None:
    # The flusher cut the damaged bytes into chunks, hashed them block by
    # block and finalised the object: a 200 with wrong bytes, for good.
    client = s3_client(service)
    parts = [payload(PART, seed=n) for n in range(8)]
    flusher = service.app.state.services.flusher
    with service.sim.holding("sendDocument"):
        await complete_upload(client, parts)
        # The last part's: the held sends (one per bot, 3 x 64 KiB) hold
        # the flusher before it reads that far.
        damaged = max(spool_files(service), key=lambda file: file.stat().st_mtime_ns)
        data = bytearray(damaged.read_bytes())
        data[len(data) // 2] ^= 0xFF
        damaged.write_bytes(bytes(data))

    # Settled either way: the flusher found the damage, or flushed it all.
    await eventually(lambda: getattr(flusher, "damaged", 0) or not spool_files(service), within=20)
    # Parts 1 to 7 come from Telegram, then the damaged one's check fails:
    # the answer is cut off, never ended with wrong bytes.
    with pytest.raises((ClientError, ResponseStreamingError)):
        await read(client)
    with pytest.raises(ClientError) as caught:
        await read(client, Range=f"bytes={7 * PART}-{7 * PART + 9}")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    # The other parts were flushed; the damaged one stays, unsent.
    await eventually(lambda: spool_files(service) == [damaged], within=20)
    assert await read(client, Range=f"bytes=0-{PART - 1}") == parts[0]
