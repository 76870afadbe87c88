"""GetObject/HeadObject with partNumber, GetObjectAttributes and flexible
checksums (single PUT and multipart: COMPOSITE and FULL_OBJECT), through
boto3 in its default configuration (it sends a CRC32 with every upload),
against a running service (SQLite and Postgres through pgbouncer, the
simulator). Expected checksums are computed here from the bytes, with the
reference libraries, never by the service's own code."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import google_crc32c
import pytest
from awscrt import checksums as crt
from botocore.client import BaseClient

from tests.http.s3.test_api_boto3 import ACCESS_KEY, SECRET, code
from tests.http.s3.test_bad_input import error_code, signed
from tests.running_service import Service, ServiceFactory
from tests.running_service import payload as data

MiB = 1024 * 1024
#: S3's smallest part but the last.
PART = 5 * MiB
#: Parts of a three-part object: two full ones and a short last one.
SIZES = (PART, PART, 1000)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


DIGESTS: dict[str, Callable[[bytes], bytes]] = {
    "CRC32": lambda body: zlib.crc32(body).to_bytes(4, "big"),
    "CRC32C": lambda body: google_crc32c.value(body).to_bytes(4, "big"),
    "CRC64NVME": lambda body: crt.crc64nvme(body).to_bytes(8, "big"),
    "SHA1": lambda body: hashlib.sha1(body).digest(),
    "SHA256": lambda body: hashlib.sha256(body).digest(),
}


def checksum(algorithm: str, body: bytes) -> str:
    return _b64(DIGESTS[algorithm](body))


def composite(algorithm: str, parts: list[bytes]) -> str:
    joined = b"".join(DIGESTS[algorithm](part) for part in parts)
    return f"{_b64(DIGESTS[algorithm](joined))}-{len(parts)}"


class Client:
    """boto3 as a user gets it: no Config at all (botocore uses path style
    for an IP endpoint); calls run in a thread (the service shares our loop)."""

    def __init__(self, service: Service) -> None:
        self.client: BaseClient = boto3.client(
            "s3",
            endpoint_url=service.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )

    async def __call__(self, operation: str, **params: Any) -> Any:
        return await asyncio.to_thread(getattr(self.client, operation), **params)

    async def error(self, operation: str, **params: Any) -> Any:
        try:
            await self(operation, **params)
        except self.client.exceptions.ClientError as exc:
            return exc
        raise AssertionError(f"{operation} succeeded")

    async def read(self, **params: Any) -> tuple[dict[str, Any], bytes]:
        response = await self("get_object", **params)
        body: bytes = await asyncio.to_thread(response["Body"].read)
        return response, body


@pytest.fixture
async def service(start_service: ServiceFactory) -> Service:
    return await start_service(
        s3_credentials={ACCESS_KEY: SECRET}, chunk_size=MiB, max_upload_size=16 * MiB
    )


@pytest.fixture
async def s3(service: Service) -> Client:
    client = Client(service)
    await client("create_bucket", Bucket="box")
    return client


async def upload_in_parts(
    s3: Client, key: str, parts: list[bytes], **create: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Create, upload and complete; returns Complete's answer and UploadPart's."""
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key=key, **create))["UploadId"]
    algorithm = create.get("ChecksumAlgorithm")
    answers, listed = [], []
    for number, body in enumerate(parts, 1):
        extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        answer = await s3(
            "upload_part",
            Bucket="box",
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
            **extra,
        )
        answers.append(answer)
        entry = {"PartNumber": number, "ETag": answer["ETag"]}
        if algorithm:
            entry[f"Checksum{algorithm}"] = answer[f"Checksum{algorithm}"]
        listed.append(entry)
    completed = await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": listed},
    )
    return completed, answers


def three_parts(seed: int = 0) -> list[bytes]:
    return [data(size, seed=seed * 10 + n) for n, size in enumerate(SIZES)]


# --------------------------------------------------------------------------- partNumber


