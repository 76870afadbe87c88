"""The S3 API through real boto3, against a running service with the Telegram
simulator behind it (SQLite and Postgres through pgbouncer)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.client import BaseClient
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.running_service import CHAT_ID, CHUNK, Service, ServiceFactory, eventually
from tests.running_service import payload as data

ACCESS_KEY = "AKIDTELEUPLOADER"
SECRET = "teleuploader-test-secret-0123456789"
T = TypeVar("T")


def client_for(service: Service, secret: str = SECRET) -> BaseClient:
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
        ),
    )


class S3:
    """A boto3 client whose calls run in a thread (the service shares our loop)."""

    def __init__(self, service: Service, secret: str = SECRET) -> None:
        self.client = client_for(service, secret)
        self.service = service

    async def __call__(self, operation: str, **params: Any) -> Any:
        method: Callable[..., Any] = getattr(self.client, operation)
        return await asyncio.to_thread(method, **params)

    async def error(self, operation: str, **params: Any) -> ClientError:
        with pytest.raises(ClientError) as caught:
            await self(operation, **params)
        return caught.value


def code(error: ClientError) -> str:
    return str(error.response["Error"]["Code"])


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    return client


async def read(s3: S3, bucket: str, key: str, **params: Any) -> bytes:
    response = await s3("get_object", Bucket=bucket, Key=key, **params)
    body: bytes = await asyncio.to_thread(response["Body"].read)
    return body


# --- buckets --------------------------------------------------------------------------


async def test_bucket_lifecycle(s3: S3) -> None:
    await s3("create_bucket", Bucket="second")
    await s3("create_bucket", Bucket="second")  # creating again is fine (us-east-1)
    names = [b["Name"] for b in (await s3("list_buckets"))["Buckets"]]
    assert names == ["box", "second"]
    await s3("head_bucket", Bucket="second")
    location = await s3("get_bucket_location", Bucket="second")
    assert location.get("LocationConstraint") is None
    versioning = await s3("get_bucket_versioning", Bucket="second")
    assert "Status" not in versioning

    await s3("put_object", Bucket="second", Key="k", Body=b"x")
    assert code(await s3.error("delete_bucket", Bucket="second")) == "BucketNotEmpty"
    await s3("delete_object", Bucket="second", Key="k")
    await s3("delete_bucket", Bucket="second")
    assert code(await s3.error("head_bucket", Bucket="second")) == "404"
    assert code(await s3.error("list_objects_v2", Bucket="second")) == "NoSuchBucket"


async def test_create_bucket_keeps_to_the_endpoints_region(
    start_service: ServiceFactory,
) -> None:
    """As AWS: a CreateBucketConfiguration naming another region than the
    endpoint's is refused (the body used to be read and thrown away); with no
    S3_REGION set, the region an SDK sends is this endpoint's."""
    regional = S3(await start_service(s3_credentials={ACCESS_KEY: SECRET}, s3_region="eu-west-1"))
    regional.client = boto3.client(
        "s3",
        endpoint_url=regional.service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="eu-west-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    elsewhere = {"LocationConstraint": "us-west-2"}
    error = await regional.error(
        "create_bucket", Bucket="wrong-region", CreateBucketConfiguration=elsewhere
    )
    assert code(error) == "IllegalLocationConstraintException"
    assert "us-west-2" in error.response["Error"]["Message"]
    assert code(await regional.error("head_bucket", Bucket="wrong-region")) == "404"
    here = {"LocationConstraint": "eu-west-1"}
    await regional("create_bucket", Bucket="right-region", CreateBucketConfiguration=here)
    await regional("head_bucket", Bucket="right-region")

    anywhere = S3(await start_service(s3_credentials={ACCESS_KEY: SECRET}))
    await anywhere("create_bucket", Bucket="any-region", CreateBucketConfiguration=elsewhere)
    await anywhere("head_bucket", Bucket="any-region")


@pytest.mark.parametrize("name", ["api", "health", "f", "metrics", "Bad_Name", "ab"])
async def test_bucket_names_that_collide_or_are_invalid_are_refused(s3: S3, name: str) -> None:
    error = await s3.error("create_bucket", Bucket=name)
    assert code(error) == "InvalidBucketName"


# --- objects ----------------------------------------------------------------------------


@pytest.mark.smoke  # ./scripts/test --quick runs it
@pytest.mark.parametrize("size", [0, 71, 64 * 1024 + 1, 3 * CHUNK + 17])
async def test_put_get_head_delete(s3: S3, size: int) -> None:
    body = data(size, seed=size)
    put = await s3(
        "put_object",
        Bucket="box",
        Key="dir/file.bin",
        Body=body,
        ContentType="application/x-test",
        Metadata={"owner": "ci", "purpose": "round trip"},
    )
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'

    head = await s3("head_object", Bucket="box", Key="dir/file.bin")
    assert head["ContentLength"] == size
    assert head["ContentType"] == "application/x-test"
    assert head["Metadata"] == {"owner": "ci", "purpose": "round trip"}
    assert head["ETag"] == put["ETag"]
    assert await read(s3, "box", "dir/file.bin") == body

    await s3("delete_object", Bucket="box", Key="dir/file.bin")
    assert code(await s3.error("get_object", Bucket="box", Key="dir/file.bin")) == "NoSuchKey"
    await s3("delete_object", Bucket="box", Key="dir/file.bin")  # deleting again is fine


async def test_tiny_objects_never_reach_telegram(s3: S3) -> None:
    for index in range(10):
        await s3(
            "put_object", Bucket="box", Key=f"_layers/link{index}", Body=b"sha256:" + b"a" * 64
        )
    assert s3.service.sim.message_count(CHAT_ID) == 0


async def test_ranged_reads(s3: S3) -> None:
    body = data(3 * CHUNK + 100, seed=5)
    await s3("put_object", Bucket="box", Key="ranged", Body=body)

    middle = await s3(
        "get_object", Bucket="box", Key="ranged", Range=f"bytes={CHUNK - 3}-{CHUNK + 2}"
    )
    tail = await read(s3, "box", "ranged", Range=f"bytes={CHUNK}-")
    suffix = await read(s3, "box", "ranged", Range="bytes=-10")

    assert middle["ContentRange"] == f"bytes {CHUNK - 3}-{CHUNK + 2}/{len(body)}"
    assert await asyncio.to_thread(middle["Body"].read) == body[CHUNK - 3 : CHUNK + 3]
    assert tail == body[CHUNK:]
    assert suffix == body[-10:]
    error = await s3.error("get_object", Bucket="box", Key="ranged", Range=f"bytes={len(body)}-")
    assert code(error) == "InvalidRange"


async def test_conditional_requests(s3: S3) -> None:
    put = await s3("put_object", Bucket="box", Key="c", Body=b"content")
    etag = put["ETag"]

    assert await read(s3, "box", "c", IfMatch=etag) == b"content"
    assert code(await s3.error("get_object", Bucket="box", Key="c", IfMatch='"nope"')) == (
        "PreconditionFailed"
    )
    assert code(await s3.error("get_object", Bucket="box", Key="c", IfNoneMatch=etag)) == "304"
    head = await s3("head_object", Bucket="box", Key="c")
    modified = head["LastModified"]
    assert code(await s3.error("get_object", Bucket="box", Key="c", IfModifiedSince=modified)) == (
        "304"
    )
    assert (
        code(
            await s3.error(
                "get_object",
                Bucket="box",
                Key="c",
                IfUnmodifiedSince=modified.replace(year=modified.year - 1),
            )
        )
        == "PreconditionFailed"
    )


async def test_overwrite_is_last_writer_wins_and_frees_old_chunks(s3: S3) -> None:
    await s3("put_object", Bucket="box", Key="o", Body=data(3 * CHUNK, seed=1))
    old = set(s3.service.live_messages())
    new = data(2 * CHUNK, seed=2)

    await s3("put_object", Bucket="box", Key="o", Body=new)

    assert await read(s3, "box", "o") == new

    async def old_gone() -> bool:
        return not old & set(s3.service.live_messages())

    await eventually(old_gone)


async def test_a_small_object_rewritten_again_and_again_reads_as_its_last_version(
    s3: S3,
) -> None:
    """A registry rewrites its small link files on every push: each version is
    whole, with its own metadata; a big version in between leaves no message."""
    for n in range(3):
        body = b"sha256:%064d" % n
        await s3(
            "put_object",
            Bucket="box",
            Key="tags/latest/link",
            Body=body,
            Metadata={"version": str(n)},
            ContentType=f"text/x-{n}",
            Tagging=f"n={n}",
        )
        head = await s3("head_object", Bucket="box", Key="tags/latest/link")
        assert head["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        assert (head["ContentLength"], head["ContentType"]) == (len(body), f"text/x-{n}")
        assert head["Metadata"] == {"version": str(n)}
        tags = await s3("get_object_tagging", Bucket="box", Key="tags/latest/link")
        assert tags["TagSet"] == [{"Key": "n", "Value": str(n)}]
        assert await read(s3, "box", "tags/latest/link") == body
    listed = await s3("list_objects_v2", Bucket="box")
    assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [("tags/latest/link", 71)]

    big = data(2 * CHUNK, seed=4)
    await s3("put_object", Bucket="box", Key="tags/latest/link", Body=big)
    assert await read(s3, "box", "tags/latest/link") == big
    big_messages = set(s3.service.live_messages())
    assert big_messages
    await s3("put_object", Bucket="box", Key="tags/latest/link", Body=b"small again")
    assert await read(s3, "box", "tags/latest/link") == b"small again"

    async def big_gone() -> bool:
        return not big_messages & set(s3.service.live_messages())

    await eventually(big_gone)


# --- copies (metadata only) -----------------------------------------------------------------


async def test_copies_of_a_small_object_over_new_small_and_big_keys(s3: S3) -> None:
    body = b"sha256:" + b"c" * 64
    await s3("put_object", Bucket="box", Key="src", Body=body, Metadata={"a": "1"})
    await s3("put_object", Bucket="box", Key="small", Body=b"old small")
    await s3("put_object", Bucket="box", Key="big", Body=data(2 * CHUNK, seed=5))
    big_messages = set(s3.service.live_messages())

    for key in ("new", "small", "big"):
        copied = await s3(
            "copy_object",
            Bucket="box",
            Key=key,
            CopySource="box/src",
            MetadataDirective="REPLACE",
            Metadata={"copy": key},
        )
        assert copied["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        assert await read(s3, "box", key) == body
        head = await s3("head_object", Bucket="box", Key=key)
        assert (head["Metadata"], head["ContentLength"]) == ({"copy": key}, len(body))
    assert (await s3("head_object", Bucket="box", Key="src"))["Metadata"] == {"a": "1"}

    async def big_gone() -> bool:
        return not big_messages & set(s3.service.live_messages())

    await eventually(big_gone)


async def test_copy_object_points_at_the_same_chunks(s3: S3) -> None:
    body = data(4 * CHUNK + 9, seed=3)
    await s3("put_object", Bucket="box", Key="src", Body=body, Metadata={"a": "1"})
    messages = s3.service.sim.message_count(CHAT_ID)

    copied = await s3(
        "copy_object", Bucket="box", Key="dst", CopySource={"Bucket": "box", "Key": "src"}
    )
    replaced = await s3(
        "copy_object",
        Bucket="box",
        Key="dst2",
        CopySource="box/src",
        MetadataDirective="REPLACE",
        Metadata={"b": "2"},
        ContentType="text/plain",
    )

    assert s3.service.sim.message_count(CHAT_ID) == messages
    assert copied["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert replaced["CopyObjectResult"]["ETag"] == copied["CopyObjectResult"]["ETag"]
    assert (await s3("head_object", Bucket="box", Key="dst"))["Metadata"] == {"a": "1"}
    head2 = await s3("head_object", Bucket="box", Key="dst2")
    assert head2["Metadata"] == {"b": "2"}
    assert head2["ContentType"] == "text/plain"
    await s3("delete_object", Bucket="box", Key="src")
    assert await read(s3, "box", "dst") == body
    assert (
        code(await s3.error("copy_object", Bucket="box", Key="dst", CopySource="box/dst"))
        == "InvalidRequest"
    )
    assert (
        code(await s3.error("copy_object", Bucket="box", Key="x", CopySource="box/missing"))
        == "NoSuchKey"
    )


# --- listings ----------------------------------------------------------------------------------


@pytest.fixture
async def tree(s3: S3) -> S3:
    keys = [
        "a.txt",
        "docs/one.md",
        "docs/two.md",
        "docs/deep/three.md",
        "images/cat.png",
        "images/dog.png",
        "z+space key.txt",
        "ünïcode/ключ.txt",
    ]
    for key in keys:
        await s3("put_object", Bucket="box", Key=key, Body=key.encode())
    return s3


async def test_list_v2_with_delimiter(tree: S3) -> None:
    page = await tree("list_objects_v2", Bucket="box", Delimiter="/")
    assert [o["Key"] for o in page["Contents"]] == ["a.txt", "z+space key.txt"]
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["docs/", "images/", "ünïcode/"]
    assert page["KeyCount"] == 5
    assert page["IsTruncated"] is False

    docs = await tree("list_objects_v2", Bucket="box", Prefix="docs/", Delimiter="/")
    assert [o["Key"] for o in docs["Contents"]] == ["docs/one.md", "docs/two.md"]
    assert [p["Prefix"] for p in docs["CommonPrefixes"]] == ["docs/deep/"]


async def test_list_v2_pages_through_everything(tree: S3) -> None:
    seen: list[str] = []
    params: dict[str, Any] = {"Bucket": "box", "MaxKeys": 3, "Delimiter": "/"}
    for _ in range(10):
        page = await tree("list_objects_v2", **params)
        seen += [o["Key"] for o in page.get("Contents", [])]
        seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        params["ContinuationToken"] = page["NextContinuationToken"]
    assert sorted(seen) == ["a.txt", "docs/", "images/", "z+space key.txt", "ünïcode/"]
    assert len(seen) == 5

    after = await tree("list_objects_v2", Bucket="box", StartAfter="docs/two.md")
    assert next(o["Key"] for o in after["Contents"]) == "images/cat.png"


async def test_a_page_of_zero_keys_is_empty_and_not_truncated(tree: S3) -> None:
    """What AWS answers for max-keys=0 (ceph/s3-tests checks it too)."""
    for operation in ("list_objects", "list_objects_v2"):
        page = await tree(operation, Bucket="box", MaxKeys=0)
        assert "Contents" not in page
        assert page["IsTruncated"] is False


async def test_list_v1_with_markers_and_paginator(tree: S3) -> None:
    first = await tree("list_objects", Bucket="box", MaxKeys=2)
    assert [o["Key"] for o in first["Contents"]] == ["a.txt", "docs/deep/three.md"]
    assert first["IsTruncated"] is True
    rest = await tree("list_objects", Bucket="box", Marker="docs/deep/three.md")
    assert next(o["Key"] for o in rest["Contents"]) == "docs/one.md"

    def all_keys() -> list[str]:
        paginator = tree.client.get_paginator("list_objects")
        return [
            o["Key"]
            for page in paginator.paginate(Bucket="box", PaginationConfig={"PageSize": 3})
            for o in page.get("Contents", [])
        ]

    keys = await asyncio.to_thread(all_keys)
    assert len(keys) == 8
    assert keys == sorted(keys, key=lambda k: k.encode())


# --- multipart --------------------------------------------------------------------------------


async def test_multipart_out_of_order_parts(s3: S3) -> None:
    parts = [data(5 * CHUNK // 2, seed=n) for n in range(1, 4)]
    upload = await s3("create_multipart_upload", Bucket="box", Key="big", ContentType="x/y")
    upload_id = upload["UploadId"]
    etags = {}
    for number in (3, 1, 2):
        result = await s3(
            "upload_part",
            Bucket="box",
            Key="big",
            UploadId=upload_id,
            PartNumber=number,
            Body=parts[number - 1],
        )
        etags[number] = result["ETag"]
    # Re-uploading a part number replaces it.
    parts[1] = data(2 * CHUNK, seed=99)
    etags[2] = (
        await s3(
            "upload_part", Bucket="box", Key="big", UploadId=upload_id, PartNumber=2, Body=parts[1]
        )
    )["ETag"]

    listed = await s3("list_parts", Bucket="box", Key="big", UploadId=upload_id, MaxParts=2)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2]
    assert listed["IsTruncated"] is True
    more = await s3(
        "list_parts",
        Bucket="box",
        Key="big",
        UploadId=upload_id,
        PartNumberMarker=listed["NextPartNumberMarker"],
    )
    assert [p["PartNumber"] for p in more["Parts"]] == [3]
    uploads = await s3("list_multipart_uploads", Bucket="box", Prefix="bi")
    assert [u["UploadId"] for u in uploads["Uploads"]] == [upload_id]

    done = await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="big",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etags[n]} for n in (1, 2, 3)]},
    )

    md5s = b"".join(hashlib.md5(part).digest() for part in parts)
    assert done["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"'
    assert await read(s3, "box", "big") == b"".join(parts)
    head = await s3("head_object", Bucket="box", Key="big")
    assert head["ContentType"] == "x/y"
    assert code(await s3.error("list_parts", Bucket="box", Key="big", UploadId=upload_id)) == (
        "NoSuchUpload"
    )


async def test_multipart_errors(s3: S3) -> None:
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="e"))["UploadId"]
    etag1 = (
        await s3(
            "upload_part", Bucket="box", Key="e", UploadId=upload_id, PartNumber=1, Body=b"one"
        )
    )["ETag"]
    etag2 = (
        await s3(
            "upload_part", Bucket="box", Key="e", UploadId=upload_id, PartNumber=2, Body=b"two"
        )
    )["ETag"]

    wrong_order = await s3.error(
        "complete_multipart_upload",
        Bucket="box",
        Key="e",
        UploadId=upload_id,
        MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": etag2}, {"PartNumber": 1, "ETag": etag1}]
        },
    )
    wrong_etag = await s3.error(
        "complete_multipart_upload",
        Bucket="box",
        Key="e",
        UploadId=upload_id,
        MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]
        },
    )
    missing = await s3.error(
        "upload_part", Bucket="box", Key="e", UploadId="no-such-upload", PartNumber=1, Body=b"x"
    )
    assert code(wrong_order) == "InvalidPartOrder"
    assert code(wrong_etag) == "InvalidPart"
    assert code(missing) == "NoSuchUpload"

    await s3("abort_multipart_upload", Bucket="box", Key="e", UploadId=upload_id)
    assert code(await s3.error("list_parts", Bucket="box", Key="e", UploadId=upload_id)) == (
        "NoSuchUpload"
    )

    async def parts_deleted() -> bool:
        return s3.service.live_messages() == []

    await eventually(parts_deleted)
    assert code(await s3.error("get_object", Bucket="box", Key="e")) == "NoSuchKey"


