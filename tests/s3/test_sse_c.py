"""SSE-C, customer-provided keys (app/s3/sse.py, app/sealing/customer.py),
through boto3 against a service without master keys: the client's key seals
the chunks, opens them, and is refused as AWS refuses it. docs/encryption.md#sse-c."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from typing import Any

import pytest
from sqlalchemy import select

from app.db.models.base import Base
from app.db.session import session_scope
from app.services import Services
from tests.running_service import CHUNK, Service, ServiceFactory
from tests.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code

MARKER = b"SSE-C-PLAINTEXT-MARKER"
KEY = os.urandom(32)
OTHER_KEY = os.urandom(32)


def sse(key: bytes) -> dict[str, Any]:
    """boto3's SSE-C parameters (it sends the key's MD5 itself)."""
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def marked(size: int, seed: int = 0) -> bytes:
    unit = MARKER + bytes((seed + i) % 251 for i in range(1000 - len(MARKER)))
    return (unit * (size // 1000 + 1))[:size]


def status(error: Any) -> int:
    return int(error.response["ResponseMetadata"]["HTTPStatusCode"])


async def body(s3: S3, key: str, **params: Any) -> bytes:
    got = await s3("get_object", Bucket="box", Key=key, **params)
    assert got["SSECustomerAlgorithm"] == "AES256"
    assert got["SSECustomerKeyMD5"] == base64.b64encode(hashlib.md5(KEY).digest()).decode()
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

    assert await body(s3, "secret", **sse(KEY)) == data
    assert await body(s3, "secret", Range="bytes=60000-140000", **sse(KEY)) == data[60000:140001]
    assert await body(s3, "small", **sse(KEY)) == MARKER
    head = await s3("head_object", Bucket="box", Key="secret", **sse(KEY))
    assert head["ContentLength"] == len(data) and head["SSECustomerAlgorithm"] == "AES256"

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


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # boto3 always sends all three; a hand-made request may not.
        ({"algorithm": "AES256"}, "InvalidArgument"),
        ({"algorithm": "aws:kms", "key": "K", "key-MD5": "M"}, "InvalidEncryptionAlgorithmError"),
        ({"algorithm": "AES256", "key": "c2hvcnQ=", "key-MD5": "M"}, "InvalidArgument"),
        ({"algorithm": "AES256", "key": "K", "key-MD5": "d3Jvbmc="}, "InvalidArgument"),
    ],
)
async def test_malformed_customer_key_headers_are_refused_with_400(
    s3: S3, headers: dict[str, str], expected: str
) -> None:
    values = {
        name: value.replace("K", base64.b64encode(KEY).decode()).replace(
            "M", base64.b64encode(hashlib.md5(KEY).digest()).decode()
        )
        if value in ("K", "M")
        else value
        for name, value in headers.items()
    }

    def add_headers(request: Any, **_: Any) -> None:
        for name, value in values.items():
            request.headers[f"x-amz-server-side-encryption-customer-{name}"] = value

    s3.client.meta.events.register("before-sign.s3.PutObject", add_headers)
    error = await s3.error("put_object", Bucket="box", Key="k", Body=marked(5000))
    assert (code(error), status(error)) == (expected, 400)
    assert base64.b64encode(KEY).decode() not in str(error.response)
    assert (await s3("list_objects_v2", Bucket="box"))["KeyCount"] == 0


async def test_multipart_and_copies_under_customer_keys(s3: S3) -> None:
    upload = await s3("create_multipart_upload", Bucket="box", Key="parts", **sse(KEY))
    assert upload["SSECustomerAlgorithm"] == "AES256"
    parts = [marked(CHUNK, seed=1), marked(3000, seed=2)]
    etags = []
    for number, part in enumerate(parts, start=1):
        answer = await s3(
            "upload_part",
            Bucket="box",
            Key="parts",
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=part,
            **sse(KEY),
        )
        etags.append(answer["ETag"])
    done = await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="parts",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": n} for n, e in enumerate(etags, 1)]},
        **sse(KEY),
    )
    assert done["ETag"].endswith('-2"')
    whole = b"".join(parts)
    assert await body(s3, "parts", **sse(KEY)) == whole
    assert status(await s3.error("get_object", Bucket="box", Key="parts")) == 400

    # A copy under the same key shares the sealed chunks; the source's key
    # is checked first.
    copy = await s3(
        "copy_object",
        Bucket="box",
        Key="copy",
        CopySource="box/parts",
        CopySourceSSECustomerAlgorithm="AES256",
        CopySourceSSECustomerKey=KEY,
        **sse(KEY),
    )
    assert copy["SSECustomerAlgorithm"] == "AES256"
    assert await body(s3, "copy", **sse(KEY)) == whole
    wrong_source = await s3.error(
        "copy_object",
        Bucket="box",
        Key="copy2",
        CopySource="box/parts",
        CopySourceSSECustomerAlgorithm="AES256",
        CopySourceSSECustomerKey=OTHER_KEY,
        **sse(KEY),
    )
    assert status(wrong_source) == 403
    no_source_key = await s3.error("copy_object", Bucket="box", Key="copy2", CopySource="box/parts")
    assert status(no_source_key) == 400
    assert [item["Key"] for item in (await s3("list_objects_v2", Bucket="box"))["Contents"]] == [
        "copy",
        "parts",
    ]
    files = s3.service.sim.stored_files()
    assert files and [chat for chat, _, stored in files if MARKER in stored] == []
