"""AWS Signature Version 2, as older clients and some proxies still sign.

Two forms: the header ``Authorization: AWS <access key>:<signature>`` and the
presigned query ``AWSAccessKeyId``, ``Signature``, ``Expires`` (what boto3's
``generate_presigned_url`` makes unless told to use SigV4). The signature is
base64 HMAC-SHA1 over::

    METHOD \\n Content-MD5 \\n Content-Type \\n Date-or-Expires \\n
    x-amz-* headers (lowercased, sorted, "name:value\\n" each)
    resource (the raw path, with the bucket for virtual hosts, then the
    sub-resources of the query, sorted)

Only the request line and those headers are signed, never the body (a
Content-MD5, if sent, is still verified by `payload.py`). The rules that
SigV4 keeps apply too: the date must be within MAX_SKEW of the server's
clock, a presigned URL must not have expired nor be valid for more than
MAX_PRESIGN_EXPIRES seconds, and signatures are compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import unquote

from starlette.datastructures import Headers

from app.http.s3.errors import S3Error, redact_signed_text
from app.http.s3.sigv4 import (
    MAX_PRESIGN_EXPIRES,
    MAX_SKEW,
    PayloadMode,
    VerifiedRequest,
    format_amz_date,
)
from app.http.shared.conditions import parse_http_date
from app.http.shared.parsing import parse_decimal

PREFIX: Final = "AWS "
#: SigV2 names no region; the request's is recorded as S3's default one.
UNNAMED_REGION: Final = "us-east-1"
#: Query parameters that are part of the signed resource (what S3 and the
#: SDKs sign: sub-resources and response overrides).
SUB_RESOURCES: Final = frozenset(
    {
        "accelerate",
        "acl",
        "analytics",
        "cors",
        "delete",
        "inventory",
        "lifecycle",
        "location",
        "logging",
        "metrics",
        "notification",
        "object-lock",
        "partNumber",
        "policy",
        "replication",
        "requestPayment",
        "response-cache-control",
        "response-content-disposition",
        "response-content-encoding",
        "response-content-language",
        "response-content-type",
        "response-expires",
        "restore",
        "select",
        "select-type",
        "tagging",
        "torrent",
        "uploadId",
        "uploads",
        "versionId",
        "versioning",
        "versions",
        "website",
    }
)
_PRESIGN_PARAMS: Final = frozenset({"AWSAccessKeyId", "Signature"})


def is_sigv2_request(headers: Mapping[str, str], query: bytes) -> bool:
    """Whether the request carries SigV2 authentication (header or presigned)."""
    if headers.get("authorization", "").startswith(PREFIX):
        return True
    if not query:
        return False
    names = {piece.partition(b"=")[0] for piece in query.split(b"&")}
    return {name.encode() for name in _PRESIGN_PARAMS} <= names


def verify_sigv2(
    method: str,
    raw_path: bytes,
    query_string: bytes,
    headers: Headers,
    credentials: Mapping[str, str],
    *,
    now: datetime,
    region: str | None,
    virtual_bucket: str | None = None,
) -> VerifiedRequest:
    """Check a SigV2 signature; raise :class:`S3Error` if it fails."""
    query = _raw_query(query_string)
    authorization = headers.get("authorization")
    presigned = "Signature" in query
    if authorization is not None and presigned:
        raise S3Error(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the Signature query parameter or the "
            "Authorization header should be specified.",
        )
    expires_at: datetime | None = None
    if presigned:
        access_key = _value(query.get("AWSAccessKeyId", ""))
        provided = _value(query["Signature"])
        date_line = _value(query.get("Expires", ""))
        expires_at = _check_expiry(date_line, now)
    else:
        assert authorization is not None
        access_key, provided = _parse_authorization(authorization)
        date_line = headers.get("date", "").strip()
        _check_date(headers.get("x-amz-date") or date_line, now)
    secret = credentials.get(access_key)
    # An empty secret would make every signature "verify" with a guessable key.
    if not secret:
        raise S3Error("InvalidAccessKeyId", details={"AWSAccessKeyId": access_key[:128]})
    string_to_sign = _string_to_sign(
        method, raw_path, query, headers, date_line, presigned, virtual_bucket
    )
    expected = base64.b64encode(
        hmac.new(secret.encode(), string_to_sign.encode("utf-8"), hashlib.sha1).digest()
    )
    if not hmac.compare_digest(expected, provided.encode("utf-8", "replace")):
        raise S3Error(
            "SignatureDoesNotMatch",
            details={
                "AWSAccessKeyId": access_key[:128],
                # Without the secrets it signed (an SSE-C key is an x-amz header).
                "StringToSign": redact_signed_text(string_to_sign),
            },
        )
    return VerifiedRequest(
        access_key=access_key,
        payload_mode=PayloadMode.UNSIGNED,
        expected_sha256=None,
        amz_date=format_amz_date(now),
        scope="",
        region=region or UNNAMED_REGION,
        seed_signature="",
        signing_key=b"",
        presigned=presigned,
        expires_at=expires_at,
    )


def _raw_query(query_string: bytes) -> dict[str, str]:
    """Names decoded, values as the client sent them (still percent-encoded,
    and with their "=" if they had one: `?uploads` and `?uploads=` are signed
    differently); the first of a repeated name counts."""
    query: dict[str, str] = {}
    for piece in query_string.decode("latin-1").split("&"):
        if piece:
            name, equals, value = piece.partition("=")
            query.setdefault(unquote(name), equals + value)
    return query


def _value(raw: str) -> str:
    """A query value from `_raw_query`, decoded."""
    return unquote(raw.removeprefix("=").replace("+", " "))


def _parse_authorization(value: str) -> tuple[str, str]:
    access_key, colon, signature = value[len(PREFIX) :].strip().rpartition(":")
    if not colon or not access_key or not signature:
        raise S3Error(
            "InvalidArgument",
            "AWS authorization header is invalid. Expected AwsAccessKeyId:signature",
        )
    return access_key, signature


def _check_date(value: str, now: datetime) -> None:
    when = parse_http_date(value) if value else None
    if when is None:
        raise S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    if abs(now - when) > MAX_SKEW:
        raise S3Error(
            "RequestTimeTooSkewed",
            details={
                "RequestTime": value[:64],
                "MaxAllowedSkewMilliseconds": str(int(MAX_SKEW.total_seconds() * 1000)),
            },
        )


def _check_expiry(value: str, now: datetime) -> datetime:
    seconds = parse_decimal(value.strip(), max_digits=12)
    if seconds is None:
        raise S3Error("AccessDenied", "Expires must be a number of seconds since the epoch.")
    # Checked before a datetime is made: a year past 9999 has none.
    if seconds - now.timestamp() > MAX_PRESIGN_EXPIRES:
        raise S3Error(
            "AuthorizationQueryParametersError",
            f"Expires must be less than a week ({MAX_PRESIGN_EXPIRES} seconds) from now.",
        )
    expires_at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    if now > expires_at:
        raise S3Error("AccessDenied", "Request has expired", details={"Expires": value[:32]})
    return expires_at


def _string_to_sign(
    method: str,
    raw_path: bytes,
    query: Mapping[str, str],
    headers: Headers,
    date_line: str,
    presigned: bool,
    virtual_bucket: str | None,
) -> str:
    def signed_value(name: str) -> str:
        # A presigned URL carries its signed headers in the query.
        if presigned and name in query:
            return _value(query[name]).strip()
        return headers.get(name, "").strip()

    amz: dict[str, str] = {}
    for name in headers:
        lower = name.lower()
        if lower.startswith("x-amz-"):
            amz[lower] = ",".join(v.strip() for v in headers.getlist(lower))
    if presigned:
        for name, value in query.items():
            if name.lower().startswith("x-amz-"):
                amz[name.lower()] = _value(value).strip()
    lines = [method.upper(), signed_value("content-md5"), signed_value("content-type"), date_line]
    lines += [f"{name}:{amz[name]}" for name in sorted(amz)]
    resource = raw_path.decode("latin-1")
    if virtual_bucket is not None:
        resource = f"/{virtual_bucket}{resource}"
    sub = sorted((name, value) for name, value in query.items() if name in SUB_RESOURCES)
    if sub:
        resource += "?" + "&".join(
            name + ("=" + unquote(value[1:]) if value else "") for name, value in sub
        )
    lines.append(resource)
    return "\n".join(lines)