async def test_single_zero_byte_part(s3: S3) -> None:
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="empty"))["UploadId"]
    etag = (
        await s3(
            "upload_part", Bucket="box", Key="empty", UploadId=upload_id, PartNumber=1, Body=b""
        )
    )["ETag"]
    await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="empty",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
    )
    assert await read(s3, "box", "empty") == b""


async def test_upload_part_copy_is_metadata_only(s3: S3) -> None:
    body = data(5 * CHUNK + 11, seed=8)
    await s3("put_object", Bucket="box", Key="blob", Body=body)
    messages = s3.service.sim.message_count(CHAT_ID)
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="moved"))["UploadId"]

    first = await s3(
        "upload_part_copy",
        Bucket="box",
        Key="moved",
        UploadId=upload_id,
        PartNumber=1,
        CopySource="box/blob",
        CopySourceRange=f"bytes=0-{2 * CHUNK + 4}",
    )
    second = await s3(
        "upload_part_copy",
        Bucket="box",
        Key="moved",
        UploadId=upload_id,
        PartNumber=2,
        CopySource="box/blob",
        CopySourceRange=f"bytes={2 * CHUNK + 5}-{len(body) - 1}",
    )
    await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="moved",
        UploadId=upload_id,
        MultipartUpload={
            "Parts": [
                {"PartNumber": 1, "ETag": first["CopyPartResult"]["ETag"]},
                {"PartNumber": 2, "ETag": second["CopyPartResult"]["ETag"]},
            ]
        },
    )
    await s3("delete_objects", Bucket="box", Delete={"Objects": [{"Key": "blob"}]})

    assert s3.service.sim.message_count(CHAT_ID) == messages
    assert await read(s3, "box", "moved") == body
    whole = (await s3("create_multipart_upload", Bucket="box", Key="whole"))["UploadId"]
    part = await s3(
        "upload_part_copy",
        Bucket="box",
        Key="whole",
        UploadId=whole,
        PartNumber=1,
        CopySource="box/moved",
    )
    await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="whole",
        UploadId=whole,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]},
    )
    assert await read(s3, "box", "whole") == body