async def test_a_part_of_a_multipart_object_by_its_number(s3: Client) -> None:
    parts = three_parts()
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="m"))["UploadId"]
    error = await s3.error("get_object", Bucket="box", Key="m", PartNumber=1)
    assert code(error) == "NoSuchKey"  # not there before Complete
    await s3("abort_multipart_upload", Bucket="box", Key="m", UploadId=upload_id)
    completed, _ = await upload_in_parts(s3, "m", parts)

    offset = 0
    for number, body in enumerate(parts, 1):
        head = await s3("head_object", Bucket="box", Key="m", PartNumber=number)
        assert head["PartsCount"] == 3
        assert head["ContentLength"] == len(body)
        assert head["ETag"] == completed["ETag"]
        response, got = await s3.read(Bucket="box", Key="m", PartNumber=number)
        assert got == body
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert response["PartsCount"] == 3
        last = offset + len(body) - 1
        assert response["ContentRange"] == f"bytes {offset}-{last}/{sum(SIZES)}"
        offset += len(body)

    for operation in ("get_object", "head_object"):
        error = await s3.error(operation, Bucket="box", Key="m", PartNumber=4)
        assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    error = await s3.error("get_object", Bucket="box", Key="m", PartNumber=4)
    assert code(error) == "InvalidPartNumber"


async def test_part_one_of_a_simple_object_is_the_whole_object(s3: Client) -> None:
    put = await s3("put_object", Bucket="box", Key="s", Body=b"body")
    response, body = await s3.read(Bucket="box", Key="s", PartNumber=1)
    assert body == b"body"
    assert response["ETag"] == put["ETag"]
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    error = await s3.error("get_object", Bucket="box", Key="s", PartNumber=2)
    assert code(error) == "InvalidPartNumber"


async def test_a_part_number_that_is_no_number_is_a_400(service: Service, s3: Client) -> None:
    await s3("put_object", Bucket="box", Key="s", Body=b"body")
    for bad in ("0", "10001", "x", "%C2%B2"):
        response = await signed(service, "GET", f"/box/s?partNumber={bad}")
        assert (response.status_code, error_code(response)) == (400, "InvalidArgument")
    response = await signed(service, "GET", "/box/s?partNumber=1", {"Range": "bytes=0-1"})
    assert (response.status_code, error_code(response)) == (400, "InvalidRequest")


# --------------------------------------------------------------------------- GetObjectAttributes

ALL_ATTRIBUTES = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


async def test_attributes_of_a_simple_object(s3: Client) -> None:
    put = await s3("put_object", Bucket="box", Key="s", Body=b"foo")
    got = await s3("get_object_attributes", Bucket="box", Key="s", ObjectAttributes=ALL_ATTRIBUTES)
    assert got["ETag"] == put["ETag"].strip('"')
    assert got["ObjectSize"] == 3
    assert got["StorageClass"] == "STANDARD"
    assert "ObjectParts" not in got
    # boto3 sent a CRC32 of the body by default; it is the object's checksum.
    assert got["Checksum"]["ChecksumCRC32"] == checksum("CRC32", b"foo")
    assert got["Checksum"]["ChecksumType"] == "FULL_OBJECT"

    only_size = await s3(
        "get_object_attributes", Bucket="box", Key="s", ObjectAttributes=["ObjectSize"]
    )
    assert only_size["ObjectSize"] == 3
    assert "ETag" not in only_size and "Checksum" not in only_size


async def test_attributes_of_a_multipart_object_page_through_its_parts(s3: Client) -> None:
    parts = three_parts()
    completed, _ = await upload_in_parts(s3, "m", parts)
    got = await s3("get_object_attributes", Bucket="box", Key="m", ObjectAttributes=ALL_ATTRIBUTES)
    assert got["ETag"] == completed["ETag"].strip('"')
    assert got["ObjectSize"] == sum(SIZES)
    object_parts = got["ObjectParts"]
    assert object_parts["TotalPartsCount"] == 3
    assert object_parts["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"]) for p in object_parts["Parts"]] == [
        (1, PART),
        (2, PART),
        (3, 1000),
    ]

    page = await s3(
        "get_object_attributes",
        Bucket="box",
        Key="m",
        ObjectAttributes=["ObjectParts"],
        MaxParts=1,
        PartNumberMarker=1,
    )
    object_parts = page["ObjectParts"]
    assert [p["PartNumber"] for p in object_parts["Parts"]] == [2]
    assert object_parts["IsTruncated"] is True
    assert (object_parts["PartNumberMarker"], object_parts["NextPartNumberMarker"]) == (1, 2)
    assert object_parts["MaxParts"] == 1


