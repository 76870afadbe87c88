"""POST Object: browser form uploads signed by a policy, as boto3's
`generate_presigned_post` makes them (SigV4) and as older back ends sign them
(SigV2's HMAC-SHA1), against the real service (both databases, the simulator)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config

from app.store.object_write import ObjectWrite
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, read
from tests.http.s3.test_bad_input import error_code
from tests.http.s3.test_sigv2 import default_client
from tests.running_service import CHUNK, Service, eventually


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="uploads")
    return client


def presigned_post(
    service: Service, key: str, signature: str | None = None, **options: Any
) -> dict[str, Any]:
    """What a web app's back end hands its page: boto3 in its default
    configuration (which signs the policy with SigV2), or told to use SigV4."""
    if signature is None:
        client = default_client(service)
    else:
        client = boto3.client(
            "s3",
            endpoint_url=service.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
            config=Config(signature_version=signature, s3={"addressing_style": "path"}),
        )
    post: dict[str, Any] = client.generate_presigned_post("uploads", key, **options)  # type: ignore[attr-defined]
    return post


async def submit(
    post: dict[str, Any], content: bytes, filename: str = "photo.jpg", **extra: str
) -> httpx.Response:
    """The browser's side: the fields, then the file (always last)."""
    fields = {**post["fields"], **extra}
    async with httpx.AsyncClient() as http:
        return await http.post(
            post["url"], data=fields, files={"file": (filename, content, "image/jpeg")}
        )


def signed_v2(policy: dict[str, Any], secret: str = SECRET) -> dict[str, str]:
    encoded = base64.b64encode(json.dumps(policy).encode()).decode()
    signature = hmac.new(secret.encode(), encoded.encode(), hashlib.sha1).digest()
    return {
        "AWSAccessKeyId": ACCESS_KEY,
        "policy": encoded,
        "signature": base64.b64encode(signature).decode(),
    }


def in_an_hour() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("signature", "signed_by"),
    [(None, {"AWSAccessKeyId", "signature"}), ("s3v4", {"x-amz-signature", "x-amz-credential"})],
)
async def test_a_boto3_presigned_post_uploads_the_file(
    s3: S3, s3_service: Service, signature: str | None, signed_by: set[str]
) -> None:
    post = presigned_post(s3_service, "avatars/me.jpg", signature)
    assert post["url"].endswith("/uploads")
    assert {"policy", *signed_by} <= post["fields"].keys()
    content = bytes(range(256)) * (3 * CHUNK // 256 + 5)  # several Telegram chunks

    response = await submit(post, content)

    assert response.status_code == 204, response.text
    assert response.headers["etag"] == f'"{hashlib.md5(content).hexdigest()}"'
    assert await read(s3, "uploads", "avatars/me.jpg") == content


async def test_fields_in_the_policy_become_the_objects_headers_and_201_answers_xml(
    s3: S3, s3_service: Service
) -> None:
    post = presigned_post(
        s3_service,
        "docs/${filename}",
        Fields={"Content-Type": "text/plain", "x-amz-meta-owner": "alice"},
        Conditions=[
            ["starts-with", "$key", "docs/"],
            {"Content-Type": "text/plain"},
            {"x-amz-meta-owner": "alice"},
            {"success_action_status": "201"},
        ],
    )

    response = await submit(post, b"hello", filename="notes.txt", success_action_status="201")

    assert response.status_code == 201, response.text
    assert "<Key>docs/notes.txt</Key>" in response.text
    assert "<Bucket>uploads</Bucket>" in response.text
    head = await s3("head_object", Bucket="uploads", Key="docs/notes.txt")
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"owner": "alice"}


async def test_a_redirect_after_success_names_the_object(s3: S3, s3_service: Service) -> None:
    target = "https://app.example/uploaded"
    post = presigned_post(
        s3_service,
        "r.bin",
        Fields={"success_action_redirect": target},
        Conditions=[{"success_action_redirect": target}],
    )

    response = await submit(post, b"x")

    assert response.status_code == 303, response.text
    location = httpx.URL(response.headers["location"])
    assert str(location).startswith(target + "?")
    assert dict(location.params) == {
        "bucket": "uploads",
        "key": "r.bin",
        "etag": f'"{hashlib.md5(b"x").hexdigest()}"',
    }