async def test_delete_objects_quiet_and_verbose(s3: S3) -> None:
    for key in ("a", "b", "c"):
        await s3("put_object", Bucket="box", Key=key, Body=key.encode())
    verbose = await s3(
        "delete_objects", Bucket="box", Delete={"Objects": [{"Key": "a"}, {"Key": "missing"}]}
    )
    quiet = await s3(
        "delete_objects", Bucket="box", Delete={"Objects": [{"Key": "b"}], "Quiet": True}
    )
    assert sorted(d["Key"] for d in verbose["Deleted"]) == ["a", "missing"]
    assert "Deleted" not in quiet
    remaining = await s3("list_objects_v2", Bucket="box")
    assert [o["Key"] for o in remaining["Contents"]] == ["c"]


# --- presigned URLs, auth --------------------------------------------------------------------


async def test_presigned_get_and_put(s3: S3) -> None:
    put_url = s3.client.generate_presigned_url(
        "put_object", Params={"Bucket": "box", "Key": "pre.txt"}, ExpiresIn=300
    )
    async with httpx.AsyncClient() as http:
        put = await http.put(put_url, content=b"presigned body")
        assert put.status_code == 200
        get_url = s3.client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": "box",
                "Key": "pre.txt",
                "ResponseContentDisposition": 'attachment; filename="report.txt"',
            },
            ExpiresIn=300,
        )
        got = await http.get(get_url)
        tampered = await http.get(get_url.replace("pre.txt", "other.txt"))
    assert got.content == b"presigned body"
    assert got.headers["content-disposition"] == 'attachment; filename="report.txt"'
    assert tampered.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in tampered.content


