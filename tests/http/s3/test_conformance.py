"""S3 behaviour the public suites check, through real boto3 (and raw HTTP
where boto3 cannot say it) against a running service (SQLite and Postgres
through pgbouncer): non-ASCII user metadata, ListBuckets pages, and
EntityTooSmall at S3's own 5 MiB."""

from __future__ import annotations

import base64
from typing import Any

import botocore.handlers
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code, read
from tests.running_service import Service, ServiceFactory
from tests.running_service import payload as data

MiB = 1024 * 1024


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    return S3(s3_service)


# --- non-ASCII user metadata ------------------------------------------------------------


def rfc2047(text: str) -> str:
    return "=?UTF-8?B?" + base64.b64encode(text.encode()).decode() + "?="


async def test_non_ascii_metadata_from_boto3_comes_back_rfc2047_encoded(s3: S3) -> None:
    """AWS: non-ASCII values are "encoded as per RFC 2047 ... before returning".
    boto3 refuses non-ASCII Metadata itself; the suite (and this test) lift
    that check, as an SDK that allows it would send the value."""
    await s3("create_bucket", Bucket="box")
    s3.client.meta.events.unregister(
        "before-parameter-build.s3.PutObject", botocore.handlers.validate_ascii_metadata
    )
    await s3(
        "put_object",
        Bucket="box",
        Key="k",
        Body=b"x",
        Metadata={"k": "Hello World\xe9", "emoji": "\U0001f4c8 up", "plain": "ascii"},
    )
    head = await s3("head_object", Bucket="box", Key="k")
    assert head["Metadata"] == {
        "k": rfc2047("Hello World\xe9"),
        "emoji": rfc2047("\U0001f4c8 up"),
        "plain": "ascii",
    }


async def raw(
    service: Service, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> Any:
    """A signed request whose header values go on the wire as UTF-8 bytes."""
    request = AWSRequest(method=method, url=service.url + path, data=body, headers=headers)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1").add_auth(request)
    wire = {name: value.encode() for name, value in request.headers.items()}
    async with service.client() as http:
        return await http.request(method, service.url + path, headers=wire, content=body)


async def test_utf8_and_rfc2047_metadata_over_raw_http(s3: S3) -> None:
    await s3("create_bucket", Bucket="box")
    sent = {
        "x-amz-meta-utf8": "Grüße, 世界",
        "x-amz-meta-encoded": rfc2047("naïve"),
        "x-amz-meta-q": "=?utf-8?q?caf=C3=A9?=",
        "x-amz-meta-not-rfc2047": "=?nonsense",
    }
    put = await raw(s3.service, "PUT", "/box/k", sent, b"x")
    assert put.status_code == 200, put.text
    got = await raw(s3.service, "GET", "/box/k", {})
    assert got.status_code == 200
    # Every value goes back as ASCII: RFC 2047 for the text beyond it.
    assert got.headers["x-amz-meta-utf8"] == rfc2047("Grüße, 世界")
    assert got.headers["x-amz-meta-encoded"] == rfc2047("naïve")
    assert got.headers["x-amz-meta-q"] == rfc2047("café")
    assert got.headers["x-amz-meta-not-rfc2047"] == "=?nonsense"


# --- ListBuckets pages ------------------------------------------------------------------


async def test_list_buckets_in_pages(s3: S3) -> None:
    assert (await s3("list_buckets", MaxBuckets=1))["Buckets"] == []
    names = ["a-1", "a-2", "a-3", "b-1"]
    for name in names:
        await s3("create_bucket", Bucket=name)

    seen: list[str] = []
    params: dict[str, Any] = {"MaxBuckets": 1}
    for _ in range(10):
        page = await s3("list_buckets", **params)
        seen += [bucket["Name"] for bucket in page["Buckets"]]
        if "ContinuationToken" not in page:
            break
        params["ContinuationToken"] = page["ContinuationToken"]
    assert seen == names

    page = await s3("list_buckets", MaxBuckets=2, Prefix="a-")
    assert [bucket["Name"] for bucket in page["Buckets"]] == ["a-1", "a-2"]
    assert page["Prefix"] == "a-"
    rest = await s3(
        "list_buckets", MaxBuckets=2, Prefix="a-", ContinuationToken=page["ContinuationToken"]
    )
    assert [bucket["Name"] for bucket in rest["Buckets"]] == ["a-3"]
    assert "ContinuationToken" not in rest

    everything = await s3("list_buckets")
    assert [bucket["Name"] for bucket in everything["Buckets"]] == names
    assert "ContinuationToken" not in everything
    error = await s3.error("list_buckets", MaxBuckets=1, ContinuationToken="_w==")
    assert code(error) == "InvalidArgument"


# --- EntityTooSmall ---------------------------------------------------------------------


async def test_entity_too_small_at_s3s_five_mib(start_service: ServiceFactory) -> None:
    service = await start_service(
        s3_credentials={ACCESS_KEY: SECRET},
        s3_min_part_size=5 * MiB,
        max_upload_size=16 * MiB,
        chunk_size=4 * MiB,
    )
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")

    async def upload(key: str, sizes: list[int]) -> tuple[str, list[dict[str, Any]]]:
        upload_id = (await s3("create_multipart_upload", Bucket="box", Key=key))["UploadId"]
        parts = []
        for number, size in enumerate(sizes, start=1):
            part = await s3(
                "upload_part",
                Bucket="box",
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data(size, seed=number),
            )
            parts.append({"PartNumber": number, "ETag": part["ETag"]})
        return upload_id, parts

    async def complete(key: str, upload_id: str, parts: list[dict[str, Any]]) -> Any:
        return await s3(
            "complete_multipart_upload",
            Bucket="box",
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )

    upload_id, parts = await upload("small", [5 * MiB - 1, 10])
    error = await s3.error(
        "complete_multipart_upload",
        Bucket="box",
        Key="small",
        UploadId=upload_id,
        MultipartUpload={"Parts": parts},
    )
    assert code(error) == "EntityTooSmall"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # The upload is still there: leaving out the small part makes it valid.
    await complete("small", upload_id, parts[1:])
    assert await read(s3, "box", "small") == data(10, seed=2)

    upload_id, parts = await upload("exact", [5 * MiB, 1])
    await complete("exact", upload_id, parts)
    assert await read(s3, "box", "exact") == data(5 * MiB, seed=1) + data(1, seed=2)

    # One part of any size is a whole object (Docker's registry), empty too.
    for key, size in (("one", 10), ("empty", 0)):
        upload_id, parts = await upload(key, [size])
        await complete(key, upload_id, parts)
        assert await read(s3, "box", key) == data(size, seed=1)
