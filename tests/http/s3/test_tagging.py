"""Object tagging through real boto3 against a running service (SQLite and
Postgres through pgbouncer): the three operations, `x-amz-tagging` on the
writes, the copy directive, multipart uploads and AWS's limits."""

from __future__ import annotations

from typing import Any

import pytest

from tests.http.s3.test_api_boto3 import S3, code, read
from tests.running_service import CHUNK, Service
from tests.running_service import payload as data


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    return client


def tag_set(pairs: dict[str, str]) -> dict[str, Any]:
    return {"TagSet": [{"Key": k, "Value": v} for k, v in pairs.items()]}


async def tags_of(s3: S3, key: str) -> dict[str, str]:
    answer = await s3("get_object_tagging", Bucket="box", Key=key)
    return {tag["Key"]: tag["Value"] for tag in answer["TagSet"]}


async def tagging_count(s3: S3, key: str) -> str | None:
    head = await s3("head_object", Bucket="box", Key=key)
    count: str | None = head["ResponseMetadata"]["HTTPHeaders"].get("x-amz-tagging-count")
    return count


async def test_put_get_delete_object_tagging(s3: S3) -> None:
    put = await s3("put_object", Bucket="box", Key="k", Body=b"content")
    assert await tags_of(s3, "k") == {}
    assert await tagging_count(s3, "k") is None

    await s3("put_object_tagging", Bucket="box", Key="k", Tagging=tag_set({"b": "2", "a": "1"}))
    answer = await s3("get_object_tagging", Bucket="box", Key="k")
    # In key order, whatever order they were given in.
    assert answer["TagSet"] == [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]
    assert await tagging_count(s3, "k") == "2"
    got = await s3("get_object", Bucket="box", Key="k")
    assert got["TagCount"] == 2
    # Tagging changes neither the content nor the ETag.
    assert got["ETag"] == put["ETag"]
    assert await read(s3, "box", "k") == b"content"

    await s3("put_object_tagging", Bucket="box", Key="k", Tagging=tag_set({"c": ""}))
    assert await tags_of(s3, "k") == {"c": ""}

    deleted = await s3("delete_object_tagging", Bucket="box", Key="k")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert await tags_of(s3, "k") == {}
    assert await tagging_count(s3, "k") is None


async def test_tags_on_put_belong_to_that_version(s3: S3) -> None:
    await s3(
        "put_object", Bucket="box", Key="k", Body=b"v1", Tagging="project=x&empty&sp%20ace=a+b"
    )
    assert await tags_of(s3, "k") == {"project": "x", "empty": "", "sp ace": "a b"}
    # A new version without tags has none: tags are not carried over.
    await s3("put_object", Bucket="box", Key="k", Body=b"v2")
    assert await tags_of(s3, "k") == {}
    await s3("put_object", Bucket="box", Key="k", Body=data(3 * CHUNK), Tagging="big=yes")
    assert await tags_of(s3, "k") == {"big": "yes"}


async def test_tagging_a_missing_object_is_no_such_key(s3: S3) -> None:
    for operation, params in (
        ("get_object_tagging", {}),
        ("put_object_tagging", {"Tagging": tag_set({"a": "1"})}),
        ("delete_object_tagging", {}),
    ):
        error = await s3.error(operation, Bucket="box", Key="none", **params)
        assert code(error) == "NoSuchKey", operation
    error = await s3.error("get_object_tagging", Bucket="nobox", Key="k")
    assert code(error) == "NoSuchBucket"


async def test_copy_keeps_or_replaces_tags(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="src", Body=b"s", Tagging="a=1&b=2")
    source = {"Bucket": "box", "Key": "src"}

    await s3("copy_object", Bucket="box", Key="kept", CopySource=source)
    assert await tags_of(s3, "kept") == {"a": "1", "b": "2"}

    await s3(
        "copy_object",
        Bucket="box",
        Key="replaced",
        CopySource=source,
        TaggingDirective="REPLACE",
        Tagging="c=3",
    )
    assert await tags_of(s3, "replaced") == {"c": "3"}

    await s3(
        "copy_object", Bucket="box", Key="cleared", CopySource=source, TaggingDirective="REPLACE"
    )
    assert await tags_of(s3, "cleared") == {}

    # The source keeps its own.
    assert await tags_of(s3, "src") == {"a": "1", "b": "2"}


async def test_multipart_upload_tags_arrive_at_complete(s3: S3) -> None:
    upload = await s3("create_multipart_upload", Bucket="box", Key="mp", Tagging="Hello=World&x=")
    upload_id = upload["UploadId"]
    etags = []
    for number, body in enumerate((data(CHUNK, seed=1), b"tail"), start=1):
        part = await s3(
            "upload_part", Bucket="box", Key="mp", UploadId=upload_id, PartNumber=number, Body=body
        )
        etags.append({"PartNumber": number, "ETag": part["ETag"]})
    # Not on the key before Complete.
    assert code(await s3.error("get_object_tagging", Bucket="box", Key="mp")) == "NoSuchKey"
    await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="mp",
        UploadId=upload_id,
        MultipartUpload={"Parts": etags},
    )
    assert await tags_of(s3, "mp") == {"Hello": "World", "x": ""}
    assert await tagging_count(s3, "mp") == "2"


async def test_aws_limits_are_accepted_at_the_edge(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="k", Body=b"x")
    # Ten tags, keys of 128 and values of 256 Unicode characters.
    edge = {f"{n}{'é' * 127}": "€" * 256 for n in range(10)}
    await s3("put_object_tagging", Bucket="box", Key="k", Tagging=tag_set(edge))
    assert await tags_of(s3, "k") == edge


@pytest.mark.parametrize(
    "tags",
    [
        [{"Key": str(n), "Value": str(n)} for n in range(11)],
        [{"Key": "k" * 129, "Value": "v"}],
        [{"Key": "k", "Value": "v" * 257}],
        [{"Key": "same", "Value": "1"}, {"Key": "same", "Value": "2"}],
    ],
    ids=["eleven-tags", "long-key", "long-value", "duplicate-key"],
)
async def test_tag_sets_beyond_the_limits_are_invalid_tag(
    s3: S3, tags: list[dict[str, str]]
) -> None:
    await s3("put_object", Bucket="box", Key="k", Body=b"x", Tagging="kept=yes")
    error = await s3.error("put_object_tagging", Bucket="box", Key="k", Tagging={"TagSet": tags})
    assert code(error) == "InvalidTag"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert await tags_of(s3, "k") == {"kept": "yes"}


@pytest.mark.parametrize(
    "header",
    ["&".join(f"k{n}=v" for n in range(11)), "a=1&a=2", f"{'k' * 129}=v", "=v"],
    ids=["eleven-tags", "duplicate-key", "long-key", "empty-key"],
)
async def test_a_bad_tagging_header_refuses_the_write(s3: S3, header: str) -> None:
    error = await s3.error("put_object", Bucket="box", Key="new", Body=b"x", Tagging=header)
    assert code(error) == "InvalidTag"
    assert code(await s3.error("head_object", Bucket="box", Key="new")) == "404"
    error = await s3.error("create_multipart_upload", Bucket="box", Key="new", Tagging=header)
    assert code(error) == "InvalidTag"
    assert (await s3("list_multipart_uploads", Bucket="box")).get("Uploads", []) == []