async def test_wrong_secret_is_signature_does_not_match(s3: S3) -> None:
    wrong = S3(s3.service, secret="not-the-secret-0123456789")
    error = await wrong.error("list_buckets")
    assert code(error) == "SignatureDoesNotMatch"
    assert SECRET not in str(error.response)


async def test_s3_is_off_without_credentials(service: Service) -> None:
    client = S3(service)
    error = await client.error("list_buckets")
    assert code(error) == "AccessDenied"
    assert "S3_CREDENTIALS" in error.response["Error"]["Message"]


async def test_native_routes_still_work_beside_s3(s3: S3) -> None:
    async with s3.service.client() as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        unsigned = await http.get("/box/anything")
    # An S3 path, unsigned: S3's answer (issue 9), not the native JSON 404.
    assert unsigned.status_code == 403
    assert unsigned.headers["content-type"] == "application/xml"
    assert "<Code>AccessDenied</Code>" in unsigned.text


async def test_virtual_host_style_with_s3_domain(start_service: ServiceFactory) -> None:
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET}, s3_domain="s3.test")
    s3 = S3(service)
    await s3("create_bucket", Bucket="vhost")
    await s3("put_object", Bucket="vhost", Key="dir/a.txt", Body=b"virtual")
    port = service.url.rsplit(":", 1)[1]
    # Signed for https://vhost.s3.test:<port>/dir/a.txt, sent to this machine.
    request = AWSRequest(method="GET", url=f"http://vhost.s3.test:{port}/dir/a.txt")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1").add_auth(request)
    # botocore signs the Host of the URL but does not set the header itself.
    headers = {**dict(request.headers.items()), "Host": f"vhost.s3.test:{port}"}
    async with service.client() as http:
        got = await http.get("/dir/a.txt", headers=headers)
        missing = await http.get("/dir/none.txt", headers=headers)
    assert got.status_code == 200, got.text
    assert got.content == b"virtual"
    assert missing.status_code == 403  # signed for another path
