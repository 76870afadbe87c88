"""UploadPartCopy into an upload created with a flexible checksum: a copied
part gets its checksum as an uploaded part does, so the Complete, ListParts
and GetObjectAttributes have it (boto3 in its default configuration, both
databases, the simulator). Expected values come from the reference
libraries (test_parts_and_checksums), never from the service's own code."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.http.s3.test_api_boto3 import ACCESS_KEY, SECRET
from tests.http.s3.test_parts_and_checksums import (
    PART,
    Client,
    checksum,
    composite,
    s3,
    service,
)
from tests.running_service import Service
from tests.running_service import payload as data

#: Over INLINE_THRESHOLD: kept in chunks (of 1 MiB in this service).
SOURCE = data(PART + 3000, seed=41)
#: Under it: kept in the database row.
SMALL = data(1000, seed=42)


# The service (1 MiB chunks) and a client with bucket "box", as there.
__all__ = ["s3", "service"]


async def copy_part(
    s3: Client, upload_id: str, number: int, source: str, copy_range: str | None = None
) -> dict[str, Any]:
    extra = {"CopySourceRange": copy_range} if copy_range else {}
    answer: dict[str, Any] = await s3(
        "upload_part_copy",
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        PartNumber=number,
        CopySource={"Bucket": "box", "Key": source},
        **extra,
    )
    return answer


def _client(service: Service, raw: list[tuple[int, bytes]]) -> Any:
    """boto3 as users run it, but for one attempt, keeping each
    UploadPartCopy answer's status and raw body in `raw`."""
    client = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(retries={"total_max_attempts": 1}),
    )
    client.meta.events.register(
        "after-call.s3.UploadPartCopy",
        lambda http_response, **_: raw.append((http_response.status_code, http_response.content)),
    )
    return client


async def source_and_sha256_upload(s3: Client) -> str:
    """Puts "source" and starts an upload of "m" with SHA256 checksums; its id."""
    await s3("put_object", Bucket="box", Key="source", Body=SOURCE)
    created = await s3("create_multipart_upload", Bucket="box", Key="m", ChecksumAlgorithm="SHA256")
    return str(created["UploadId"])


def answer_early(monkeypatch: pytest.MonkeyPatch, after: float) -> None:
    """Slow copies answer early after `after` seconds (5 in production) and
    send whitespace every 0.2 s."""
    monkeypatch.setattr("app.http.s3.multipart_handlers.EARLY_ANSWER", after)
    monkeypatch.setattr("app.http.s3.multipart_handlers.KEEPALIVE_INTERVAL", 0.2)


async def copy_once(client: Any, upload_id: str) -> dict[str, Any]:
    """Bytes 1 to PART of "source" as part 1 of "m", one attempt."""
    answer: dict[str, Any] = await asyncio.to_thread(
        client.upload_part_copy,
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        PartNumber=1,
        CopySource={"Bucket": "box", "Key": "source"},
        CopySourceRange=f"bytes=1-{PART}",
    )
    return answer


@pytest.mark.parametrize(
    ("algorithm", "kind"),
    [("CRC32", "COMPOSITE"), ("SHA256", "COMPOSITE"), ("CRC64NVME", "FULL_OBJECT")],
)
async def test_copied_parts_have_checksums_like_uploaded_ones(
    s3: Client,
    algorithm: str,
    kind: str,
) -> None:
    # boto3 stores a CRC32 of each object it puts: a whole copy with that
    # algorithm may take it, any other copy reads the bytes.
    await s3("put_object", Bucket="box", Key="source", Body=SOURCE)
    await s3("put_object", Bucket="box", Key="small", Body=SMALL)
    created = await s3(
        "create_multipart_upload",
        Bucket="box",
        Key="m",
        ChecksumAlgorithm=algorithm,
        ChecksumType=kind,
    )
    upload_id = created["UploadId"]
    uploaded = data(PART, seed=43)
    bodies = [SOURCE[1000 : 1000 + PART], uploaded, SOURCE, SMALL]
    copied = {
        1: (await copy_part(s3, upload_id, 1, "source", f"bytes=1000-{1000 + PART - 1}"))[
            "CopyPartResult"
        ],
        3: (await copy_part(s3, upload_id, 3, "source"))["CopyPartResult"],
        4: (await copy_part(s3, upload_id, 4, "small"))["CopyPartResult"],
    }
    sent = await s3(
        "upload_part",
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        PartNumber=2,
        Body=uploaded,
        ChecksumAlgorithm=algorithm,
    )
    etags = [copied[1]["ETag"], sent["ETag"], copied[3]["ETag"], copied[4]["ETag"]]
    element = f"Checksum{algorithm}"
    expected_parts = [checksum(algorithm, body) for body in bodies]
    # Each copy answers with its part's checksum, as UploadPart does in its header.
    assert [copied[n].get(element) for n in (1, 3, 4)] == [expected_parts[n - 1] for n in (1, 3, 4)]

    listed = await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
    assert [part.get(element) for part in listed["Parts"]] == expected_parts

    completed = await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        MultipartUpload={
            "Parts": [
                {"PartNumber": number, "ETag": etag, element: value}
                for number, (etag, value) in enumerate(zip(etags, expected_parts, strict=True), 1)
            ]
        },
    )
    whole = (
        composite(algorithm, bodies)
        if kind == "COMPOSITE"
        else checksum(algorithm, b"".join(bodies))
    )
    assert (completed.get(element), completed.get("ChecksumType")) == (whole, kind)
    attributes = await s3(
        "get_object_attributes",
        Bucket="box",
        Key="m",
        ObjectAttributes=["Checksum", "ObjectParts"],
    )
    assert attributes["Checksum"][element] == whole
    assert [p.get(element) for p in attributes["ObjectParts"]["Parts"]] == expected_parts
    _, body = await s3.read(Bucket="box", Key="m")
    assert body == b"".join(bodies)


