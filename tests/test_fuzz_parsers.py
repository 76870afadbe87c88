"""Every parser of client input is total: for any input it returns a value or
raises its own 4xx error, never anything else (hypothesis)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import unquote

import h11
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.http.api.errors import ApiError
from app.http.api.files import parse_id_cursor
from app.http.api.tus_headers import parse_length
from app.http.s3 import post_policy, sigv4
from app.http.s3.aws_chunked import decode_aws_chunked
from app.http.s3.errors import S3Error
from app.http.s3.names import split_path, validate_bucket_name, validate_object_key
from app.http.s3.payload import request_body
from app.http.s3.sigv4 import PayloadMode, VerifiedRequest, parse_query, verify_request
from app.http.s3.sigv4 import checks as sigv4_checks
from app.http.s3.xml.parsing import (
    parse_complete_multipart,
    parse_create_bucket_configuration,
    parse_delete_objects,
)
from app.http.s3.xml.writer import escape
from app.http.shared.conditions import parse_http_date, range_applies
from app.http.shared.disposition import content_disposition
from app.http.shared.forms import FormError, StreamingForm
from app.http.shared.header_names import is_header_name
from app.http.shared.parsing import parse_decimal
from app.http.shared.ranges import (
    RangeNotSatisfiable,
    parse_range,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
CREDENTIALS = {"AKIDFUZZ": "fuzz-secret-0123456789"}

# Text that is mostly what a parser expects, with the characters that broke
# parsers before: other scripts' digits, superscripts, NUL, non-ASCII.
DIGITISH = st.sampled_from(list("0123456789-=,; \t²٣\u09ea\uff10_+xé\x00"))
numberish = st.one_of(
    st.text(DIGITISH, max_size=30),
    st.text(max_size=30),
    st.integers(min_value=0, max_value=10**30).map(str),
    st.just("9" * 5000),
)


@FUZZ
@given(numberish)
def test_parse_decimal(text: str) -> None:
    value = parse_decimal(text)
    if value is not None:
        assert text.isascii() and text.isdigit() and value == int(text)


@FUZZ
@given(st.one_of(numberish.map(lambda t: "bytes=" + t), st.text()), st.integers(0, 10**12))
def test_parse_range(header: str, size: int) -> None:
    try:
        byte_range = parse_range(header, size)
    except RangeNotSatisfiable as exc:
        assert exc.size == size
        return
    if byte_range is not None:
        assert 0 <= byte_range.start < byte_range.end <= size


@FUZZ
@given(st.text(max_size=60), st.text(max_size=60))
def test_conditional_headers(if_range: str, date: str) -> None:
    parse_http_date(date)
    range_applies({"if-range": if_range}, etag='"x"', last_modified=NOW)


@FUZZ
@given(st.text(max_size=300))
def test_content_disposition_is_a_valid_header_value(name: str) -> None:
    value = content_disposition(name)
    assert value.isascii() and "\n" not in value and "\r" not in value
    # No bidi control reaches the saved name: "a\u202egnp.exe" is not "aexe.png".
    shown = unquote(value.partition("filename*=UTF-8''")[2])
    assert not set(shown) & set(BIDI_CONTROLS)


BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@FUZZ
@given(st.text(st.sampled_from("ab.\u202e\u2067\u200f"), max_size=20))
def test_content_disposition_of_a_spoofed_name_shows_its_controls(name: str) -> None:
    shown = unquote(content_disposition(name).partition("filename*=UTF-8''")[2])
    assert not set(shown) & set(BIDI_CONTROLS)


@FUZZ
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode()))
def test_split_path(raw: bytes) -> None:
    try:
        bucket, key = split_path(b"/" + raw)
        if bucket is not None:
            validate_bucket_name(bucket)
        if key is not None:
            validate_object_key(key)
    except S3Error as exc:
        assert 400 <= exc.status < 500


QUERY_NAMES = st.sampled_from(
    [
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Content-Sha256",
    ]
)
GOOD_PRESIGN = {
    "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
    "X-Amz-Credential": "AKIDFUZZ/20261130/us-east-1/s3/aws4_request",
    "X-Amz-Date": "20261130T080000Z",
    "X-Amz-Expires": "3600",
    "X-Amz-SignedHeaders": "host",
    "X-Amz-Signature": "0" * 64,
}


@FUZZ
@given(st.dictionaries(QUERY_NAMES, st.one_of(numberish, st.text(max_size=80)), max_size=4))
def test_presigned_queries(changes: dict[str, str]) -> None:
    from urllib.parse import urlencode

    query = urlencode({**GOOD_PRESIGN, **changes})
    try:
        verify_request("GET", b"/b/k", query, {"host": "h"}, CREDENTIALS, now=NOW)
    except S3Error as exc:
        assert 400 <= exc.status < 500


HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=120)


@FUZZ
@given(
    st.one_of(
        HEADER_TEXT.map(lambda t: "AWS4-HMAC-SHA256 " + t),
        st.builds(
            "AWS4-HMAC-SHA256 Credential={}, SignedHeaders={}, Signature={}".format,
            HEADER_TEXT,
            HEADER_TEXT,
            HEADER_TEXT,
        ),
    ),
    HEADER_TEXT,
    HEADER_TEXT,
    st.binary(max_size=80),
)
def test_authorization_headers(
    authorization: str, amz_date: str, payload_hash: str, query: bytes
) -> None:
    headers = {
        "host": "h",
        "authorization": authorization,
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_hash,
        "x-amz-decoded-content-length": amz_date,
    }
    try:
        verify_request("PUT", b"/b/k", query, headers, CREDENTIALS, now=NOW)
    except S3Error as exc:
        assert 400 <= exc.status < 500


@FUZZ
@given(HEADER_TEXT | numberish)
def test_decoded_content_length(value: str) -> None:
    try:
        number = sigv4_checks.int_header({"x-length": [value]}, "x-length")
    except S3Error as exc:
        assert exc.code == "InvalidArgument"
    else:
        assert number == int(value.strip())


@FUZZ
@given(st.binary(max_size=300))
def test_query_parsing(query: bytes) -> None:
    parse_query(query)
    sigv4.canonical_query_string(query)
    sigv4.auth_kind({}, query)


def _verified(mode: PayloadMode, trailers: tuple[str, ...]) -> VerifiedRequest:
    return VerifiedRequest(
        access_key="AKIDFUZZ",
        payload_mode=mode,
        expected_sha256=None,
        amz_date="20261130T080000Z",
        scope="20261130/us-east-1/s3/aws4_request",
        region="us-east-1",
        seed_signature="0" * 64,
        signing_key=b"k" * 32,
        declared_trailers=trailers,
    )


CHUNKED_PIECES = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from(
            [
                b"5\r\nhello\r\n",
                b"0\r\n\r\n",
                b"0\r\n",
                b"5;chunk-signature=" + b"0" * 64 + b"\r\n",
                b";chunk-signature=" + "é".encode() * 32 + b"\r\n",
                b"x-amz-checksum-crc64nvme:AAAAAAAAAAA=\r\n",
                b"x-amz-checksum-crc32:AAAAAA==\n",
                b"x-amz-trailer-signature:" + b"\xff" * 64 + b"\r\n",
                b"\r\n",
                b"ffffffffffffffff\r\n",
            ]
        ),
    ),
    max_size=8,
)


async def _pieces(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def _drain(stream: AsyncIterator[bytes]) -> None:
    async for _ in stream:
        pass


@FUZZ
@given(
    CHUNKED_PIECES,
    st.sampled_from(
        [
            PayloadMode.STREAMING_SIGNED,
            PayloadMode.STREAMING_SIGNED_TRAILER,
            PayloadMode.STREAMING_UNSIGNED_TRAILER,
        ]
    ),
    st.sampled_from([(), ("x-amz-checksum-crc32",), ("x-amz-checksum-crc64nvme",)]),
    st.none() | st.integers(0, 20),
)
def test_aws_chunked_bodies(
    pieces: list[bytes],
    mode: PayloadMode,
    trailers: tuple[str, ...],
    length: int | None,
) -> None:
    verified = _verified(mode, trailers)
    stream = decode_aws_chunked(
        _pieces(pieces),
        signed=verified if verified.chunks_signed else None,
        decoded_length=length,
        trailer=verified.has_trailer,
        declared_trailers=trailers,
    )
    try:
        asyncio.run(_drain(stream))
    except S3Error as exc:
        assert 400 <= exc.status < 500


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "content-md5",
                "x-amz-checksum-crc32",
                "x-amz-checksum-crc64nvme",
                "x-amz-checksum-sha256",
                "x-amz-checksum-bogus",
            ]
        ),
        HEADER_TEXT,
    )
)
def test_digest_headers(headers: dict[str, str]) -> None:
    verified = _verified(PayloadMode.UNSIGNED, ())
    try:
        asyncio.run(_drain(request_body(_pieces([b"body"]), verified, headers)))
    except S3Error as exc:
        assert 400 <= exc.status < 500


XML_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            "<CompleteMultipartUpload><Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>"
            "</CompleteMultipartUpload>".format,
            numberish.map(escape),
            XML_TEXT.map(escape),
        ).map(str.encode),
        st.builds(
            "<Delete><Quiet>{}</Quiet><Object><Key>{}</Key></Object></Delete>".format,
            XML_TEXT.map(escape),
            XML_TEXT.map(escape),
        ).map(str.encode),
        st.builds(
            "<CreateBucketConfiguration><LocationConstraint>{}</LocationConstraint>"
            "</CreateBucketConfiguration>".format,
            XML_TEXT.map(escape),
        ).map(str.encode),
        # A declaration naming an encoding Python does not know, or one the
        # bytes are not in.
        st.builds(
            '<?xml version="1.0" encoding="{}"?><Delete><Object><Key>k</Key>'
            "</Object></Delete>".format,
            st.sampled_from(["nope-9", "utf-16", "utf-32", "cp037", "x"]) | st.text(max_size=12),
        ).map(lambda text: text.encode("utf-8", "surrogatepass")),
    )
)
@example(b'<?xml version="1.0" encoding="nope-9"?><Delete/>')
def test_xml_bodies(body: bytes) -> None:
    for parse in (
        parse_complete_multipart,
        parse_delete_objects,
        parse_create_bucket_configuration,
    ):
        try:
            parse(body)
        except S3Error as exc:
            assert 400 <= exc.status < 500


BOUNDARY = "fuzzb"
FORM_PIECES = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from(
            [
                f"--{BOUNDARY}\r\n".encode(),
                f"--{BOUNDARY}--\r\n".encode(),
                b'Content-Disposition: form-data; name="file"; filename="a"\r\n',
                b'Content-Disposition: form-data; name="fileName"\r\n',
                b'Content-Disposition: form-data; name="\xff\xfe"; filename*=x\r\n',
                b"Content-Type: " + b"t" * 300 + b"\r\n",
                b"\r\n",
                b"data",
            ]
        ),
    ),
    max_size=12,
)


@FUZZ
@given(
    st.one_of(
        st.just(f"multipart/form-data; boundary={BOUNDARY}"),
        st.just("multipart/form-data; boundary=" + "b" * 300),
        st.text(max_size=80),
        HEADER_TEXT.map(lambda t: "multipart/form-data; " + t),
    ),
    FORM_PIECES,
)
def test_forms(content_type: str, pieces: list[bytes]) -> None:
    try:
        form = StreamingForm(content_type)
        asyncio.run(_drain(form.file_bytes(_pieces(pieces))))
    except FormError as exc:
        assert exc.status in (400, 413)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
policy_documents = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"expiration": st.one_of(st.just("2999-01-01T00:00:00Z"), st.text(max_size=30))},
        optional={"conditions": st.lists(json_values, max_size=6)},
    ),
)


@FUZZ
@given(
    document=policy_documents,
    raw=st.one_of(st.none(), st.text(max_size=60)),
    fields=st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=6),
)
def test_a_post_policy_is_accepted_or_refused_with_an_s3_error(
    document: object, raw: str | None, fields: dict[str, str]
) -> None:
    encoded = raw if raw is not None else base64.b64encode(json.dumps(document).encode()).decode()
    try:
        policy = post_policy.decode_policy(encoded)
        post_policy.check_fields(policy, {k.lower(): v for k, v in fields.items()}, "bucket")
    except S3Error as exc:
        assert 400 <= exc.status < 500


@FUZZ
@given(
    fields=st.dictionaries(
        st.sampled_from(
            [
                "policy",
                "x-amz-signature",
                "x-amz-algorithm",
                "x-amz-credential",
                "awsaccesskeyid",
                "signature",
                "key",
            ]
        ),
        st.text(max_size=80),
    )
)
def test_a_post_forms_signature_fields_are_checked_without_a_crash(fields: dict[str, str]) -> None:
    try:
        post_policy.authorize(fields, CREDENTIALS, now=NOW, region="us-east-1")
    except S3Error as exc:
        assert 400 <= exc.status < 500


@FUZZ
@given(st.one_of(st.text(max_size=40), st.integers(min_value=-(2**70), max_value=2**70).map(str)))
def test_the_id_cursor_of_a_listing_is_a_row_id_or_a_400(cursor: str) -> None:
    try:
        row_id = parse_id_cursor(cursor)
    except ApiError as exc:
        assert exc.status == 400
        return
    assert 0 <= row_id <= 2**63 - 1
    assert parse_id_cursor(str(row_id)) == row_id


@FUZZ
@given(st.text(max_size=40) | st.from_regex(r"[0-9]{15,25}", fullmatch=True))
def test_tus_numbers(value: str) -> None:
    try:
        parsed = parse_length(value, "Upload-Offset")
    except ApiError as exc:
        assert exc.status == 400
        assert parse_decimal(value) is None
    else:
        assert parsed == parse_decimal(value)


@FUZZ
@given(st.text(max_size=30))
def test_a_header_name_is_exactly_what_h11_accepts_as_one(name: str) -> None:
    # h11 (an independent HTTP implementation) as the judge of header names.
    try:
        h11.Response(status_code=200, headers=[(name, "v")])
    except (h11.LocalProtocolError, UnicodeEncodeError):
        accepted = False
    else:
        accepted = True
    assert is_header_name(name) == accepted
