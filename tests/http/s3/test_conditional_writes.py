"""Conditional writes (If-Match, If-None-Match) on PutObject and
CompleteMultipartUpload, through real boto3 against a running service
(SQLite and Postgres through pgbouncer)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.http.s3.test_api_boto3 import S3, code, read
from tests.running_service import CHUNK, Service
from tests.running_service import payload as data

# Postgres too: conditions checked under the key's lock (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    return client


def status(error: ClientError) -> tuple[int, str]:
    return error.response["ResponseMetadata"]["HTTPStatusCode"], code(error)


async def test_put_object_conditions(s3: S3) -> None:
    put = await s3("put_object", Bucket="box", Key="k", Body=b"one", IfNoneMatch="*")
    etag = put["ETag"]

    refused = await s3.error("put_object", Bucket="box", Key="k", Body=b"two", IfNoneMatch="*")
    assert status(refused) == (412, "PreconditionFailed")
    refused = await s3.error("put_object", Bucket="box", Key="k", Body=b"two", IfMatch='"bad"')
    assert status(refused) == (412, "PreconditionFailed")
    assert await read(s3, "box", "k") == b"one"

    put = await s3("put_object", Bucket="box", Key="k", Body=b"two", IfMatch=etag)
    assert await read(s3, "box", "k") == b"two"
    await s3("put_object", Bucket="box", Key="k", Body=b"three", IfMatch="*")
    assert await read(s3, "box", "k") == b"three"

    await s3("delete_object", Bucket="box", Key="k")
    missing = await s3.error("put_object", Bucket="box", Key="k", Body=b"x", IfMatch="*")
    assert status(missing) == (404, "NoSuchKey")
    assert code(await s3.error("head_object", Bucket="box", Key="k")) == "404"


async def test_a_refused_put_sends_nothing_to_telegram(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="k", Body=b"small")
    before = list(s3.service.live_messages())
    body = data(4 * CHUNK)
    refused = await s3.error("put_object", Bucket="box", Key="k", Body=body, IfNoneMatch="*")
    assert status(refused) == (412, "PreconditionFailed")
    assert list(s3.service.live_messages()) == before
    assert await read(s3, "box", "k") == b"small"


async def multipart(s3: S3, key: str, body: bytes, **conditions: Any) -> Any:
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key=key))["UploadId"]
    part = await s3(
        "upload_part", Bucket="box", Key=key, UploadId=upload_id, PartNumber=1, Body=body
    )
    return await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        **conditions,
    )


async def test_complete_multipart_upload_conditions(s3: S3) -> None:
    etag = (await multipart(s3, "mp", b"one", IfNoneMatch="*"))["ETag"]
    with pytest.raises(ClientError) as refused:
        await multipart(s3, "mp", b"two", IfNoneMatch="*")
    assert status(refused.value) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as refused:
        await multipart(s3, "mp", b"two", IfMatch='"bad"')
    assert status(refused.value) == (412, "PreconditionFailed")
    assert await read(s3, "box", "mp") == b"one"

    await multipart(s3, "mp", b"two", IfMatch=etag)
    assert await read(s3, "box", "mp") == b"two"

    await s3("delete_object", Bucket="box", Key="mp")
    with pytest.raises(ClientError) as missing:
        await multipart(s3, "mp", b"x", IfMatch="*")
    assert status(missing.value) == (404, "NoSuchKey")


async def test_a_refused_complete_keeps_the_upload_for_another_try(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="mp", Body=b"there")
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="mp"))["UploadId"]
    part = await s3(
        "upload_part", Bucket="box", Key="mp", UploadId=upload_id, PartNumber=1, Body=b"new"
    )
    parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
    refused = await s3.error(
        "complete_multipart_upload",
        Bucket="box",
        Key="mp",
        UploadId=upload_id,
        MultipartUpload=parts,
        IfNoneMatch="*",
    )
    assert status(refused) == (412, "PreconditionFailed")
    await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="mp",
        UploadId=upload_id,
        MultipartUpload=parts,
    )
    assert await read(s3, "box", "mp") == b"new"


async def test_a_repeated_complete_honours_the_conditions_as_a_first_one_would(s3: S3) -> None:
    """A Complete sent again after the upload completed (an SDK that lost the
    answer) gets the same result, but only if its conditions hold against
    the object now there: the one it made."""
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="mp"))["UploadId"]
    part = await s3(
        "upload_part", Bucket="box", Key="mp", UploadId=upload_id, PartNumber=1, Body=b"one"
    )
    complete = {
        "Bucket": "box",
        "Key": "mp",
        "UploadId": upload_id,
        "MultipartUpload": {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    }
    etag = (await s3("complete_multipart_upload", **complete, IfNoneMatch="*"))["ETag"]

    again = await s3.error("complete_multipart_upload", **complete, IfNoneMatch="*")
    assert status(again) == (412, "PreconditionFailed")
    again = await s3.error("complete_multipart_upload", **complete, IfMatch='"bad"')
    assert status(again) == (412, "PreconditionFailed")
    again = await s3.error("complete_multipart_upload", **complete, IfNoneMatch=etag)
    assert status(again) == (412, "PreconditionFailed")
    assert (await s3("complete_multipart_upload", **complete, IfMatch=etag))["ETag"] == etag
    assert (await s3("complete_multipart_upload", **complete))["ETag"] == etag
    assert await read(s3, "box", "mp") == b"one"

    await s3("put_object", Bucket="box", Key="mp", Body=b"other")
    replaced = await s3.error("complete_multipart_upload", **complete, IfMatch=etag)
    assert status(replaced) == (404, "NoSuchUpload")


async def test_racing_creates_have_one_winner_and_the_rest_conflict(s3: S3) -> None:
    """Many If-None-Match: * PUTs of one new key at once: each passes the
    check before its body, exactly one commits, every other one is refused
    (409 ConditionalRequestConflict when it lost the race at commit, 412 if
    the winner had committed before it looked)."""
    bodies = [data(2 * CHUNK, seed=n) for n in range(6)]

    async def create(body: bytes) -> tuple[int, str] | bytes:
        try:
            await s3("put_object", Bucket="box", Key="race", Body=body, IfNoneMatch="*")
        except ClientError as exc:
            return status(exc)
        return body

    outcomes = await asyncio.gather(*(create(body) for body in bodies))
    winners = [outcome for outcome in outcomes if isinstance(outcome, bytes)]
    losers = [outcome for outcome in outcomes if not isinstance(outcome, bytes)]
    assert len(winners) == 1, outcomes
    assert set(losers) <= {(409, "ConditionalRequestConflict"), (412, "PreconditionFailed")}
    assert await read(s3, "box", "race") == winners[0]