async def test_attributes_need_a_known_attribute_and_an_object(
    service: Service, s3: Client
) -> None:
    await s3("put_object", Bucket="box", Key="s", Body=b"foo")
    response = await signed(service, "GET", "/box/s?attributes")
    assert (response.status_code, error_code(response)) == (400, "InvalidArgument")
    response = await signed(
        service, "GET", "/box/s?attributes", {"x-amz-object-attributes": "ETag,Colour"}
    )
    assert (response.status_code, error_code(response)) == (400, "InvalidArgument")
    error = await s3.error(
        "get_object_attributes", Bucket="box", Key="gone", ObjectAttributes=["ETag"]
    )
    assert code(error) == "NoSuchKey"


# --------------------------------------------------------------------------- checksums


async def test_boto3s_default_crc32_is_kept_and_given_back_when_asked(s3: Client) -> None:
    body = data(70_000, seed=5)
    put = await s3("put_object", Bucket="box", Key="k", Body=body)
    assert put["ChecksumCRC32"] == checksum("CRC32", body)

    head = await s3("head_object", Bucket="box", Key="k", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == checksum("CRC32", body)
    assert head["ChecksumType"] == "FULL_OBJECT"
    response, got = await s3.read(Bucket="box", Key="k", ChecksumMode="ENABLED")
    assert got == body
    assert response["ChecksumCRC32"] == checksum("CRC32", body)
    assert "ChecksumCRC32" not in await s3("head_object", Bucket="box", Key="k")
    # A range is not the object: no checksum of the whole is claimed for it.
    ranged, _ = await s3.read(Bucket="box", Key="k", Range="bytes=0-9", ChecksumMode="ENABLED")
    assert "ChecksumCRC32" not in ranged


@pytest.mark.parametrize("algorithm", ["SHA256", "CRC64NVME"])
async def test_a_put_with_another_algorithm_keeps_that_one(s3: Client, algorithm: str) -> None:
    body = data(3000, seed=6)
    put = await s3("put_object", Bucket="box", Key="k", Body=body, ChecksumAlgorithm=algorithm)
    assert put[f"Checksum{algorithm}"] == checksum(algorithm, body)
    head = await s3("head_object", Bucket="box", Key="k", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == checksum(algorithm, body)


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "SHA1", "SHA256"])
async def test_a_composite_multipart_checksum(s3: Client, algorithm: str) -> None:
    parts = three_parts(seed=1)
    completed, answers = await upload_in_parts(s3, "m", parts, ChecksumAlgorithm=algorithm)
    element = f"Checksum{algorithm}"
    assert [a[element] for a in answers] == [checksum(algorithm, p) for p in parts]
    expected = composite(algorithm, parts)
    assert completed[element] == expected
    assert completed["ChecksumType"] == "COMPOSITE"

    head = await s3("head_object", Bucket="box", Key="m", ChecksumMode="ENABLED")
    assert (head[element], head["ChecksumType"]) == (expected, "COMPOSITE")
    attributes = await s3(
        "get_object_attributes", Bucket="box", Key="m", ObjectAttributes=ALL_ATTRIBUTES
    )
    assert attributes["Checksum"][element] == expected
    assert [p[element] for p in attributes["ObjectParts"]["Parts"]] == [
        checksum(algorithm, p) for p in parts
    ]
    part, body = await s3.read(Bucket="box", Key="m", PartNumber=2, ChecksumMode="ENABLED")
    assert body == parts[1]
    assert part[element] == checksum(algorithm, parts[1])


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
async def test_a_full_object_multipart_checksum(s3: Client, algorithm: str) -> None:
    parts = three_parts(seed=2)
    create: dict[str, Any] = {"ChecksumAlgorithm": algorithm}
    if algorithm != "CRC64NVME":  # its only type, and its default
        create["ChecksumType"] = "FULL_OBJECT"
    completed, _ = await upload_in_parts(s3, "m", parts, **create)
    whole = checksum(algorithm, b"".join(parts))
    assert (completed[f"Checksum{algorithm}"], completed["ChecksumType"]) == (
        whole,
        "FULL_OBJECT",
    )
    head = await s3("head_object", Bucket="box", Key="m", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == whole


async def test_list_parts_shows_the_algorithm_and_each_parts_checksum(s3: Client) -> None:
    parts = three_parts(seed=3)[:2]
    created = await s3("create_multipart_upload", Bucket="box", Key="m", ChecksumAlgorithm="SHA256")
    assert created["ChecksumAlgorithm"] == "SHA256"
    upload_id = created["UploadId"]
    for number, body in enumerate(parts, 1):
        await s3(
            "upload_part",
            Bucket="box",
            Key="m",
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
            ChecksumAlgorithm="SHA256",
        )
    listed = await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
    assert listed["ChecksumAlgorithm"] == "SHA256"
    assert [p["ChecksumSHA256"] for p in listed["Parts"]] == [checksum("SHA256", p) for p in parts]


async def test_a_wrong_part_checksum_is_refused(s3: Client) -> None:
    upload_id = (
        await s3("create_multipart_upload", Bucket="box", Key="m", ChecksumAlgorithm="SHA256")
    )["UploadId"]
    error = await s3.error(
        "upload_part",
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        PartNumber=1,
        Body=b"part",
        ChecksumSHA256=checksum("SHA256", b"another"),
    )
    assert code(error) == "BadDigest"
    listed = await s3("list_parts", Bucket="box", Key="m", UploadId=upload_id)
    assert "Parts" not in listed


async def test_checksum_settings_that_cannot_be_are_refused(s3: Client) -> None:
    error = await s3.error(
        "create_multipart_upload",
        Bucket="box",
        Key="m",
        ChecksumAlgorithm="SHA256",
        ChecksumType="FULL_OBJECT",
    )
    assert code(error) == "InvalidRequest"


async def test_upload_file_with_boto3s_defaults_round_trips(s3: Client, tmp_path: Path) -> None:
    """s3transfer: a multipart upload with boto3's default checksums, end to end."""
    body = data(2 * PART + 1000, seed=4)
    source = tmp_path / "big.bin"
    source.write_bytes(body)
    await asyncio.to_thread(s3.client.upload_file, str(source), "box", "big.bin")
    target = tmp_path / "back.bin"
    await asyncio.to_thread(s3.client.download_file, "box", "big.bin", str(target))
    assert target.read_bytes() == body
    head = await s3("head_object", Bucket="box", Key="big.bin", ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(body)
    # s3transfer asks for CRC32 at creation and sends one with each 8 MiB part.
    part_size = 8 * MiB
    pieces = [body[i : i + part_size] for i in range(0, len(body), part_size)]
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (
        composite("CRC32", pieces),
        "COMPOSITE",
    )


# --------------------------------------------------------------------------- EncodingType=url

#: Keys XML 1.0 cannot carry literally, and a prefix made of such a character.
CONTROL_KEYS = ["\n/a", "\n/b", "tab\there", "x\x01y", "z\r"]


async def test_control_characters_in_every_listing_round_trip(s3: Client) -> None:
    """boto3 asks for encoding-type=url on ListObjects, V2 and versions, and
    decodes each field it expects encoded; every one must come back as the
    user wrote it."""
    for key in CONTROL_KEYS:
        await s3("put_object", Bucket="box", Key=key, Body=b"k")

    v1 = await s3("list_objects", Bucket="box", Prefix="\n", Delimiter="/", Marker="\n")
    assert v1["Prefix"] == "\n"
    assert (v1["Marker"], v1["Delimiter"]) == ("\n", "/")
    assert [p["Prefix"] for p in v1["CommonPrefixes"]] == ["\n/"]
    paged = await s3("list_objects", Bucket="box", MaxKeys=2, Delimiter="|")
    assert [o["Key"] for o in paged["Contents"]] == sorted(CONTROL_KEYS)[:2]
    assert paged["NextMarker"] == sorted(CONTROL_KEYS)[1]

    v2 = await s3("list_objects_v2", Bucket="box", Prefix="\n", StartAfter="\n/a")
    assert v2["Prefix"] == "\n" and v2["StartAfter"] == "\n/a"
    assert [o["Key"] for o in v2["Contents"]] == ["\n/b"]
    every = await s3("list_objects_v2", Bucket="box")
    assert [o["Key"] for o in every["Contents"]] == sorted(CONTROL_KEYS)

    versions = await s3(
        "list_object_versions", Bucket="box", Prefix="\n", KeyMarker="\n/a", Delimiter="\x01"
    )
    assert (versions["Prefix"], versions["KeyMarker"]) == ("\n", "\n/a")
    assert versions["Delimiter"] == "\x01"
    assert [v["Key"] for v in versions["Versions"]] == ["\n/b"]
    truncated = await s3("list_object_versions", Bucket="box", MaxKeys=1)
    assert truncated["NextKeyMarker"] == sorted(CONTROL_KEYS)[0]


async def test_multipart_listings_with_control_characters(s3: Client) -> None:
    """botocore does not decode ListMultipartUploads itself: asked for url
    encoding, the fields come encoded; without it, as XML character references."""
    for key in ("\n/one", "\n/two"):
        await s3("create_multipart_upload", Bucket="box", Key=key)
    encoded = await s3(
        "list_multipart_uploads", Bucket="box", Prefix="\n", EncodingType="url", MaxUploads=1
    )
    assert encoded["EncodingType"] == "url"
    assert encoded["Prefix"] == "%0A"
    assert [u["Key"] for u in encoded["Uploads"]] == ["%0A/one"]
    assert encoded["NextKeyMarker"] == "%0A/one"
    plain = await s3("list_multipart_uploads", Bucket="box", Prefix="\n")
    assert [u["Key"] for u in plain["Uploads"]] == ["\n/one", "\n/two"]
    upload_id = plain["Uploads"][0]["UploadId"]
    parts = await s3("list_parts", Bucket="box", Key="\n/one", UploadId=upload_id)
    assert parts["Key"] == "\n/one"


async def test_a_complete_listing_a_wrong_part_checksum_is_refused(s3: Client) -> None:
    parts = three_parts(seed=7)[1:]
    upload_id = (
        await s3("create_multipart_upload", Bucket="box", Key="m", ChecksumAlgorithm="CRC32")
    )["UploadId"]
    listed = []
    for number, body in enumerate(parts, 1):
        answer = await s3(
            "upload_part",
            Bucket="box",
            Key="m",
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
            ChecksumAlgorithm="CRC32",
        )
        listed.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumCRC32": "AAAAAA=="})
    error = await s3.error(
        "complete_multipart_upload",
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        MultipartUpload={"Parts": listed},
    )
    assert code(error) == "InvalidPart"
    assert code(await s3.error("head_object", Bucket="box", Key="m")) == "404"

    for entry, body in zip(listed, parts, strict=True):
        entry["ChecksumCRC32"] = checksum("CRC32", body)
    request = {"Bucket": "box", "Key": "m", "UploadId": upload_id}
    first = await s3("complete_multipart_upload", **request, MultipartUpload={"Parts": listed})
    # A retry of a Complete whose answer was lost gets the same answer.
    again = await s3("complete_multipart_upload", **request, MultipartUpload={"Parts": listed})
    assert first["ETag"] == again["ETag"]
    assert first["ChecksumCRC32"] == composite("CRC32", parts)


async def test_a_complete_naming_the_objects_checksum_is_checked_first(s3: Client) -> None:
    parts = three_parts(seed=8)[1:]
    for kind, algorithm, expected in (
        ("COMPOSITE", "SHA256", composite("SHA256", parts)),
        ("FULL_OBJECT", "CRC32C", checksum("CRC32C", b"".join(parts))),
    ):
        key = f"m-{kind}"
        upload_id = (
            await s3(
                "create_multipart_upload",
                Bucket="box",
                Key=key,
                ChecksumAlgorithm=algorithm,
                ChecksumType=kind,
            )
        )["UploadId"]
        listed = []
        for number, body in enumerate(parts, 1):
            answer = await s3(
                "upload_part",
                Bucket="box",
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ChecksumAlgorithm=algorithm,
            )
            listed.append({"PartNumber": number, "ETag": answer["ETag"]})
        request = {
            "Bucket": "box",
            "Key": key,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": listed},
        }
        wrong = checksum(algorithm, b"not the object")
        error = await s3.error(
            "complete_multipart_upload", **request, **{f"Checksum{algorithm}": wrong}
        )
        assert code(error) == "BadDigest"
        assert code(await s3.error("head_object", Bucket="box", Key=key)) == "404"
        done = await s3(
            "complete_multipart_upload", **request, **{f"Checksum{algorithm}": expected}
        )
        assert (done[f"Checksum{algorithm}"], done["ChecksumType"]) == (expected, kind)


async def test_a_complete_naming_a_checksum_its_upload_never_asked_for_is_refused(
    s3: Client,
) -> None:
    body = three_parts(seed=9)[2]
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="m"))["UploadId"]
    etag = (
        await s3("upload_part", Bucket="box", Key="m", UploadId=upload_id, PartNumber=1, Body=body)
    )["ETag"]
    error = await s3.error(
        "complete_multipart_upload",
        Bucket="box",
        Key="m",
        UploadId=upload_id,
        ChecksumSHA256=checksum("SHA256", body),
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
    )
    assert code(error) == "InvalidRequest"
    assert "created with NO checksum algorithm" in error.response["Error"]["Message"]
