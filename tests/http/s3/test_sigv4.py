"""SigV4 verification against requests signed by botocore and minio-py."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import urllib3
from hypothesis import given
from hypothesis import strategies as st
from minio import Minio

from app.http.s3 import sigv4
from app.http.s3.errors import S3Error
from app.http.s3.names import split_path
from app.http.s3.sigv2 import is_sigv2_request
from app.http.s3.sigv4 import (
    EMPTY_SHA256,
    PayloadMode,
    auth_kind,
    canonical_query_string,
    canonical_uri,
    derive_signing_key,
    is_sigv4_request,
    parse_query,
    verify_request,
)
from app.http.s3.sigv4.canonical import uri_candidates
from app.http.s3.sigv4.presign import presign_get
from tests.http.s3.helpers import (
    ACCESS_KEY,
    CREDENTIALS,
    ENDPOINT,
    NOW,
    SECRET_KEY,
    CapturingClient,
    WireRequest,
    boto3_client,
    presign_with_botocore,
    sign_with_botocore,
    wire_from_url,
)

KEYS = [
    "plain.txt",
    "with space.txt",
    "trailing space ",
    "a+b=c&d",
    "plus+and space",
    "tilde~name",
    "100%.txt",
    "%2F-literal-percent-2F",
    "dir/sub/file",
    "dir/",
    "a//double//slash",
    "/leading-slash",
    "trailing//",
    "ü/ñ/日本語/ключ.bin",
    "emoji 😀.png",
    "!*'()[]{}$@,;:",
    "question?hash#amp&eq=",
    'quote"back\\slash',
    "docker/registry/v2/blobs/sha256/ab/abcdef/data",
    "x" * 1024,
]


def expect_error(code: str, call: Any, *args: Any, **kwargs: Any) -> S3Error:
    with pytest.raises(S3Error) as caught:
        call(*args, **kwargs)
    err = caught.value
    assert err.code == code, f"{err.code}: {err.message}"
    text = " ".join([str(err), err.message, *err.details.values()])
    assert SECRET_KEY not in text
    return err


# --------------------------------------------------------------------------- botocore: object keys


@pytest.mark.parametrize("key", KEYS)
def test_boto3_put_object_keys_verify(s3: CapturingClient, key: str) -> None:
    body = b"hello " + key.encode()
    wire = s3.call("put_object", Bucket="bucket", Key=key, Body=body)
    verified = wire.verify()
    assert verified.access_key == ACCESS_KEY
    assert verified.payload_mode is PayloadMode.SIGNED_HEX
    assert verified.expected_sha256 == hashlib.sha256(body).hexdigest()
    assert verified.region == "us-east-1"
    assert verified.scope == "20261130/us-east-1/s3/aws4_request"
    assert not verified.presigned
    # The raw path botocore sends is already the canonical URI, and splits back
    # to the very key.
    assert canonical_uri(wire.raw_path) == wire.raw_path.decode()
    assert split_path(wire.raw_path) == ("bucket", key)


@pytest.mark.parametrize("key", ["with space.txt", "ü/ñ.bin", "a+b", "dir/"])
def test_boto3_get_head_delete(s3: CapturingClient, key: str) -> None:
    for operation, kwargs in [
        ("get_object", {"Range": "bytes=10-", "ResponseContentType": "text/plain; a=b"}),
        ("head_object", {"IfNoneMatch": '"abc"'}),
        ("delete_object", {}),
        ("get_object", {"ResponseContentDisposition": 'attachment; filename="a b+c.txt"'}),
    ]:
        wire = s3.call(operation, Bucket="bucket", Key=key, **kwargs)
        verified = wire.verify()
        assert verified.expected_sha256 == EMPTY_SHA256


def test_boto3_put_object_with_metadata_and_headers(s3: CapturingClient) -> None:
    wire = s3.call(
        "put_object",
        Bucket="bucket",
        Key="k",
        Body=b"data",
        ContentType="application/octet-stream",
        ContentDisposition='attachment; filename="x  y.txt"',
        CacheControl="no-cache",
        Metadata={"Owner": "someone", "spaces": "a   b  c "},
        ContentMD5="jXd/OF09/siBXSD3SWAm3A==",
    )
    assert "x-amz-meta-spaces" in wire.headers
    wire.verify()


def test_boto3_copy_object_with_special_source(s3: CapturingClient) -> None:
    wire = s3.call(
        "copy_object",
        Bucket="bucket",
        Key="dest key",
        CopySource={"Bucket": "bucket", "Key": "söurce key+1"},
        MetadataDirective="REPLACE",
    )
    assert wire.header("x-amz-copy-source") is not None
    wire.verify()
    wire = s3.call(
        "upload_part_copy",
        Bucket="bucket",
        Key="dest",
        UploadId="upload/id+=",
        PartNumber=3,
        CopySource={"Bucket": "bucket", "Key": "big blob"},
        CopySourceRange="bytes=0-33554431",
    )
    wire.verify()


# ------------------------------------------------------------------------- botocore: query strings


def test_boto3_list_objects_query(s3: CapturingClient) -> None:
    wire = s3.call(
        "list_objects",
        Bucket="bucket",
        Prefix="dir with space/a+b~ü",
        Delimiter="/",
        Marker="m%arker=&",
        MaxKeys=1000,
    )
    assert b"encoding-type=url" in wire.query
    wire.verify()
    wire = s3.call(
        "list_objects_v2",
        Bucket="bucket",
        Prefix="p",
        StartAfter="s a",
        ContinuationToken="tok/en+=",
        FetchOwner=True,
    )
    wire.verify()


@pytest.mark.parametrize(
    ("operation", "kwargs", "query"),
    [
        ("create_multipart_upload", {"Key": "k"}, b"uploads"),
        ("list_multipart_uploads", {"Prefix": "docker/"}, None),
        ("get_bucket_versioning", {}, b"versioning"),
        ("get_bucket_location", {}, b"location"),
        ("list_parts", {"Key": "k", "UploadId": "u-1", "PartNumberMarker": 2}, None),
        ("abort_multipart_upload", {"Key": "k", "UploadId": "u 1"}, None),
        ("head_bucket", {}, b""),
        ("create_bucket", {}, b""),
        ("delete_bucket", {}, b""),
    ],
)
def test_boto3_subresources(
    s3: CapturingClient, operation: str, kwargs: dict[str, Any], query: bytes | None
) -> None:
    wire = s3.call(operation, Bucket="bucket", **kwargs)
    if query is not None:
        assert wire.query == query
    wire.verify()


def test_boto3_list_buckets(s3: CapturingClient) -> None:
    wire = s3.call("list_buckets")
    assert wire.raw_path == b"/"
    wire.verify()


def test_boto3_upload_part_and_delete_objects(s3: CapturingClient) -> None:
    wire = s3.call(
        "upload_part", Bucket="b-1", Key="k k", UploadId="abc/def==", PartNumber=10000, Body=b"x"
    )
    assert wire.verify().expected_sha256 == hashlib.sha256(b"x").hexdigest()
    wire = s3.call(
        "delete_objects",
        Bucket="b-1",
        Delete={"Objects": [{"Key": "a b"}, {"Key": "ü+"}], "Quiet": True},
    )
    assert wire.query == b"delete"
    assert wire.verify().expected_sha256 == hashlib.sha256(wire.body).hexdigest()
    wire = s3.call(
        "complete_multipart_upload",
        Bucket="b-1",
        Key="k",
        UploadId="abc",
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"e1"'}]},
    )
    wire.verify()


def test_unsorted_repeated_and_empty_query_params(frozen: None) -> None:
    url = f"{ENDPOINT}/bucket/key?zeta=1&b=2&a=3&a=1&uploads&empty=&a=2&x=%2F%7E%20"
    wire = sign_with_botocore("GET", url)
    assert wire.query == b"zeta=1&b=2&a=3&a=1&uploads&empty=&a=2&x=%2F%7E%20"
    wire.verify()
    assert canonical_query_string(wire.query) == "a=1&a=2&a=3&b=2&empty=&uploads=&x=%2F~%20&zeta=1"


def test_query_plus_means_space() -> None:
    # Go's url.Values.Encode (minio-go, aws-sdk-go) writes spaces as '+' and
    # signs them as %20.
    assert canonical_query_string(b"prefix=a+b&x=%2B") == "prefix=a%20b&x=%2B"
    assert parse_query(b"prefix=a+b&x=%2B&uploads&&=v") == [
        ("prefix", "a b"),
        ("x", "+"),
        ("uploads", ""),
        ("", "v"),
    ]


def test_canonical_uri_encodes_once() -> None:
    assert canonical_uri(b"/b/a%20b") == "/b/a%20b"
    assert canonical_uri(b"/b/a b") == "/b/a%20b"
    assert canonical_uri(b"/b/%7Ex~") == "/b/~x~"
    assert canonical_uri(b"/b/a%2fb") == "/b/a/b"
    assert canonical_uri(b"/b/a+b") == "/b/a%2Bb"
    assert canonical_uri(b"/b//x/") == "/b//x/"
    assert canonical_uri(b"/b/%25") == "/b/%25"
    assert canonical_uri(b"") == "/"


@given(st.binary(max_size=40) | st.text("aZ09-._~/%!+ ", max_size=40).map(str.encode))
def test_the_path_candidates_are_the_canonical_path_and_the_path_as_sent(raw: bytes) -> None:
    # Most paths hold only bytes encoding keeps (one candidate, found at once).
    path = b"/b/" + raw
    expected = [canonical_uri(path)]
    if path.isascii() and path.decode() != expected[0]:
        expected.append(path.decode())
    assert uri_candidates(path) == expected


# ------------------------------------------------------------------------- non-canonical spellings


@pytest.mark.parametrize(
    "path", ["/bucket/a%2fb", "/bucket/a!b(c)", "/bucket/%7Etilde", "/b/a%2Bb"]
)
def test_path_signed_as_sent_is_accepted(frozen: None, path: str) -> None:
    # botocore signs the path exactly as it is in the URL; a client that sends a
    # non-canonical spelling signs that spelling.
    wire = sign_with_botocore("GET", f"{ENDPOINT}{path}")
    assert wire.raw_path == path.encode()
    wire.verify()


def test_path_signed_canonically_but_sent_differently(frozen: None) -> None:
    # Signed as /bucket/~x (canonical); sent with an escaped tilde.
    wire = sign_with_botocore("GET", f"{ENDPOINT}/bucket/~x")
    wire.replace(raw_path=b"/bucket/%7Ex").verify()


def test_date_header_instead_of_x_amz_date(frozen: None) -> None:
    wire = sign_with_botocore(
        "GET", f"{ENDPOINT}/bucket/k", headers=[("Date", "Mon, 30 Nov 2026 08:00:00 GMT")]
    )
    assert wire.header("x-amz-date") is None
    assert (wire.header("date") or "").startswith("Mon, 30 Nov 2026 08:00:00")  # "-0000"
    assert wire.verify().amz_date == "20261130T080000Z"


def test_header_values_trimmed_and_collapsed(frozen: None) -> None:
    wire = sign_with_botocore(
        "PUT",
        f"{ENDPOINT}/bucket/k",
        headers=[("x-amz-meta-note", "  a   b \t c  "), ("Content-Type", "text/plain;  x=1")],
        body=b"x",
    )
    wire.verify()
    # Re-spacing the value keeps its canonical form...
    wire.with_header("x-amz-meta-note", "a b c").verify()
    # ...but changing it does not.
    expect_error("SignatureDoesNotMatch", wire.with_header("x-amz-meta-note", "a b d").verify)


def test_repeated_headers_are_joined_with_commas(frozen: None) -> None:
    signed = sign_with_botocore(
        "GET", f"{ENDPOINT}/bucket/k", headers=[("x-amz-meta-list", "one,two")]
    )
    split = signed.without_header("x-amz-meta-list")
    split = split.replace(
        header_list=[*split.header_list, ("x-amz-meta-list", "one"), ("x-amz-meta-list", "two")]
    )
    split.verify()


def test_non_latin1_header_values_verify_as_their_utf8_bytes(frozen: None) -> None:
    """A header value beyond Latin-1 goes over the wire as raw UTF-8 (Go's
    and browsers' clients do so), and botocore signs its UTF-8 bytes. It
    verifies as Starlette hands it over (those bytes as Latin-1 text) and in
    a plain mapping of the real text, and it is signed: another value fails."""
    note = "日本語 ключ"
    signed = sign_with_botocore("GET", f"{ENDPOINT}/bucket/k", headers=[("x-amz-meta-note", note)])
    plain = dict(signed.header_list)
    assert plain["x-amz-meta-note"] == note
    assert "x-amz-meta-note" in plain["Authorization"]  # among the signed headers

    # As received: the UTF-8 bytes, which Starlette gives as Latin-1 text.
    signed.with_header("x-amz-meta-note", note.encode().decode("latin-1")).verify()
    # A plain mapping of str values (not Latin-1 text).
    verify_request(signed.method, signed.raw_path, signed.query, plain, CREDENTIALS, now=NOW)
    changed = {**plain, "x-amz-meta-note": "日本語 ключи"}
    expect_error(
        "SignatureDoesNotMatch",
        verify_request,
        signed.method,
        signed.raw_path,
        signed.query,
        changed,
        CREDENTIALS,
        now=NOW,
    )


# ---------------------------------------------------------------------------------- presigned URLs


def test_presigned_get_with_response_overrides(s3: CapturingClient) -> None:
    url = s3.client.generate_presigned_url(
        "get_object",
        Params={
            "Bucket": "bucket",
            "Key": "dir/ü a+b.txt",
            "ResponseContentDisposition": 'attachment; filename="ü a+b.txt"',
            "ResponseContentType": "application/x-custom",
        },
        ExpiresIn=300,
    )
    wire = wire_from_url("GET", url)
    verified = wire.verify()
    assert verified.presigned
    assert verified.payload_mode is PayloadMode.UNSIGNED
    assert verified.expected_sha256 is None
    assert verified.expires_at == NOW + timedelta(seconds=300)
    assert dict(parse_query(wire.query))["response-content-disposition"] == (
        'attachment; filename="ü a+b.txt"'
    )
    # HEAD with the GET URL is a different request.
    expect_error("SignatureDoesNotMatch", wire.replace(method="HEAD").verify)
    # Valid until the end, not after.
    wire.verify(now=NOW + timedelta(seconds=300))
    err = expect_error("AccessDenied", wire.verify, now=NOW + timedelta(seconds=301))
    assert err.message == "Request has expired"


def test_presigned_put(s3: CapturingClient) -> None:
    url = s3.client.generate_presigned_url(
        "put_object", Params={"Bucket": "bucket", "Key": "up load+1"}, ExpiresIn=1200
    )
    wire = wire_from_url("PUT", url, [("Content-Length", "5")])
    verified = wire.verify()
    assert verified.payload_mode is PayloadMode.UNSIGNED
    assert split_path(wire.raw_path) == ("bucket", "up load+1")
    expect_error("SignatureDoesNotMatch", wire.replace(method="GET").verify)


def test_presigned_url_tampering(s3: CapturingClient) -> None:
    url = s3.client.generate_presigned_url(
        "get_object", Params={"Bucket": "bucket", "Key": "k"}, ExpiresIn=60
    )
    wire = wire_from_url("GET", url)
    wire.verify()
    expect_error("SignatureDoesNotMatch", wire.replace(raw_path=b"/bucket/k2").verify)
    expect_error(
        "SignatureDoesNotMatch",
        wire.replace(query=wire.query + b"&response-content-type=text/html").verify,
    )
    longer = wire.query.replace(b"X-Amz-Expires=60", b"X-Amz-Expires=600")
    expect_error("SignatureDoesNotMatch", wire.replace(query=longer).verify)
    # An unsigned x-amz-* header cannot ride along.
    expect_error("AccessDenied", wire.with_header("x-amz-copy-source", "/other/key").verify)
    # Presigned and Authorization at once.
    signed = sign_with_botocore("GET", f"{ENDPOINT}/bucket/k")
    both = wire.with_header("Authorization", signed.header("authorization") or "")
    expect_error("InvalidArgument", both.verify)


def test_presign_limits(frozen: None) -> None:
    url = f"{ENDPOINT}/bucket/k"
    presign_with_botocore("GET", url, expires=604800).verify()
    err = expect_error(
        "AuthorizationQueryParametersError",
        presign_with_botocore("GET", url, expires=604801).verify,
    )
    assert "604800" in err.message
    not_yet = presign_with_botocore("GET", url, expires=60)
    err = expect_error("AccessDenied", not_yet.verify, now=NOW - timedelta(minutes=16))
    assert err.message == "Request is not valid yet"
    not_yet.verify(now=NOW - timedelta(minutes=14))


def test_presign_missing_and_bad_parameters(frozen: None) -> None:
    wire = presign_with_botocore("GET", f"{ENDPOINT}/bucket/k")
    pairs = [p for p in wire.query.split(b"&") if not p.startswith(b"X-Amz-Date=")]
    expect_error("AuthorizationQueryParametersError", wire.replace(query=b"&".join(pairs)).verify)
    bad_algorithm = wire.query.replace(b"AWS4-HMAC-SHA256", b"AWS4-ECDSA-P256-SHA256")
    expect_error("AuthorizationQueryParametersError", wire.replace(query=bad_algorithm).verify)
    twice = wire.query + b"&X-Amz-Date=20261130T080000Z"
    expect_error("AuthorizationQueryParametersError", wire.replace(query=twice).verify)
    bad_sig = wire.query[:-10] + b"zzzzzzzzzz"
    expect_error("AuthorizationQueryParametersError", wire.replace(query=bad_sig).verify)


def test_sigv2_presigned_url_is_left_to_sigv2(frozen: None) -> None:
    client = boto3_client()  # boto3's default presigner for S3 is still SigV2
    url = client.client.generate_presigned_url(
        "get_object", Params={"Bucket": "bucket", "Key": "k"}
    )
    assert "AWSAccessKeyId=" in url
    wire = wire_from_url("GET", url)
    # The gateway sends it to app.http.s3.sigv2 (tests/http/s3/test_sigv2.py serves one).
    assert not is_sigv4_request(wire.headers, wire.query)
    assert is_sigv2_request(wire.headers, wire.query)


# -------------------------------------------------------------------------------------- rejections


def test_tampered_header_path_query_body_hash(s3: CapturingClient) -> None:
    wire = s3.call("put_object", Bucket="bucket", Key="k", Body=b"abc", ContentType="text/plain")
    wire.verify()
    expect_error("SignatureDoesNotMatch", wire.with_header("Content-Type", "text/html").verify)
    expect_error("SignatureDoesNotMatch", wire.replace(raw_path=b"/bucket/K").verify)
    expect_error("SignatureDoesNotMatch", wire.replace(raw_path=b"/bucket/k/").verify)
    expect_error("SignatureDoesNotMatch", wire.replace(raw_path=b"/bucket//k").verify)
    expect_error("SignatureDoesNotMatch", wire.replace(query=b"acl").verify)
    expect_error("SignatureDoesNotMatch", wire.replace(method="POST").verify)
    expect_error("SignatureDoesNotMatch", wire.with_header("Host", "other.test:9000").verify)
    other_hash = hashlib.sha256(b"abd").hexdigest()
    expect_error(
        "SignatureDoesNotMatch", wire.with_header("x-amz-content-sha256", other_hash).verify
    )
    err = expect_error(
        "SignatureDoesNotMatch", wire.with_header("x-amz-checksum-crc32", "AAAAAA==").verify
    )
    assert err.details["AWSAccessKeyId"] == ACCESS_KEY
    assert err.details["CanonicalRequest"].startswith("PUT\n/bucket/k\n\n")
    assert err.details["StringToSign"].startswith("AWS4-HMAC-SHA256\n20261130T080000Z\n")


def test_unsigned_amz_header_is_refused(s3: CapturingClient) -> None:
    wire = s3.call("get_object", Bucket="bucket", Key="k")
    err = expect_error("AccessDenied", wire.with_header("x-amz-meta-added", "1").verify)
    assert "x-amz-meta-added" in err.message
    # Unsigned non-amz headers (proxies, user agents) are fine.
    wire.with_header("X-Forwarded-For", "10.0.0.1").with_header("User-Agent", "other").verify()


def test_skewed_dates(s3: CapturingClient) -> None:
    wire = s3.call("get_object", Bucket="bucket", Key="k")
    wire.verify(now=NOW + timedelta(minutes=15))
    wire.verify(now=NOW - timedelta(minutes=15))
    err = expect_error(
        "RequestTimeTooSkewed", wire.verify, now=NOW + timedelta(minutes=15, seconds=1)
    )
    assert err.details["RequestTime"] == "20261130T080000Z"
    expect_error("RequestTimeTooSkewed", wire.verify, now=NOW - timedelta(hours=2))
    # Naive "now" is UTC.
    wire.verify(now=NOW.replace(tzinfo=None))
    # A moved x-amz-date no longer matches the credential date or the signature.
    expect_error(
        "AuthorizationHeaderMalformed", wire.with_header("x-amz-date", "20261201T080000Z").verify
    )
    expect_error("SignatureDoesNotMatch", wire.with_header("x-amz-date", "20261130T080100Z").verify)
    expect_error("AccessDenied", wire.with_header("x-amz-date", "yesterday").verify)
    expect_error("AccessDenied", wire.without_header("x-amz-date").verify)


def test_unknown_key_wrong_secret_empty_secret(frozen: None) -> None:
    url = f"{ENDPOINT}/bucket/k"
    unknown = sign_with_botocore("GET", url, access_key="AKIDUNKNOWN")
    err = expect_error("InvalidAccessKeyId", unknown.verify)
    assert err.details["AWSAccessKeyId"] == "AKIDUNKNOWN"
    wrong = sign_with_botocore("GET", url, secret_key="not-the-secret")
    expect_error("SignatureDoesNotMatch", wrong.verify)
    # An empty configured secret never verifies, even a request signed with it.
    empty = sign_with_botocore("GET", url, secret_key="")
    expect_error("InvalidAccessKeyId", empty.verify, credentials={ACCESS_KEY: ""})
    presigned = presign_with_botocore("GET", url, access_key="AKIDUNKNOWN")
    expect_error("InvalidAccessKeyId", presigned.verify)
    presigned = presign_with_botocore("GET", url, secret_key="wrong")
    expect_error("SignatureDoesNotMatch", presigned.verify)


def test_regions(frozen: None) -> None:
    url = f"{ENDPOINT}/bucket/k"
    eu = sign_with_botocore("GET", url, region="eu-central-1")
    assert eu.verify().region == "eu-central-1"
    assert eu.verify(region="eu-central-1").scope == "20261130/eu-central-1/s3/aws4_request"
    err = expect_error("AuthorizationHeaderMalformed", eu.verify, region="us-east-1")
    assert err.details == {"Region": "us-east-1"}
    presigned = presign_with_botocore("GET", url, region="eu-central-1")
    err = expect_error("AuthorizationQueryParametersError", presigned.verify, region="us-east-1")
    assert err.details == {"Region": "us-east-1"}


def test_malformed_authorization_headers(frozen: None) -> None:
    wire = sign_with_botocore("GET", f"{ENDPOINT}/bucket/k")
    auth = wire.header("authorization") or ""
    cases = {
        auth.replace("/s3/", "/ec2/"): "AuthorizationHeaderMalformed",
        auth.replace("aws4_request", "aws5_request"): "AuthorizationHeaderMalformed",
        auth.replace("Credential=", "Cred="): "AuthorizationHeaderMalformed",
        auth.replace("/20261130/", "/2026113/"): "AuthorizationHeaderMalformed",
        auth.replace("SignedHeaders=host;", "SignedHeaders="): "AuthorizationHeaderMalformed",
        auth.replace("host;", "Host;"): "AuthorizationHeaderMalformed",
        auth.replace("host;", "x-amz-date;"): "AuthorizationHeaderMalformed",
        auth + ", Signature=00": "AuthorizationHeaderMalformed",
        auth[:-4]: "AuthorizationHeaderMalformed",
        auth.replace("AWS4-HMAC-SHA256 ", "AWS4-HMAC-SHA256X "): "AuthorizationHeaderMalformed",
        "AWS AKID:c2lnbmF0dXJl": "InvalidRequest",
        "AWS4-ECDSA-P256-SHA256 Credential=x": "InvalidRequest",
    }
    for value, code in cases.items():
        expect_error(code, wire.with_header("Authorization", value).verify)
    # Separators without blanks (minio-go's streaming signer) are fine.
    wire.with_header("Authorization", auth.replace(", ", ",")).verify()
    expect_error("AccessDenied", wire.without_header("Authorization").verify)


def test_authorization_fields_in_any_layout_verify_alike(frozen: None) -> None:
    # SDKs write "Credential=..., SignedHeaders=..., Signature=..." (read at
    # once); any other order or spacing of the same fields goes the long way.
    wire = sign_with_botocore("GET", f"{ENDPOINT}/bucket/k")
    algorithm, fields = (wire.header("authorization") or "").split(" ", 1)
    parts = [part.strip() for part in fields.split(",")]
    expected = wire.verify()
    for layout in (
        ", ".join(reversed(parts)),
        " ,  ".join(parts),
        f" {parts[1]},{parts[0]} , {parts[2]} ",
    ):
        assert wire.with_header("Authorization", f"{algorithm} {layout}").verify() == expected
    # Also the long way: a field twice is malformed, wherever it is.
    twice = f"{algorithm} {parts[0]}, {parts[0]}, {parts[1]}, {parts[2]}"
    expect_error("AuthorizationHeaderMalformed", wire.with_header("Authorization", twice).verify)


def test_payload_hash_values(frozen: None) -> None:
    url = f"{ENDPOINT}/bucket/k"
    unsigned = sign_with_botocore("PUT", url, body=b"x", payload="UNSIGNED-PAYLOAD")
    assert unsigned.verify().payload_mode is PayloadMode.UNSIGNED
    for value, mode in [
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", PayloadMode.STREAMING_SIGNED),
        ("STREAMING-UNSIGNED-PAYLOAD-TRAILER", PayloadMode.STREAMING_UNSIGNED_TRAILER),
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", PayloadMode.STREAMING_SIGNED_TRAILER),
    ]:
        wire = sign_with_botocore(
            "PUT",
            url,
            payload=value,
            headers=[
                ("x-amz-decoded-content-length", "5"),
                ("x-amz-trailer", "x-amz-checksum-crc32"),
            ],
        )
        verified = wire.verify()
        assert verified.payload_mode is mode
        assert verified.is_aws_chunked
        assert verified.decoded_content_length == 5
        assert verified.declared_trailers == ("x-amz-checksum-crc32",)
        assert verified.seed_signature == (wire.header("authorization") or "")[-64:]
    upper = hashlib.sha256(b"x").hexdigest().upper()
    wire = sign_with_botocore("PUT", url, body=b"x", payload=upper)
    assert wire.verify().expected_sha256 == upper.lower()
    for value, code in [
        ("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", "NotImplemented"),
        ("sha256-of-something", "InvalidArgument"),
    ]:
        expect_error(code, sign_with_botocore("PUT", url, payload=value).verify)
    bad_length = sign_with_botocore(
        "PUT",
        url,
        payload="STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        headers=[("x-amz-decoded-content-length", "-1")],
    )
    expect_error("InvalidArgument", bad_length.verify)


def test_missing_payload_hash(frozen: None) -> None:
    wire = sign_with_botocore("GET", f"{ENDPOINT}/bucket/k")
    # A signer that does not know S3 signs the SHA-256 of the (empty) body
    # without sending x-amz-content-sha256.
    bare = wire.without_header("x-amz-content-sha256")
    auth = (wire.header("authorization") or "").replace("x-amz-content-sha256;", "")
    expect_error("SignatureDoesNotMatch", bare.with_header("Authorization", auth).verify)
    with_body = bare.with_header("Content-Length", "3").with_header("Authorization", auth)
    expect_error("InvalidRequest", with_body.verify)


def test_bodyless_request_without_payload_header(frozen: None) -> None:
    # botocore's generic SigV4Auth: no x-amz-content-sha256, hash of b"".
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.http.s3.helpers import from_prepared

    request = AWSRequest(method="GET", url=f"{ENDPOINT}/bucket/k")
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    wire = from_prepared(request.prepare())
    assert wire.header("x-amz-content-sha256") is None
    assert wire.verify().expected_sha256 == EMPTY_SHA256


def test_detection() -> None:
    assert auth_kind({"Authorization": "AWS4-HMAC-SHA256 Credential=x"}, b"") == "header"
    assert auth_kind({}, b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0") == "query"
    assert auth_kind({}, "x-id=GetObject&X-Amz-Credential=a") == "query"
    assert auth_kind({"authorization": "AWS a:b"}, b"") is None
    assert not is_sigv4_request({}, b"uploads")


def test_signing_key_cache() -> None:
    derive_signing_key.cache_clear()
    first = derive_signing_key(SECRET_KEY, "20261130", "us-east-1", "s3")
    again = derive_signing_key(SECRET_KEY, "20261130", "us-east-1", "s3")
    assert first == again and len(first) == 32
    info = derive_signing_key.cache_info()
    assert (info.hits, info.misses) == (1, 1)
    assert derive_signing_key(SECRET_KEY, "20261201", "us-east-1", "s3") != first


def test_verified_request_repr_hides_signing_key(s3: CapturingClient) -> None:
    verified = s3.call("get_object", Bucket="bucket", Key="k").verify()
    assert verified.signing_key.hex() not in repr(verified)
    assert "signing_key" not in repr(verified)


def test_many_verifications_are_fast(s3: CapturingClient) -> None:
    wire = s3.call("put_object", Bucket="bucket", Key="k k", Body=b"x")
    headers = wire.headers
    started = datetime.now(UTC)
    for _ in range(2000):
        sigv4.verify_request(wire.method, wire.raw_path, wire.query, headers, CREDENTIALS, now=NOW)
    assert datetime.now(UTC) - started < timedelta(seconds=5)


# ---------------------------------------------------------------------------------------- minio-py


class _Stop(Exception):
    pass


class _CapturingPool(urllib3.PoolManager):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[WireRequest] = []

    def urlopen(  # type: ignore[override]
        self, method: str, url: str, body: Any = None, headers: Any = None, **_: Any
    ) -> Any:
        parts = urlsplit(url)
        header_list = [(k, v) for k, v in (headers or {}).items()]
        self.requests.append(
            WireRequest(
                method,
                (parts.path or "/").encode(),
                parts.query.encode(),
                header_list,
                body or b"",
                url,
            )
        )
        raise _Stop


def _minio() -> tuple[Minio, _CapturingPool]:
    pool = _CapturingPool()
    client = Minio(
        "s3.test:9000",
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        secure=False,
        region="us-east-1",
        http_client=pool,
    )
    return client, pool


@pytest.mark.parametrize("key", ["plain", "with space", "a+b", "ü/日本", "trailing/", "tilde~"])
def test_minio_py_signed_requests(key: str) -> None:
    import io

    client, pool = _minio()
    now = datetime.now(UTC)
    calls: list[Callable[[], object]] = [
        lambda: client.put_object("bucket", key, io.BytesIO(b"hello"), 5),
        lambda: client.get_object("bucket", key, offset=3),
        lambda: client.stat_object("bucket", key),
        lambda: client.remove_object("bucket", key),
        lambda: next(iter(client.list_objects("bucket", prefix=key, recursive=True))),
    ]
    for call in calls:
        with pytest.raises(_Stop):
            call()
        wire = pool.requests[-1]
        verified = wire.verify(now=now)
        assert verified.access_key == ACCESS_KEY
    put = pool.requests[0]
    assert split_path(put.raw_path) == ("bucket", key)
    assert put.verify(now=now).expected_sha256 == hashlib.sha256(b"hello").hexdigest()


def test_minio_py_presigned_get() -> None:
    client, _ = _minio()
    url = client.presigned_get_object(
        "bucket",
        "dir/ü a+b.txt",
        expires=timedelta(minutes=5),
        response_headers={"response-content-disposition": 'attachment; filename="x y"'},
        request_date=NOW,
    )
    wire = wire_from_url("GET", url)
    verified = wire.verify()
    assert verified.presigned
    assert split_path(wire.raw_path) == ("bucket", "dir/ü a+b.txt")
    expect_error("AccessDenied", wire.verify, now=NOW + timedelta(minutes=6))
    put_url = client.presigned_put_object("bucket", "k", expires=timedelta(days=7))
    wire_from_url("PUT", put_url).verify(now=datetime.now(UTC))


def test_quote_matches_botocore_key_encoding() -> None:
    # What the routes can rely on: botocore, minio-go and aws-sdk-go put the
    # canonical URI on the wire.
    for key in KEYS:
        path = "/bucket/" + quote(key, safe="/~")
        assert canonical_uri(path.encode()) == path


# --- presigned URLs the service makes itself (the web page's bucket links) ---------


@given(
    key=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=60,
    ),
    disposition=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
)
def test_a_presigned_get_the_service_makes_verifies_for_its_key_only(
    key: str, disposition: str
) -> None:
    url = presign_get(
        ENDPOINT,
        "bucket",
        key,
        access_key=ACCESS_KEY,
        secret=SECRET_KEY,
        region="us-east-1",
        now=NOW,
        expires_seconds=900,
        response_params={"response-content-disposition": disposition},
    )
    wire = wire_from_url("GET", url)
    verified = wire.verify()
    assert verified.presigned
    assert verified.expires_at == NOW + timedelta(seconds=900)
    assert split_path(wire.raw_path) == ("bucket", key)
    assert dict(parse_query(wire.query))["response-content-disposition"] == disposition
    # Until it expires, and only for this object, this method and these overrides.
    wire.verify(now=NOW + timedelta(seconds=900))
    err = expect_error("AccessDenied", wire.verify, now=NOW + timedelta(seconds=901))
    assert err.message == "Request has expired"
    expect_error("SignatureDoesNotMatch", wire.replace(raw_path=wire.raw_path + b"x").verify)
    expect_error("SignatureDoesNotMatch", wire.replace(method="HEAD").verify)
    expect_error(
        "SignatureDoesNotMatch",
        wire.replace(query=wire.query + b"&response-content-type=text/html").verify,
    )


def test_a_presigned_path_survives_a_browser_resolving_dots() -> None:
    url = presign_get(
        ENDPOINT,
        "bucket",
        "a/../b/./c",
        access_key=ACCESS_KEY,
        secret=SECRET_KEY,
        region="us-east-1",
        now=NOW,
        expires_seconds=60,
    )
    assert "/../" not in url and "/./" not in url
    wire = wire_from_url("GET", url)
    wire.verify()
    assert split_path(wire.raw_path) == ("bucket", "a/../b/./c")
    with pytest.raises(ValueError):
        presign_get(
            ENDPOINT,
            "bucket",
            "k",
            access_key=ACCESS_KEY,
            secret=SECRET_KEY,
            region="us-east-1",
            now=NOW,
            expires_seconds=604801,
        )