async def test_a_file_over_the_policys_range_is_refused_and_leaves_nothing(
    s3: S3, s3_service: Service
) -> None:
    before = set(s3_service.live_messages())
    post = presigned_post(
        s3_service, "big.bin", Conditions=[["content-length-range", 1, 2 * CHUNK]]
    )

    response = await submit(post, b"\x01" * (4 * CHUNK))

    assert response.status_code == 400
    assert error_code(response) == "EntityTooLarge"
    assert (await s3.error("head_object", Bucket="uploads", Key="big.bin")).response["Error"][
        "Code"
    ] == "404"

    async def chunks_deleted() -> bool:
        return set(s3_service.live_messages()) == before

    await eventually(chunks_deleted)


async def test_a_file_under_the_policys_minimum_is_refused(s3: S3, s3_service: Service) -> None:
    post = presigned_post(s3_service, "small.bin", Conditions=[["content-length-range", 10, 100]])

    response = await submit(post, b"tiny")

    assert response.status_code == 400
    assert error_code(response) == "EntityTooSmall"


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        # A field the policy does not allow that value for.
        ({"key": "elsewhere/me.jpg"}, 403, "AccessDenied"),
        # A field the policy does not name at all.
        ({"x-amz-meta-extra": "1"}, 403, "AccessDenied"),
        ({"x-amz-signature": "0" * 64}, 403, "SignatureDoesNotMatch"),
        ({"x-amz-credential": "AKIDUNKNOWN/20261130/us-east-1/s3/aws4_request"}, 403, None),
        ({"x-amz-date": "20261130T000000Z"}, 403, "AccessDenied"),
    ],
)
async def test_a_form_that_does_not_match_its_signed_policy_is_refused(
    s3: S3, s3_service: Service, change: dict[str, str], status: int, code: str | None
) -> None:
    post = presigned_post(s3_service, "me.jpg", "s3v4", Conditions=[["starts-with", "$key", "me"]])

    response = await submit(post, b"content", **change)

    assert response.status_code == status, response.text
    if code is not None:
        assert error_code(response) == code
    keys = await s3("list_objects_v2", Bucket="uploads")
    assert keys["KeyCount"] == 0


async def test_an_ignored_field_needs_no_condition(s3: S3, s3_service: Service) -> None:
    post = presigned_post(s3_service, "me.jpg")

    response = await submit(post, b"content", **{"x-ignore-csrf": "token"})

    assert response.status_code == 204, response.text


async def test_a_sigv2_policy_with_case_insensitive_names_uploads(
    s3: S3, s3_service: Service
) -> None:
    policy = {
        "expiration": in_an_hour(),
        "conditions": [
            {"bUcKeT": "uploads"},
            ["StArTs-WiTh", "$KeY", "v2/"],
            ["content-length-range", 0, 1024],
        ],
    }
    fields = {"kEy": "v2/${filename}", **signed_v2(policy)}
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{s3_service.url}/uploads", data=fields, files={"file": ("a.txt", b"v2 body")}
        )

    assert response.status_code == 204, response.text
    assert await read(s3, "uploads", "v2/a.txt") == b"v2 body"


@pytest.mark.parametrize(
    ("policy", "status", "code"),
    [
        ({"expiration": "2020-01-01T00:00:00Z", "conditions": []}, 403, "AccessDenied"),
        ({"conditions": []}, 400, "InvalidPolicyDocument"),
        ({"expiration": "tomorrow", "conditions": []}, 400, "InvalidPolicyDocument"),
        ({"expiration": "2999-01-01T00:00:00Z"}, 400, "InvalidPolicyDocument"),
        ({"expiration": "2999-01-01T00:00:00Z", "conditions": [{}]}, 400, "InvalidPolicyDocument"),
        (
            {"expiration": "2999-01-01T00:00:00Z", "conditions": [["content-length-range", 5]]},
            400,
            "InvalidPolicyDocument",
        ),
    ],
)
async def test_a_policy_that_is_expired_or_malformed_is_refused(
    s3: S3, s3_service: Service, policy: dict[str, Any], status: int, code: str
) -> None:
    fields = {"key": "k", **signed_v2(policy)}
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{s3_service.url}/uploads", data=fields, files={"file": ("a", b"x")}
        )

    assert response.status_code == status, response.text
    assert error_code(response) == code


