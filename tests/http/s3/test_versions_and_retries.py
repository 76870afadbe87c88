"""What cleanup scripts, the ceph/s3-tests teardown and retrying SDKs expect of
an unversioned store: ListObjectVersions with the version "null", deletes by
that version, versioning refused honestly, DeleteBucket over unfinished
multipart uploads, and a repeated CompleteMultipartUpload (SQLite and Postgres
through pgbouncer, real boto3)."""

from __future__ import annotations

import asyncio

import pytest

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code, read
from tests.running_service import CHUNK, ServiceFactory, eventually
from tests.running_service import payload as data

# Two parts of an object within the test service's MAX_UPLOAD_SIZE.
PART = 1024 * 1024


@pytest.fixture
async def s3(start_service: ServiceFactory) -> S3:
    client = S3(await start_service(s3_credentials={ACCESS_KEY: SECRET}))
    await client("create_bucket", Bucket="box")
    return client


async def test_every_object_is_listed_as_its_one_version_null(s3: S3) -> None:
    keys = ["a", "b/1", "b/2", "c", "d"]
    for key in keys:
        await s3("put_object", Bucket="box", Key=key, Body=key.encode())

    first = await s3("list_object_versions", Bucket="box", MaxKeys=2)
    assert [v["Key"] for v in first["Versions"]] == ["a", "b/1"]
    assert {v["VersionId"] for v in first["Versions"]} == {"null"}
    assert all(v["IsLatest"] for v in first["Versions"])
    assert first["IsTruncated"] is True
    assert (first["NextKeyMarker"], first["NextVersionIdMarker"]) == ("b/1", "null")

    paginator = s3.client.get_paginator("list_object_versions")
    pages = await asyncio.to_thread(lambda: list(paginator.paginate(Bucket="box", MaxKeys=2)))
    assert [v["Key"] for page in pages for v in page.get("Versions", [])] == keys

    folders = await s3("list_object_versions", Bucket="box", Delimiter="/")
    assert [p["Prefix"] for p in folders["CommonPrefixes"]] == ["b/"]
    assert [v["Key"] for v in folders["Versions"]] == ["a", "c", "d"]


async def test_the_s3_tests_teardown_empties_and_deletes_a_bucket(s3: S3) -> None:
    """ceph/s3-tests cleans every bucket this way before deleting it."""
    for n in range(3):
        await s3("put_object", Bucket="box", Key=f"k{n}", Body=b"x" * n)
    listed = await s3("list_object_versions", Bucket="box")
    first, *rest = listed["Versions"]
    await s3("delete_object", Bucket="box", Key=first["Key"], VersionId=first["VersionId"])
    result = await s3(
        "delete_objects",
        Bucket="box",
        Delete={"Objects": [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in rest]},
    )
    assert sorted(d["Key"] for d in result["Deleted"]) == ["k1", "k2"]
    assert "Versions" not in await s3("list_object_versions", Bucket="box")
    await s3("delete_bucket", Bucket="box")
    assert code(await s3.error("head_bucket", Bucket="box")) == "404"


async def test_a_version_other_than_null_does_not_exist(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="k", Body=b"body")
    assert await read(s3, "box", "k", VersionId="null") == b"body"
    error = await s3.error("get_object", Bucket="box", Key="k", VersionId="3HL4kqtJlcpXroDTDmJ")
    assert code(error) == "InvalidArgument"
    assert await read(s3, "box", "k") == b"body"


async def test_enabling_versioning_is_refused_and_suspending_is_a_no_op(s3: S3) -> None:
    error = await s3.error(
        "put_bucket_versioning", Bucket="box", VersioningConfiguration={"Status": "Enabled"}
    )
    assert code(error) == "NotImplemented"
    assert "Status" not in await s3("get_bucket_versioning", Bucket="box")
    await s3("put_bucket_versioning", Bucket="box", VersioningConfiguration={"Status": "Suspended"})
    assert "Status" not in await s3("get_bucket_versioning", Bucket="box")


async def test_delete_bucket_aborts_unfinished_uploads_and_frees_their_parts(s3: S3) -> None:
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="big"))["UploadId"]
    await s3(
        "upload_part",
        Bucket="box",
        Key="big",
        UploadId=upload_id,
        PartNumber=1,
        Body=data(CHUNK + 1, seed=3),
    )

    async def part_is_in_telegram() -> bool:
        return bool(s3.service.live_messages())

    await eventually(part_is_in_telegram)

    await s3("delete_bucket", Bucket="box")

    assert code(await s3.error("head_bucket", Bucket="box")) == "404"

    async def parts_deleted() -> bool:
        return not s3.service.live_messages()

    await eventually(parts_deleted)
    await s3("create_bucket", Bucket="box")
    assert "Uploads" not in await s3("list_multipart_uploads", Bucket="box")


async def test_delete_bucket_still_refuses_a_bucket_with_objects(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="k", Body=b"kept")
    assert code(await s3.error("delete_bucket", Bucket="box")) == "BucketNotEmpty"
    assert await read(s3, "box", "k") == b"kept"


async def _upload_two_parts(s3: S3, key: str) -> tuple[str, list[dict[str, object]]]:
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key=key))["UploadId"]
    parts = []
    for number in (1, 2):
        result = await s3(
            "upload_part",
            Bucket="box",
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=data(PART, seed=number),
        )
        parts.append({"PartNumber": number, "ETag": result["ETag"]})
    return upload_id, parts


async def test_a_repeated_complete_gets_the_same_answer(s3: S3) -> None:
    """An SDK that lost the first answer sends the same Complete again."""
    upload_id, parts = await _upload_two_parts(s3, "k")
    complete = {"Bucket": "box", "Key": "k", "UploadId": upload_id}
    first = await s3("complete_multipart_upload", MultipartUpload={"Parts": parts}, **complete)
    again = await s3("complete_multipart_upload", MultipartUpload={"Parts": parts}, **complete)
    assert (again["ETag"], again["Key"], again["Location"]) == (
        first["ETag"],
        first["Key"],
        first["Location"],
    )
    expected = data(PART, seed=1) + data(PART, seed=2)
    assert await read(s3, "box", "k") == expected

    # Another part list is not a repeat of that Complete.
    error = await s3.error(
        "complete_multipart_upload", MultipartUpload={"Parts": parts[:1]}, **complete
    )
    assert code(error) == "NoSuchUpload"


async def test_a_repeated_complete_after_the_key_was_replaced_is_no_such_upload(s3: S3) -> None:
    upload_id, parts = await _upload_two_parts(s3, "k")
    complete = {"Bucket": "box", "Key": "k", "UploadId": upload_id}
    await s3("complete_multipart_upload", MultipartUpload={"Parts": parts}, **complete)
    await s3("put_object", Bucket="box", Key="k", Body=b"newer")
    error = await s3.error(
        "complete_multipart_upload", MultipartUpload={"Parts": parts}, **complete
    )
    assert code(error) == "NoSuchUpload"
    assert await read(s3, "box", "k") == b"newer"
