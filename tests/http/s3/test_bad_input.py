"""Bad input to the S3 API gets an S3 error document with a 4xx, never a 500,
and is refused before any byte goes to Telegram (real HTTP, both databases,
the simulator)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from app.store.limits import MAX_CONTENT_TYPE_LENGTH, MAX_USER_METADATA_BYTES
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code, read
from tests.running_service import CHAT_ID, CHUNK, Service, payload


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    return client


async def signed(
    service: Service, method: str, path_and_query: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """A request signed by botocore, sent as is (for what boto3's own
    parameter checks would not let through)."""
    url = service.url + path_and_query
    request = AWSRequest(method=method, url=url, headers=headers or {}, data=b"")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    async with service.client() as http:
        return await http.request(
            method, prepared.url, headers=dict(prepared.headers.items()), content=b""
        )


def error_code(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/xml", response.text
    start = response.text.index("<Code>") + len("<Code>")
    return response.text[start : response.text.index("</Code>")]


async def test_a_presigned_expiry_in_superscript_digits_is_a_400_without_a_key(
    s3_service: Service,
) -> None:
    # '²'.isdigit() is True and int('²') raises: this reached a 500 unauthenticated.
    query = (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={ACCESS_KEY}%2F20261130%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20261130T080000Z&X-Amz-Expires=%C2%B2&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=" + "0" * 64
    )
    async with s3_service.client() as http:
        response = await http.get(f"/box/key?{query}")

    assert response.status_code == 400
    assert error_code(response) == "AuthorizationQueryParametersError"
    assert "X-Amz-Expires" in response.text


@pytest.mark.parametrize("number", ["%C2%B2", "%D9%A3", "1" * 30, "-1", "1_0", "%201%20x"])
async def test_a_part_number_that_is_not_ascii_digits_is_invalid_argument(
    s3: S3, number: str
) -> None:
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="k"))["UploadId"]

    response = await signed(s3.service, "PUT", f"/box/k?partNumber={number}&uploadId={upload_id}")

    assert response.status_code == 400, response.text
    assert error_code(response) == "InvalidArgument"


@pytest.mark.parametrize("name", ["max-keys", "max-uploads"])
@pytest.mark.parametrize("number", ["%C2%B2", "9" * 5000, "-1"])
async def test_a_list_limit_that_is_not_ascii_digits_is_invalid_argument(
    s3: S3, name: str, number: str
) -> None:
    extra = "uploads&" if name == "max-uploads" else ""
    response = await signed(s3.service, "GET", f"/box?{extra}{name}={number}")

    assert response.status_code == 400, response.text
    assert error_code(response) == "InvalidArgument"


async def test_a_copy_range_no_integer_can_hold_is_refused(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="src", Body=b"source bytes")
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="k"))["UploadId"]

    response = await signed(
        s3.service,
        "PUT",
        f"/box/k?partNumber=1&uploadId={upload_id}",
        {"x-amz-copy-source": "box/src", "x-amz-copy-source-range": "bytes=0-" + "9" * 5000},
    )

    assert response.status_code == 400, response.text
    assert error_code(response) == "InvalidArgument"


@pytest.mark.parametrize("header", ["bytes=" + "9" * 5000 + "-", "bytes=1" + "0" * 30 + "-"])
async def test_a_range_past_any_integer_is_invalid_range(s3: S3, header: str) -> None:
    await s3("put_object", Bucket="box", Key="r", Body=b"ranged")

    error = await s3.error("get_object", Bucket="box", Key="r", Range=header)

    assert code(error) == "InvalidRange"


# --- the copy source is an S3 bucket, checked like the destination ------------------


async def native_file(service: Service, name: str, data: bytes) -> None:
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    assert response.status_code == 201, response.text


async def test_copy_object_cannot_read_a_native_file(s3: S3) -> None:
    await native_file(s3.service, "secret.txt", b"native only")

    error = await s3.error(
        "copy_object", Bucket="box", Key="stolen", CopySource="_native/named/secret.txt"
    )

    assert code(error) == "InvalidBucketName"
    assert code(await s3.error("head_object", Bucket="box", Key="stolen")) == "404"


async def test_upload_part_copy_cannot_read_a_native_file(s3: S3) -> None:
    await native_file(s3.service, "secret.txt", b"native only")
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="k"))["UploadId"]

    error = await s3.error(
        "upload_part_copy",
        Bucket="box",
        Key="k",
        UploadId=upload_id,
        PartNumber=1,
        CopySource="_native/named/secret.txt",
    )

    assert code(error) == "InvalidBucketName"
    assert (await s3("list_parts", Bucket="box", Key="k", UploadId=upload_id)).get("Parts") in (
        None,
        [],
    )


async def test_a_copy_source_in_a_missing_bucket_is_no_such_bucket(s3: S3) -> None:
    error = await s3.error("copy_object", Bucket="box", Key="x", CopySource="nobucket/k")

    assert code(error) == "NoSuchBucket"


async def test_copies_between_s3_buckets_still_work(s3: S3) -> None:
    await s3("create_bucket", Bucket="other")
    await s3("put_object", Bucket="other", Key="src", Body=b"across buckets")

    await s3("copy_object", Bucket="box", Key="dst", CopySource="other/src")

    assert await read(s3, "box", "dst") == b"across buckets"


# --- validated before the body ------------------------------------------------------


async def refused_before_telegram(s3: S3, expected: str, **params: Any) -> None:
    body = payload(3 * CHUNK)
    error = await s3.error("put_object", Bucket="box", Key="big", Body=body, **params)
    assert code(error) == expected
    assert s3.service.sim.message_count(CHAT_ID) == 0


async def test_a_content_type_the_database_cannot_hold_is_refused_before_telegram(
    s3: S3,
) -> None:
    await refused_before_telegram(
        s3, "InvalidArgument", ContentType="application/" + "x" * MAX_CONTENT_TYPE_LENGTH
    )


async def test_metadata_over_the_limit_is_refused_before_telegram(s3: S3) -> None:
    metadata = {f"m{i}": "v" * 100 for i in range(MAX_USER_METADATA_BYTES // 100)}
    await refused_before_telegram(s3, "MetadataTooLarge", Metadata=metadata)


async def test_metadata_within_the_limit_is_kept(s3: S3) -> None:
    metadata = {"a": "v" * (MAX_USER_METADATA_BYTES - 10)}

    await s3("put_object", Bucket="box", Key="meta", Body=b"x", Metadata=metadata)

    head = await s3("head_object", Bucket="box", Key="meta")
    assert head["Metadata"] == metadata


async def test_create_multipart_upload_checks_the_content_type(s3: S3) -> None:
    error = await s3.error(
        "create_multipart_upload",
        Bucket="box",
        Key="k",
        ContentType="a/" + "b" * MAX_CONTENT_TYPE_LENGTH,
    )

    assert code(error) == "InvalidArgument"


@pytest.mark.parametrize("value", ["%C3%B9%F4%86%85%B6", "a%0D%0Ab"])
async def test_a_response_override_http_cannot_carry_is_invalid_argument(
    s3: S3, value: str
) -> None:
    """Found by the fuzz run: a response-content-type outside Latin-1 (or with
    a line break) made a 500 while the headers were encoded."""
    await s3("put_object", Bucket="box", Key="k", Body=b"body")
    for method in ("GET", "HEAD"):
        response = await signed(s3.service, method, f"/box/k?response-content-type={value}")
        assert response.status_code == 400, (method, response.status_code)
        if method == "GET":
            assert error_code(response) == "InvalidArgument"
    assert await read(s3, "box", "k", ResponseContentType="text/plain; charset=utf-8") == b"body"
