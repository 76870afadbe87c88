"""SSE-C, customer-provided keys (app/http/s3/sse.py, app/sealing/customer.py),
through boto3 against a service without master keys: the client's key seals
the chunks, opens them, and is refused as AWS refuses it. docs/encryption.md#sse-c."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from sqlalchemy import select

from app.db.models.base import Base
from app.db.session import session_scope
from app.sealing.keys import parse_keys
from app.store.key_rotation import rotate
from app.store.services import Services
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code
from tests.running_service import CHUNK, Service, ServiceFactory

MARKER = b"SSE-C-PLAINTEXT-MARKER"
KEY = os.urandom(32)
OTHER_KEY = os.urandom(32)


def sse(key: bytes) -> dict[str, Any]:
    """boto3's SSE-C parameters (it sends the key's MD5 itself)."""
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def sse_encoded(key: bytes) -> dict[str, Any]:
    """The same, encoded by hand: boto3 encodes the key and sends its MD5
    only for the operations that read or write content."""
    return {
        "SSECustomerAlgorithm": "AES256",
        "SSECustomerKey": base64.b64encode(key).decode(),
        "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(key).digest()).decode(),
    }


def marked(size: int, seed: int = 0) -> bytes:
    unit = MARKER + bytes((seed + i) % 251 for i in range(1000 - len(MARKER)))
    return (unit * (size // 1000 + 1))[:size]


def status(error: Any) -> int:
    return int(error.response["ResponseMetadata"]["HTTPStatusCode"])


async def body(s3: S3, key: str, customer: bytes | None = KEY, **params: Any) -> bytes:
    extra = sse(customer) if customer is not None else {}
    got = await s3("get_object", Bucket="box", Key=key, **extra, **params)
    if customer is not None:
        assert got["SSECustomerAlgorithm"] == "AES256"
        md5 = base64.b64encode(hashlib.md5(customer).digest()).decode()
        assert got["SSECustomerKeyMD5"] == md5
    else:
        assert "SSECustomerAlgorithm" not in got
    data: bytes = await asyncio.to_thread(got["Body"].read)
    return data


async def database_values(service: Service) -> list[Any]:
    """Every value of every row of every table."""
    services: Services = service.app.state.services
    values: list[Any] = []
    async with session_scope(services.sessionmaker) as session:
        for table in Base.metadata.sorted_tables:
            for row in (await session.execute(select(table))).all():
                values.extend(row)
    return values


@pytest.fixture
async def s3(start_service: ServiceFactory) -> S3:
    client = S3(await start_service(s3_credentials={ACCESS_KEY: SECRET}))
    await client("create_bucket", Bucket="box")
    return client


async def test_an_object_under_a_customer_key_opens_with_that_key_only(s3: S3) -> None:
    data = marked(2 * CHUNK + 5000)
    put = await s3("put_object", Bucket="box", Key="secret", Body=data, **sse(KEY))
    assert put["SSECustomerAlgorithm"] == "AES256" and "ServerSideEncryption" not in put
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'  # the plaintext's, as before
    # Small objects too go to Telegram sealed, never into the database.
    await s3("put_object", Bucket="box", Key="small", Body=MARKER, **sse(KEY))

    assert await body(s3, "secret") == data
    assert await body(s3, "secret", Range="bytes=60000-140000") == data[60000:140001]
    assert await body(s3, "small") == MARKER
    head = await s3("head_object", Bucket="box", Key="secret", **sse(KEY))
    assert head["ContentLength"] == len(data) and head["SSECustomerAlgorithm"] == "AES256"

    # A presigned URL signs the key headers: the client still sends them.
    url = await asyncio.to_thread(
        s3.client.generate_presigned_url,
        "get_object",
        Params={"Bucket": "box", "Key": "secret", **sse(KEY)},
    )
    headers = {
        "x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": base64.b64encode(KEY).decode(),
        "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(
            hashlib.md5(KEY).digest()
        ).decode(),
    }
    async with httpx.AsyncClient() as http:
        presigned = await http.get(url, headers=headers)
        assert presigned.status_code == 200 and presigned.content == data
        assert (await http.get(url)).status_code in (400, 403)
    assert base64.b64encode(KEY).decode() not in url

    # Refused as AWS refuses: no key 400, another key 403, on GET and HEAD.
    for operation in ("get_object", "head_object"):
        missing = await s3.error(operation, Bucket="box", Key="secret")
        assert status(missing) == 400, operation
        wrong = await s3.error(operation, Bucket="box", Key="secret", **sse(OTHER_KEY))
        assert status(wrong) == 403, operation
    missing = await s3.error("get_object", Bucket="box", Key="secret")
    assert code(missing) == "InvalidRequest"
    assert "Server Side Encryption" in missing.response["Error"]["Message"]
    assert code(await s3.error("get_object", Bucket="box", Key="small")) == "InvalidRequest"
    # A key for an object stored without one is refused too.
    await s3("put_object", Bucket="box", Key="plain", Body=os.urandom(5000))
    not_applicable = await s3.error("get_object", Bucket="box", Key="plain", **sse(KEY))
    assert code(not_applicable) == "InvalidRequest"

    # Telegram holds no plaintext; the database holds neither the key nor
    # its MD5 (which would let the key be tested offline).
    files = s3.service.sim.stored_files()
    assert files and [chat for chat, _, stored in files if MARKER in stored] == []
    key_forms = [KEY, base64.b64encode(KEY), hashlib.md5(KEY).digest()]
    key_forms.append(base64.b64encode(hashlib.md5(KEY).digest()))
    for value in await database_values(s3.service):
        text = value if isinstance(value, bytes) else str(value).encode()
        assert not any(form in text for form in key_forms)
        assert MARKER not in text


# boto3 always sends all three headers, well formed; a hand-made request may not.
MALFORMED = [
    ({"algorithm": "AES256"}, "InvalidArgument"),
    ({"algorithm": "aws:kms", "key": "K", "key-MD5": "M"}, "InvalidEncryptionAlgorithmError"),
    ({"algorithm": "AES256", "key": "c2hvcnQ=", "key-MD5": "M"}, "InvalidArgument"),
    ({"algorithm": "AES256", "key": "K", "key-MD5": "d3Jvbmc="}, "InvalidArgument"),
]


async def test_malformed_customer_key_headers_are_refused_with_400(s3: S3) -> None:
    encoded = base64.b64encode(KEY).decode()
    md5 = base64.b64encode(hashlib.md5(KEY).digest()).decode()
    for headers, expected in MALFORMED:
        values = {
            name: {"K": encoded, "M": md5}.get(value, value) for name, value in headers.items()
        }

        def add_headers(request: Any, values: dict[str, str] = values, **_: Any) -> None:
            for name, value in values.items():
                request.headers[f"x-amz-server-side-encryption-customer-{name}"] = value

        s3.client.meta.events.register("before-sign.s3.PutObject", add_headers)
        error = await s3.error("put_object", Bucket="box", Key="k", Body=marked(5000))
        s3.client.meta.events.unregister("before-sign.s3.PutObject", add_headers)
        assert (code(error), status(error)) == (expected, 400), headers
        assert encoded not in str(error.response)
    assert (await s3("list_objects_v2", Bucket="box"))["KeyCount"] == 0


async def test_a_signature_error_never_hands_back_the_customer_key(s3: S3) -> None:
    """SignatureDoesNotMatch echoes the signed text (CanonicalRequest,
    StringToSign), which holds every signed header: the SSE-C key's value is
    redacted there, in SigV4 and SigV2 alike."""
    encoded = base64.b64encode(KEY).decode()
    for signature in ("s3v4", "s3"):
        wrong: Any = boto3.client(
            "s3",
            endpoint_url=s3.service.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key="a-wrong-secret-of-some-length",
            region_name="us-east-1",
            config=Config(signature_version=signature, s3={"addressing_style": "path"}),
        )
        with pytest.raises(ClientError) as caught:
            await asyncio.to_thread(wrong.put_object, Bucket="box", Key="k", Body=b"x", **sse(KEY))
        error = caught.value.response["Error"]
        assert error["Code"] == "SignatureDoesNotMatch", signature
        signed = error.get("CanonicalRequest") or error["StringToSign"]
        assert "x-amz-server-side-encryption-customer-key:<redacted>" in signed, signature
        assert encoded not in str(caught.value.response), signature
        # The key's MD5 names the key without opening it, as the answers do.
        assert "x-amz-server-side-encryption-customer-key-md5:" in signed


# Both backends: the seal queries (DISTINCT over bytea, a LIMIT 1 sample of
# an upload's chunks) are SQL that differs between SQLite and Postgres.
@pytest.mark.both_backends
async def test_multipart_and_copies_under_customer_keys(s3: S3) -> None:
    plain = os.urandom(3000)
    await s3("put_object", Bucket="box", Key="plain", Body=plain)
    upload = await s3("create_multipart_upload", Bucket="box", Key="parts", **sse(KEY))
    assert upload["SSECustomerAlgorithm"] == "AES256"
    where = {"Bucket": "box", "Key": "parts", "UploadId": upload["UploadId"]}
    first = marked(CHUNK, seed=1)
    one = await s3("upload_part", **where, PartNumber=1, Body=first, **sse(KEY))
    # Every part brings the upload's key.
    for params in ({}, sse(OTHER_KEY)):
        error = await s3.error("upload_part", **where, PartNumber=2, Body=b"x" * 100, **params)
        assert status(error) == 400, params
    # A part copied from a plaintext object is sealed under the upload's key.
    two = await s3("upload_part_copy", **where, PartNumber=2, CopySource="box/plain", **sse(KEY))
    parts = [
        {"ETag": one["ETag"], "PartNumber": 1},
        {"ETag": two["CopyPartResult"]["ETag"], "PartNumber": 2},
    ]
    done = await s3(
        "complete_multipart_upload", **where, MultipartUpload={"Parts": parts}, **sse(KEY)
    )
    assert done["ETag"].endswith('-2"')
    whole = first + plain
    assert await body(s3, "parts") == whole
    assert status(await s3.error("get_object", Bucket="box", Key="parts")) == 400

    # Copies: under the same key (sharing the sealed chunks), another key
    # and none (sealed anew); the source's key is checked first.
    source = {"CopySourceSSECustomerAlgorithm": "AES256", "CopySourceSSECustomerKey": KEY}
    targets = {"same": sse(KEY), "rekeyed": sse(OTHER_KEY), "unsealed": {}}
    for target, params in targets.items():
        copy = await s3(
            "copy_object", Bucket="box", Key=target, CopySource="box/parts", **source, **params
        )
        assert copy.get("SSECustomerAlgorithm") == params.get("SSECustomerAlgorithm"), target
    assert await body(s3, "same") == whole
    assert await body(s3, "rekeyed", OTHER_KEY) == whole
    assert status(await s3.error("get_object", Bucket="box", Key="rekeyed", **sse(KEY))) == 403
    assert await body(s3, "unsealed", None) == whole
    wrong_source = {**source, "CopySourceSSECustomerKey": OTHER_KEY}
    error = await s3.error(
        "copy_object", Bucket="box", Key="c", CopySource="box/parts", **wrong_source
    )
    assert status(error) == 403
    error = await s3.error("copy_object", Bucket="box", Key="c", CopySource="box/parts")
    assert status(error) == 400
    listing = await s3("list_objects_v2", Bucket="box")
    assert [item["Key"] for item in listing["Contents"]] == [
        "parts",
        "plain",
        "rekeyed",
        "same",
        "unsealed",
    ]
    # Only the copy the client asked to be plaintext is plaintext in Telegram.
    files = s3.service.sim.stored_files()
    holding = [stored for _, _, stored in files if MARKER in stored]
    assert files and all(stored in whole for stored in holding)
    assert sum(len(stored) for stored in holding) == len(whole)


async def test_what_tells_of_the_plaintext_is_refused_without_the_key_as_head_is(
    s3: S3,
) -> None:
    """GetObjectAttributes (the plaintext's checksums), ListParts (each part's
    MD5 as its ETag) and a copy's x-amz-copy-source-if-* (an oracle on the
    ETag) answer only with the key, as HEAD does: 400 without it, 403 with
    another one."""
    data = marked(CHUNK + 100)
    put = await s3(
        "put_object", Bucket="box", Key="sealed", Body=data, ChecksumAlgorithm="SHA256", **sse(KEY)
    )
    wanted = {"Bucket": "box", "Key": "sealed", "ObjectAttributes": ["ETag", "Checksum"]}
    for params, expected in (({}, 400), (sse_encoded(OTHER_KEY), 403)):
        error = await s3.error("get_object_attributes", **wanted, **params)
        assert status(error) == expected, params
        assert put["ETag"].strip('"') not in str(error.response)
    attributes = await s3("get_object_attributes", **wanted, **sse_encoded(KEY))
    assert attributes["Checksum"]["ChecksumSHA256"] == put["ChecksumSHA256"]

    upload = await s3("create_multipart_upload", Bucket="box", Key="parts", **sse(KEY))
    where = {"Bucket": "box", "Key": "parts", "UploadId": upload["UploadId"]}
    part = await s3("upload_part", **where, PartNumber=1, Body=data, **sse(KEY))
    for params, expected in (({}, 400), (sse_encoded(OTHER_KEY), 403)):
        error = await s3.error("list_parts", **where, **params)
        assert status(error) == expected, params
        assert part["ETag"].strip('"') not in str(error.response)
    listed = await s3("list_parts", **where, **sse_encoded(KEY))
    assert [p["ETag"] for p in listed["Parts"]] == [part["ETag"]]

    # Without the source's key, the right ETag and a wrong one get the same answer.
    for if_match in (put["ETag"], '"0123456789abcdef0123456789abcdef"'):
        copy = await s3.error(
            "copy_object",
            Bucket="box",
            Key="copy",
            CopySource="box/sealed",
            CopySourceIfMatch=if_match,
        )
        part_copy = await s3.error(
            "upload_part_copy",
            **where,
            PartNumber=2,
            CopySource="box/sealed",
            CopySourceIfMatch=if_match,
            **sse(KEY),
        )
        for error in (copy, part_copy):
            assert (code(error), status(error)) == ("InvalidRequest", 400), if_match


async def test_customer_keys_beside_master_keys_and_their_rotation(
    start_service: ServiceFactory,
) -> None:
    """With ENCRYPTION_KEYS set too, a customer key still decides: the object
    answers as SSE-C, not SSE-S3; rotating the master keys re-wraps only what
    they wrap, and the scrub's deep pass reads only what it can open (the
    customer's chunks are not the service's to open)."""
    master = "m1:" + base64.b64encode(bytes(range(32))).decode()
    newer = "m2:" + base64.b64encode(bytes(range(1, 33))).decode()
    service = await start_service(encryption_keys=master, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    data = marked(CHUNK + 100)
    put = await s3("put_object", Bucket="box", Key="customer", Body=data, **sse(KEY))
    assert "ServerSideEncryption" not in put and put["SSECustomerAlgorithm"] == "AES256"
    sealed = await s3("put_object", Bucket="box", Key="master", Body=data)
    assert sealed["ServerSideEncryption"] == "AES256"

    services: Services = service.app.state.services
    report = await services.scrub.run_pass(deep=True)
    # Each object's two chunks; only the master-sealed ones are read.
    assert (report.checked, report.read, report.missing, report.corrupt) == (4, 2, 0, 0)
    keyring = parse_keys([newer, master], "test")
    done = await rotate(services.sessionmaker, keyring)
    assert (done.rewrapped, done.unavailable) == (2, 0)  # the master-sealed object's 2 chunks
    assert await body(s3, "customer") == data
    head = await s3("head_object", Bucket="box", Key="master")
    assert head["ServerSideEncryption"] == "AES256" and "SSECustomerAlgorithm" not in head
    assert status(await s3.error("get_object", Bucket="box", Key="customer")) == 400
