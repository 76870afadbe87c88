"""Server-side encryption requests (app/http/s3/sse.py) on a service without
master keys: what cannot be honoured is refused, never silently ignored.
With keys, tests/store/test_encryption.py."""

from __future__ import annotations

import os

import pytest

from tests.http.s3.test_api_boto3 import S3, code
from tests.running_service import Service

CUSTOMER_KEY = os.urandom(32)


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    return client


async def test_encryption_a_service_cannot_give_is_refused_and_nothing_stored(s3: S3) -> None:
    """AES256 without keys would store plaintext the client believes sealed;
    SSE-KMS is not implemented; a customer key (SSE-C, which works without
    master keys: test_sse_c.py) cannot be combined with AES256."""
    refusals = [
        ({"ServerSideEncryption": "AES256"}, "InvalidArgument", 400),
        ({"ServerSideEncryption": "aws:kms"}, "NotImplemented", 501),
        (
            {
                "ServerSideEncryption": "AES256",
                "SSECustomerAlgorithm": "AES256",
                "SSECustomerKey": CUSTOMER_KEY,
            },
            "InvalidArgument",
            400,
        ),
    ]
    for params, expected, status in refusals:
        error = await s3.error("put_object", Bucket="box", Key="k", Body=b"x" * 100, **params)
        assert (code(error), error.response["ResponseMetadata"]["HTTPStatusCode"]) == (
            expected,
            status,
        ), params
        error = await s3.error("create_multipart_upload", Bucket="box", Key="m", **params)
        assert code(error) == expected, params
    listing = await s3("list_objects_v2", Bucket="box")
    assert listing["KeyCount"] == 0
    assert (await s3("list_multipart_uploads", Bucket="box")).get("Uploads", []) == []

    # Plain writes and reads say nothing of encryption.
    put = await s3("put_object", Bucket="box", Key="plain", Body=b"y" * 100)
    head = await s3("head_object", Bucket="box", Key="plain")
    assert "ServerSideEncryption" not in put and "ServerSideEncryption" not in head