async def test_a_copy_into_an_upload_without_a_checksum_reads_nothing_back(
    service: Service, s3: Client
) -> None:
    """Without an algorithm to keep, a copied part stays metadata only: it
    is made while no byte could be read from Telegram."""
    await s3("put_object", Bucket="box", Key="source", Body=SOURCE)
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="m"))["UploadId"]
    service.sim.set_faults(fault_download_drop_rate=1.0)
    try:
        copied = await copy_part(s3, upload_id, 1, "source", f"bytes=0-{PART - 1}")
    finally:
        service.sim.set_faults(fault_download_drop_rate=0.0)
    assert not any(key.startswith("Checksum") for key in copied["CopyPartResult"])
    listed = await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
    assert [part["Size"] for part in listed["Parts"]] == [PART]
    assert not any(key.startswith("Checksum") for key in listed["Parts"][0])


async def test_a_copy_whose_bytes_cannot_be_read_is_a_503_and_records_no_part(
    service: Service, s3: Client
) -> None:
    upload_id = await source_and_sha256_upload(s3)
    once = _client(service, [])
    service.sim.set_faults(fault_download_drop_rate=1.0)
    try:
        with pytest.raises(ClientError) as refused:
            await copy_once(once, upload_id)
    finally:
        service.sim.set_faults(fault_download_drop_rate=0.0)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert refused.value.response["Error"]["Code"] == "ServiceUnavailable"
    assert "Parts" not in await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)

    await copy_part(s3, upload_id, 1, "source", f"bytes=1-{PART}")
    listed = await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
    assert listed["Parts"][0]["ChecksumSHA256"] == checksum("SHA256", SOURCE[1 : PART + 1])


async def test_a_slow_copy_answers_at_once_and_keeps_the_connection_alive(
    service: Service, s3: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a multi-GiB part back can outlast a client's 60 s read
    timeout: past EARLY_ANSWER (5 s; 0.3 s here) the copy answers 200 at
    once, sends whitespace while it reads, and ends with the result, as a
    slow CompleteMultipartUpload does."""
    answer_early(monkeypatch, after=0.3)
    upload_id = await source_and_sha256_upload(s3)
    raw: list[tuple[int, bytes]] = []
    client = _client(service, raw)
    # Each Telegram connection hands out PART / 8 per second; a download keeps
    # many busy at once (its read-ahead), and the read still takes over a second.
    service.sim.configure(download_bandwidth=PART / 8)
    try:
        answer = await copy_once(client, upload_id)
    finally:
        service.sim.configure(download_bandwidth=None)
    expected = checksum("SHA256", SOURCE[1 : PART + 1])
    assert answer["CopyPartResult"]["ChecksumSHA256"] == expected
    ((status, body),) = raw
    assert status == 200
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n  ')  # kept alive
    listed = await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
    assert [(p["PartNumber"], p["ChecksumSHA256"]) for p in listed["Parts"]] == [(1, expected)]


async def test_a_slow_copy_that_fails_after_answering_200_ends_with_an_error_document(
    service: Service, s3: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 200 is sent before the read is done: a read that fails then ends
    the body with an <Error>, which boto3 raises (and would retry), and no
    part is recorded."""
    answer_early(monkeypatch, after=0.0)
    upload_id = await source_and_sha256_upload(s3)
    raw: list[tuple[int, bytes]] = []
    client = _client(service, raw)
    service.sim.set_faults(fault_download_drop_rate=1.0)
    try:
        with pytest.raises(ClientError) as refused:
            await copy_once(client, upload_id)
    finally:
        service.sim.set_faults(fault_download_drop_rate=0.0)
    assert refused.value.response["Error"]["Code"] == "ServiceUnavailable"
    # Answered 200 and kept alive (botocore then counts the error as a 500).
    ((_, body),) = raw
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n ')
    assert b"<Error><Code>ServiceUnavailable</Code>" in body
    assert "Parts" not in await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
