"""SigV4 presigned URLs: ``X-Amz-Algorithm``, ``X-Amz-Credential``,
``X-Amz-Date``, ``X-Amz-Expires`` (at most :data:`MAX_PRESIGN_EXPIRES`),
``X-Amz-SignedHeaders`` and ``X-Amz-Signature`` in the query; the payload is
``UNSIGNED-PAYLOAD`` unless ``X-Amz-Content-Sha256`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final

from app.http.s3.errors import S3Error
from app.http.s3.sigv4.canonical import parse_query, query_candidates
from app.http.s3.sigv4.checks import (
    check_region,
    checked,
    lookup_secret,
    parse_credential,
    parse_signed_headers,
)
from app.http.s3.sigv4.request import HEX64_RE, UNSIGNED_PAYLOAD, VerifiedRequest
from app.http.s3.sigv4.signing import ALGORITHM, MAX_SKEW, iso8601, parse_amz_date
from app.http.shared.parsing import parse_decimal

#: Longest validity of a presigned URL, in seconds (seven days).
MAX_PRESIGN_EXPIRES: Final = 604800

#: Query parameters that belong to presigned-URL authentication, not to the
#: operation; routes should ignore them when dispatching on sub-resources.
AUTH_QUERY_PARAMS: Final = frozenset(
    {
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "X-Amz-Content-Sha256",
    }
)


def verify_presigned(
    method: str,
    raw_path: bytes,
    query_string: bytes | str,
    collected: Mapping[str, list[str]],
    credentials: Mapping[str, str],
    now: datetime,
    region: str | None,
) -> VerifiedRequest:
    code = "AuthorizationQueryParametersError"
    params: dict[str, str] = {}
    for name, value in parse_query(query_string):
        if name in AUTH_QUERY_PARAMS:
            if name in params:
                raise S3Error(code, f"The {name} parameter is given twice.")
            params[name] = value
    required = (
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Signature",
        "X-Amz-Date",
        "X-Amz-SignedHeaders",
        "X-Amz-Expires",
    )
    if any(name not in params for name in required):
        raise S3Error(
            code,
            "Query-string authentication version 4 requires the X-Amz-Algorithm, "
            "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
            "X-Amz-Expires parameters.",
        )
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise S3Error(code, 'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')
    credential = parse_credential(params["X-Amz-Credential"], code)
    check_region(credential, region, code)
    signed_headers = parse_signed_headers(params["X-Amz-SignedHeaders"], code)
    signature = params["X-Amz-Signature"]
    if not HEX64_RE.fullmatch(signature):
        raise S3Error(code, "X-Amz-Signature must be 64 hexadecimal digits.")
    request_time = parse_amz_date(params["X-Amz-Date"])
    if request_time is None:
        raise S3Error(
            code, "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        )
    amz_date = params["X-Amz-Date"]
    if credential.date != amz_date[:8]:
        raise S3Error(
            code,
            f"Invalid credential date {credential.date!r}. Date is not the same as X-Amz-Date.",
        )
    expires_text = params["X-Amz-Expires"]
    expires = parse_decimal(expires_text, max_digits=10)
    if expires is None:
        raise S3Error(code, "X-Amz-Expires should be a number")
    if expires > MAX_PRESIGN_EXPIRES:
        raise S3Error(
            code,
            "X-Amz-Expires must be less than a week (in seconds) that is 604800",
        )

    secret = lookup_secret(credentials, credential.access_key)

    # Checked first: a date in year 9999 has no expiry datetime can hold.
    if request_time - now > MAX_SKEW:
        raise S3Error("AccessDenied", "Request is not valid yet")
    expires_at = request_time + timedelta(seconds=expires)
    if now > expires_at:
        raise S3Error(
            "AccessDenied",
            "Request has expired",
            details={
                "X-Amz-Expires": expires_text,
                "Expires": iso8601(expires_at),
                "ServerTime": iso8601(now),
            },
        )

    return checked(
        method,
        raw_path,
        query_candidates(query_string, exclude=("X-Amz-Signature",)),
        collected,
        credential=credential,
        secret=secret,
        signed_headers=signed_headers,
        signature=signature,
        payload_hash=params.get("X-Amz-Content-Sha256", UNSIGNED_PAYLOAD),
        amz_date=amz_date,
        expires_at=expires_at,
    )