async def test_an_unsigned_form_or_one_without_a_file_is_refused(
    s3: S3, s3_service: Service
) -> None:
    async with httpx.AsyncClient() as http:
        anonymous = await http.post(
            f"{s3_service.url}/uploads", data={"key": "k"}, files={"file": ("a", b"x")}
        )
        post = presigned_post(s3_service, "k")
        no_file = await http.post(post["url"], data=post["fields"], files={"other": ("a", b"x")})

    assert anonymous.status_code == 403
    assert error_code(anonymous) == "AccessDenied"
    assert no_file.status_code == 400
    assert error_code(no_file) == "IncorrectNumberOfFilesInPostRequest"


@pytest.mark.parametrize("right", [True, False])
async def test_a_checksum_field_is_verified_against_the_file(
    s3: S3, s3_service: Service, right: bool
) -> None:
    content = b"checked content"
    digest = hashlib.sha256(content if right else b"other").digest()
    post = presigned_post(s3_service, "sum.txt")

    response = await submit(
        post, content, **{"x-amz-checksum-sha256": base64.b64encode(digest).decode()}
    )

    if right:
        assert response.status_code == 204, response.text
        assert await read(s3, "uploads", "sum.txt") == content
    else:
        assert response.status_code == 400
        assert error_code(response) == "BadDigest"
        listed = await s3("list_objects_v2", Bucket="uploads")
        assert listed["KeyCount"] == 0


def tagging_document(tags: dict[str, str]) -> str:
    """A `tagging` field as AWS documents it for POST, laid out over lines
    (a form's text field may hold newlines)."""
    items = "".join(
        f"\n    <Tag><Key>{key}</Key><Value>{value}</Value></Tag>" for key, value in tags.items()
    )
    return f"<Tagging>\n  <TagSet>{items}\n  </TagSet>\n</Tagging>"


async def test_a_tagging_field_tags_the_object(s3: S3, s3_service: Service) -> None:
    document = tagging_document({"project": "blue", "owner": "åsa"})
    post = presigned_post(
        s3_service, "tagged.txt", Fields={"tagging": document}, Conditions=[{"tagging": document}]
    )

    response = await submit(post, b"tagged")

    assert response.status_code == 204, response.text
    tags = await s3("get_object_tagging", Bucket="uploads", Key="tagged.txt")
    assert {tag["Key"]: tag["Value"] for tag in tags["TagSet"]} == {
        "project": "blue",
        "owner": "åsa",
    }
    got = await s3("get_object", Bucket="uploads", Key="tagged.txt")
    assert got["TagCount"] == 2


@pytest.mark.parametrize(
    ("document", "code"),
    [
        ("<Tagging><TagSet><Tag><Key>k</Key>", "MalformedXML"),
        ("<NotTagging/>", "MalformedXML"),
        (tagging_document({f"k{n}": "v" for n in range(11)}), "InvalidTag"),
        (tagging_document({"k" * 129: "v"}), "InvalidTag"),
    ],
    ids=["unclosed", "other-root", "eleven-tags", "long-key"],
)
async def test_a_bad_tagging_field_is_refused_before_the_file_is_stored(
    s3: S3, s3_service: Service, document: str, code: str
) -> None:
    before = set(s3_service.live_messages())
    post = presigned_post(
        s3_service, "bad.bin", Fields={"tagging": document}, Conditions=[{"tagging": document}]
    )

    response = await submit(post, b"\x02" * (3 * CHUNK))

    assert response.status_code == 400, response.text
    assert error_code(response) == code
    assert (await s3("list_objects_v2", Bucket="uploads"))["KeyCount"] == 0
    assert set(s3_service.live_messages()) == before


async def test_a_tagging_field_needs_a_condition(s3: S3, s3_service: Service) -> None:
    post = presigned_post(s3_service, "t.txt")

    response = await submit(post, b"x", tagging=tagging_document({"a": "b"}))

    assert response.status_code == 403, response.text
    assert error_code(response) == "AccessDenied"


@pytest.mark.parametrize("name", ["x-amz-meta-a b", "x-amz-meta-caf\u00e9", "x-amz-meta-a:b"])
async def test_a_metadata_field_no_header_can_name_is_refused_before_the_file_is_stored(
    s3: S3, s3_service: Service, name: str
) -> None:
    # A header could never carry this name: stored, the object could not be
    # read back (GET dropped the connection or answered 500). PutObject never
    # sees such a name; POST Object refuses it, as a policy may allow anything.
    before = set(s3_service.live_messages())
    post = presigned_post(s3_service, "odd.bin", Fields={name: "v"}, Conditions=[{name: "v"}])

    response = await submit(post, b"\x03" * (3 * CHUNK))

    assert response.status_code == 400, response.text
    assert error_code(response) == "InvalidArgument"
    assert (await s3("list_objects_v2", Bucket="uploads"))["KeyCount"] == 0
    assert set(s3_service.live_messages()) == before


