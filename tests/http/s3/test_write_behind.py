"""Write-behind multipart uploads through boto3 in its default configuration.

UploadPart is answered once the part is durable in the local spool; the
flusher sends the parts in full chunks cut across part boundaries; Complete
waits for them (COMPLETE_WAITS_FOR=telegram), answering 200 early and padding
with whitespace when that takes long, and ending with an <Error> if the parts
cannot be stored.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from app.store.chunk_size import plan_chunk_size
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

# Postgres too: spooled parts and their rows (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends

ACCESS_KEY = "AKIDWRITEBEHIND"
SECRET = "write-behind-test-secret-0123456789"
PART = 40 * 1024  # under half the pool (3 bots x 64 KiB): spooled
# Parts this small are the point here; S3's minimum part size is tested in
# test_conformance.py.
ANY_PART_SIZE = {"s3_min_part_size": 0}


def default_client(service: Service) -> BaseClient:
    # No Config: boto3's defaults (retries, timeouts, SigV4 for S3).
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


async def call(client: BaseClient, operation: str, **params: Any) -> Any:
    return await asyncio.to_thread(getattr(client, operation), **params)


@pytest.fixture
async def service(start_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch) -> Service:
    # Answer 200 early after a short wait (5 s in production), so the test
    # sees the whitespace keep-alive without waiting long.
    monkeypatch.setattr("app.http.s3.multipart_handlers.EARLY_ANSWER", 0.3)
    monkeypatch.setattr("app.http.s3.multipart_handlers.KEEPALIVE_INTERVAL", 0.3)
    # What Complete did before objects could be pending: it waits for Telegram
    # (test_complete_at_spool.py: the default, answering at spool durability).
    return await start_service(
        s3_credentials={ACCESS_KEY: SECRET}, complete_waits_for="telegram", **ANY_PART_SIZE
    )


async def upload_parts(client: BaseClient, parts: list[bytes]) -> tuple[str, list[str]]:
    await call(client, "create_bucket", Bucket="box")
    upload = await call(client, "create_multipart_upload", Bucket="box", Key="blob")
    etags = []
    for number, data in enumerate(parts, start=1):
        answer = await call(
            client,
            "upload_part",
            Bucket="box",
            Key="blob",
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=data,
        )
        etags.append(answer["ETag"])
    return str(upload["UploadId"]), etags


def spool_files(service: Service) -> list[Path]:
    return list(Path(service.settings.spool_path).rglob("*.part"))


def listing(etags: list[str]) -> dict[str, Any]:
    return {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]}


async def test_parts_are_acknowledged_from_the_spool_and_sent_in_full_chunks(
    service: Service,
) -> None:
    client = default_client(service)
    raw_completion: list[bytes] = []
    client.meta.events.register(
        "after-call.s3.CompleteMultipartUpload",
        lambda http_response, **_: raw_completion.append(http_response.content),
    )
    parts = [payload(PART, seed=n) for n in range(8)]

    # Telegram stores nothing while the parts come in.
    with service.sim.holding("sendDocument"):
        async with asyncio.timeout(30):
            upload_id, etags = await upload_parts(client, parts)
        # Every part was answered with its MD5 before any chunk reached Telegram.
        assert [e.strip('"') for e in etags] == [hashlib.md5(p).hexdigest() for p in parts]
        assert service.live_messages() == []
        # From now on Telegram takes 2 s to store each chunk: the Complete
        # outlasts EARLY_ANSWER.
        service.sim.configure(latency=2.0)

    done = await call(
        client,
        "complete_multipart_upload",
        Bucket="box",
        Key="blob",
        UploadId=upload_id,
        MultipartUpload=listing(etags),
    )
    body = await call(client, "get_object", Bucket="box", Key="blob")
    content = await asyncio.to_thread(body["Body"].read)

    assert content == b"".join(parts)
    assert done["ETag"].endswith('-8"')
    # 320 KiB in 64 KiB chunks: 5 messages, where one per part would need 8.
    assert len(service.live_messages()) == -(-8 * PART // CHUNK) == 5
    # The answer came early and was kept alive with whitespace.
    (raw,) = raw_completion
    assert raw.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n ')
    assert b"<CompleteMultipartUploadResult" in raw
    assert spool_files(service) == []


async def test_a_completion_that_fails_after_its_200_reports_an_error(
    service: Service,
) -> None:
    service.sim.configure(latency=1.0)
    client = default_client(service)
    upload_id, etags = await upload_parts(client, [payload(PART, seed=n) for n in range(3)])
    for bot_id in service.sim.bot_ids:
        service.sim.revoke(bot_id)  # no bot can store anything any more

    with pytest.raises(ClientError) as caught:
        await call(
            client,
            "complete_multipart_upload",
            Bucket="box",
            Key="blob",
            UploadId=upload_id,
            MultipartUpload=listing(etags),
        )

    assert caught.value.response["Error"]["Code"] == "ServiceUnavailable"
    # Nothing became visible, and the parts are still there to complete later.
    with pytest.raises(ClientError):
        await call(client, "head_object", Bucket="box", Key="blob")
    parts = await call(client, "list_parts", Bucket="box", Key="blob", UploadId=upload_id)
    assert [part["ETag"] for part in parts["Parts"]] == etags


async def test_abort_and_replaced_parts_leave_no_spool_file_and_no_message(
    service: Service,
) -> None:
    client = default_client(service)
    upload_id, _ = await upload_parts(client, [payload(PART, seed=n) for n in range(3)])
    # The same part number again: the first upload of it must go.
    await call(
        client,
        "upload_part",
        Bucket="box",
        Key="blob",
        UploadId=upload_id,
        PartNumber=2,
        Body=payload(PART, seed=9),
    )
    await call(client, "abort_multipart_upload", Bucket="box", Key="blob", UploadId=upload_id)

    async def clean() -> bool:
        return not service.live_messages() and not spool_files(service)

    await eventually(clean, within=20)


async def test_a_full_spool_sends_parts_before_answering(start_service: ServiceFactory) -> None:
    # A spool too small for any part: nothing fails, the parts take the
    # synchronous path and are in Telegram before UploadPart answers.
    service = await start_service(
        s3_credentials={ACCESS_KEY: SECRET}, spool_max_bytes=PART - 1, **ANY_PART_SIZE
    )
    client = default_client(service)
    parts = [payload(PART, seed=n) for n in range(2)]

    upload_id, etags = await upload_parts(client, parts[:1])
    # Cut as any synchronous upload: equal chunks over the 3 bots.
    assert len(service.live_messages()) == -(-PART // plan_chunk_size(PART, CHUNK, 3))
    assert spool_files(service) == []
    second = await call(
        client,
        "upload_part",
        Bucket="box",
        Key="blob",
        UploadId=upload_id,
        PartNumber=2,
        Body=parts[1],
    )
    await call(
        client,
        "complete_multipart_upload",
        Bucket="box",
        Key="blob",
        UploadId=upload_id,
        MultipartUpload=listing([*etags, second["ETag"]]),
    )
    body = await call(client, "get_object", Bucket="box", Key="blob")
    assert await asyncio.to_thread(body["Body"].read) == b"".join(parts)


async def test_a_part_that_fills_the_pool_goes_straight_to_telegram(service: Service) -> None:
    # 3 bots x 64 KiB: a part of half that or more keeps the bots busy on its
    # own, so it is cut into equal chunks at once rather than waiting in the spool.
    client = default_client(service)
    size = 3 * CHUNK // 2
    part = payload(size, seed=5)

    upload_id, etags = await upload_parts(client, [part])

    assert len(service.live_messages()) == -(-size // plan_chunk_size(size, CHUNK, 3))
    assert spool_files(service) == []
    await call(
        client,
        "complete_multipart_upload",
        Bucket="box",
        Key="blob",
        UploadId=upload_id,
        MultipartUpload=listing(etags),
    )
    body = await call(client, "get_object", Bucket="box", Key="blob")
    assert await asyncio.to_thread(body["Body"].read) == part
