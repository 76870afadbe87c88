"""SigV4 in the ``Authorization`` header: ``AWS4-HMAC-SHA256 Credential=...,
SignedHeaders=..., Signature=...`` with ``x-amz-date`` (or ``Date``) within
:data:`~app.http.s3.sigv4.signing.MAX_SKEW` of now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Final

from app.http.s3.errors import S3Error
from app.http.s3.sigv4.canonical import first_header, query_candidates
from app.http.s3.sigv4.checks import (
    Credential,
    check_region,
    checked,
    lookup_secret,
    parse_credential,
    parse_signed_headers,
)
from app.http.s3.sigv4.request import HEX64_RE, VerifiedRequest
from app.http.s3.sigv4.signing import (
    ALGORITHM,
    EMPTY_SHA256,
    MAX_SKEW,
    as_utc,
    format_amz_date,
    iso8601,
    parse_amz_date,
)

# The header as every SDK writes it: the three fields in this order, a comma
# and a blank between them. Matched at once; any other layout (a field
# elsewhere, more blanks, a bad signature) goes through the field parser.
_USUAL_LAYOUT: Final = re.compile(
    ALGORITHM + r" Credential=([^,\s]+), ?SignedHeaders=([^,\s]+), ?Signature=([0-9a-fA-F]{64})"
)


def _parse_authorization(value: str) -> tuple[Credential, tuple[str, ...], str]:
    code = "AuthorizationHeaderMalformed"
    usual = _USUAL_LAYOUT.fullmatch(value)
    if usual is not None:
        credential, signed_headers, signature = usual.groups()
        return (
            parse_credential(credential, code),
            parse_signed_headers(signed_headers, code),
            signature,
        )
    rest = value[len(ALGORITHM) :]
    if not rest[:1].isspace():
        raise S3Error(code, "The authorization header is malformed; unsupported algorithm.")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, field_value = part.partition("=")
        name = name.strip()
        if not sep or name in fields:
            raise S3Error(code, f"The authorization header is malformed near {name!r}.")
        fields[name] = field_value.strip()
    missing = [n for n in ("Credential", "SignedHeaders", "Signature") if n not in fields]
    if missing:
        raise S3Error(code, f"The authorization header is malformed; missing {', '.join(missing)}.")
    signature = fields["Signature"]
    if not HEX64_RE.fullmatch(signature):
        raise S3Error(code, "The authorization header is malformed; bad Signature.")
    credential = parse_credential(fields["Credential"], code)
    return credential, parse_signed_headers(fields["SignedHeaders"], code), signature


def _has_body(collected: Mapping[str, list[str]]) -> bool:
    if collected.get("transfer-encoding"):
        return True
    length = first_header(collected, "content-length")
    return length is not None and length.strip() not in ("", "0")


def verify_header(
    method: str,
    raw_path: bytes,
    query_string: bytes | str,
    collected: Mapping[str, list[str]],
    credentials: Mapping[str, str],
    now: datetime,
    region: str | None,
) -> VerifiedRequest:
    code = "AuthorizationHeaderMalformed"
    credential, signed_headers, signature = _parse_authorization(
        first_header(collected, "authorization") or ""
    )
    check_region(credential, region, code)

    amz_date_header = first_header(collected, "x-amz-date")
    amz_date: str | None = None
    if amz_date_header is not None:
        # Signed as sent; valid means it is already YYYYMMDDTHHMMSSZ.
        amz_date = amz_date_header.strip()
        request_time = parse_amz_date(amz_date)
    else:
        date_header = first_header(collected, "date")
        try:
            request_time = parsedate_to_datetime(date_header) if date_header else None
        except (TypeError, ValueError):
            request_time = None
        if request_time is not None:
            request_time = as_utc(request_time)
    if request_time is None:
        raise S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    if amz_date is None:
        amz_date = format_amz_date(request_time)
    if credential.date != amz_date[:8]:
        raise S3Error(
            code,
            f"Invalid credential date {credential.date!r}. Date is not the same as X-Amz-Date.",
        )

    secret = lookup_secret(credentials, credential.access_key)

    if abs(now - request_time) > MAX_SKEW:
        raise S3Error(
            "RequestTimeTooSkewed",
            details={
                "RequestTime": amz_date,
                "ServerTime": iso8601(now),
                "MaxAllowedSkewMilliseconds": str(int(MAX_SKEW.total_seconds() * 1000)),
            },
        )

    payload_hash = first_header(collected, "x-amz-content-sha256")
    if payload_hash is None:
        if _has_body(collected):
            raise S3Error(
                "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
            )
        payload_hash = EMPTY_SHA256
    payload_hash = payload_hash.strip()
    return checked(
        method,
        raw_path,
        query_candidates(query_string),
        collected,
        credential=credential,
        secret=secret,
        signed_headers=signed_headers,
        signature=signature,
        payload_hash=payload_hash,
        amz_date=amz_date,
    )