async def test_an_object_stored_with_such_a_name_before_the_check_reads_back_without_it(
    s3: S3, s3_service: Service
) -> None:
    # Written as POST Object used to write it: GET dropped the connection.
    async def body() -> AsyncIterator[bytes]:
        yield b"old"

    await s3_service.app.state.services.store.put_stream(
        body(),
        ObjectWrite(
            bucket="uploads",
            key="old.bin",
            name="old.bin",
            content_type="text/plain",
            metadata={"x-amz-meta-a b": "v", "x-amz-meta-caf\u00e9": "v", "x-amz-meta-ok": "v"},
        ),
    )

    head = await s3("head_object", Bucket="uploads", Key="old.bin")
    assert head["Metadata"] == {"ok": "v"}
    assert await read(s3, "uploads", "old.bin") == b"old"


# --- encryption: the form's fields are PutObject's headers (app/http/s3/sse.py) ------------

CUSTOMER_KEY = bytes(range(32))
MARKER = b"POST-OBJECT-SSE-C-PLAINTEXT"


def customer_fields(key: bytes = CUSTOMER_KEY) -> dict[str, str]:
    return {
        "x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": base64.b64encode(key).decode(),
        "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(
            hashlib.md5(key).digest()
        ).decode(),
    }


def post_with(service: Service, key: str, fields: dict[str, str]) -> dict[str, Any]:
    """A SigV4 presigned POST whose policy allows exactly these fields."""
    return presigned_post(
        service,
        key,
        "s3v4",
        Fields=fields,
        Conditions=[{name: value} for name, value in fields.items()],
    )


async def test_a_customer_key_in_the_form_seals_the_file_as_put_object_does(
    s3: S3, s3_service: Service
) -> None:
    content = MARKER * (2 * CHUNK // len(MARKER) + 3)  # several Telegram chunks
    post = post_with(s3_service, "sealed.bin", customer_fields())

    response = await submit(post, content)

    assert response.status_code == 204, response.text
    assert response.headers["x-amz-server-side-encryption-customer-algorithm"] == "AES256"
    assert (
        response.headers["x-amz-server-side-encryption-customer-key-md5"]
        == (customer_fields()["x-amz-server-side-encryption-customer-key-MD5"])
    )
    # As an object PutObject sealed: refused without the key, read with it.
    missing = await s3.error("get_object", Bucket="uploads", Key="sealed.bin")
    assert missing.response["Error"]["Code"] == "InvalidRequest"
    sse_c = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": CUSTOMER_KEY}
    assert await read(s3, "uploads", "sealed.bin", **sse_c) == content
    # Telegram never saw the plaintext.
    stored = s3_service.sim.stored_files()
    assert stored and not [chat for chat, _, data in stored if MARKER in data]


REFUSED = [
    # No master keys here: AES256 would store plaintext the client believes sealed.
    ({"x-amz-server-side-encryption": "AES256"}, 400, "InvalidArgument"),
    ({"x-amz-server-side-encryption": "aws:kms"}, 501, "NotImplemented"),
    (
        {"x-amz-server-side-encryption": "AES256", **customer_fields()},
        400,
        "InvalidArgument",
    ),
    (
        {**customer_fields(), "x-amz-server-side-encryption-customer-key-MD5": "d3Jvbmc="},
        400,
        "InvalidArgument",
    ),
    (
        {**customer_fields(), "x-amz-server-side-encryption-customer-algorithm": "aws:kms"},
        400,
        "InvalidEncryptionAlgorithmError",
    ),
]


@pytest.mark.parametrize(("fields", "status", "expected"), REFUSED)
async def test_encryption_fields_put_object_refuses_are_refused_and_nothing_is_stored(
    s3: S3, s3_service: Service, fields: dict[str, str], status: int, expected: str
) -> None:
    post = post_with(s3_service, "refused.bin", fields)

    response = await submit(post, MARKER)

    assert (response.status_code, error_code(response)) == (status, expected), response.text
    # The key is never echoed, not even in part.
    assert customer_fields()["x-amz-server-side-encryption-customer-key"] not in response.text
    assert (await s3("list_objects_v2", Bucket="uploads"))["KeyCount"] == 0
