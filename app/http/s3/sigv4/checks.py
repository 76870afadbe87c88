"""What both forms of SigV4 (header and presigned query) check the same way:
the credential scope, the signed header list, the access key, the headers
that must be signed, and the signature over the canonical request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from app.http.s3.errors import S3Error, redact_signed_text
from app.http.s3.sigv4.canonical import canonical_requests, first_header, string_to_sign
from app.http.s3.sigv4.request import VerifiedRequest, payload_mode
from app.http.s3.sigv4.signing import (
    SERVICE,
    TERMINATOR,
    derive_signing_key,
    sign_hex,
    signatures_equal,
)
from app.http.shared.parsing import parse_decimal

_SIGNED_HEADER_RE: Final = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")


@dataclass(frozen=True, slots=True)
class Credential:
    access_key: str
    date: str
    region: str
    service: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{TERMINATOR}"


# The credential and the signed header list of a client repeat from request
# to request (a day's scope, the SDK's header set): parsed once each. Only
# what parses is kept; a bad value raises every time.
@functools.lru_cache(maxsize=256)
def parse_credential(value: str, error_code: str) -> Credential:
    parts = value.rsplit("/", 4)
    if len(parts) != 5 or not parts[0] or parts[4] != TERMINATOR:
        raise S3Error(
            error_code,
            "The credential is malformed; expecting "
            '"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".',
        )
    access_key, date, region, service, _ = parts
    if len(date) != 8 or parse_decimal(date, max_digits=8) is None:
        raise S3Error(error_code, f"Invalid credential date {date!r}; expecting YYYYMMDD.")
    if not region:
        raise S3Error(error_code, "The credential has an empty region.")
    if service != SERVICE:
        raise S3Error(
            error_code,
            f"The credential is malformed; incorrect service {service!r}. "
            f"This endpoint belongs to {SERVICE!r}.",
        )
    return Credential(access_key, date, region, service)


@functools.lru_cache(maxsize=256)
def parse_signed_headers(value: str, error_code: str) -> tuple[str, ...]:
    names = tuple(value.split(";"))
    if not value or any(not _SIGNED_HEADER_RE.fullmatch(n) for n in names):
        raise S3Error(error_code, "SignedHeaders must be a ';'-separated list of lowercase names.")
    if len(set(names)) != len(names):
        raise S3Error(error_code, "SignedHeaders lists a header twice.")
    if "host" not in names:
        raise S3Error(error_code, "The host header must be signed.")
    return names


def check_region(credential: Credential, region: str | None, error_code: str) -> None:
    if region is not None and credential.region != region:
        raise S3Error(
            error_code,
            f"The authorization header is malformed; the region {credential.region!r} is wrong; "
            f"expecting {region!r}.",
            details={"Region": region},
        )


def lookup_secret(credentials: Mapping[str, str], access_key: str) -> str:
    secret = credentials.get(access_key)
    # An empty secret would make every signature "verify" with a guessable key.
    if not secret:
        raise S3Error("InvalidAccessKeyId", details={"AWSAccessKeyId": access_key})
    return secret


def _check_unsigned_amz_headers(
    collected: Mapping[str, list[str]], signed: tuple[str, ...]
) -> None:
    unsigned = [n for n in collected if n.startswith("x-amz-") and n not in signed]
    if unsigned:
        unsigned.sort()
        raise S3Error(
            "AccessDenied",
            "There were headers present in the request which were not signed: "
            + ", ".join(unsigned)[:512],
            details={"HeadersNotSigned": ", ".join(unsigned)[:512]},
        )


def int_header(collected: Mapping[str, list[str]], name: str) -> int | None:
    value = first_header(collected, name)
    if value is None:
        return None
    value = value.strip()
    number = parse_decimal(value)
    if number is None:
        raise S3Error(
            "InvalidArgument",
            f"{name} must be a non-negative integer.",
            details={"ArgumentName": name, "ArgumentValue": value[:64]},
        )
    return number


def _declared_trailers(collected: Mapping[str, list[str]]) -> tuple[str, ...]:
    names: list[str] = []
    for value in collected.get("x-amz-trailer", []):
        names.extend(n.strip().lower() for n in value.split(",") if n.strip())
    return tuple(names)


def _check_signature(
    candidates: list[bytes],
    amz_date: str,
    credential: Credential,
    signing_key: bytes,
    provided: str,
) -> None:
    matched = False
    for canonical in candidates:
        if signatures_equal(
            sign_hex(signing_key, string_to_sign(amz_date, credential.scope, canonical)),
            provided,
        ):
            matched = True
    if not matched:
        canonical = candidates[0]
        raise S3Error(
            "SignatureDoesNotMatch",
            details={
                "AWSAccessKeyId": credential.access_key,
                "StringToSign": string_to_sign(amz_date, credential.scope, canonical),
                "SignatureProvided": provided,
                # Without the secrets it signed (an SSE-C key is a header).
                "CanonicalRequest": redact_signed_text(
                    canonical.decode("utf-8", "replace"), query_line=2
                ),
            },
        )


def checked(
    method: str,
    raw_path: bytes,
    query_candidates: list[bytes],
    collected: Mapping[str, list[str]],
    *,
    credential: Credential,
    secret: str,
    signed_headers: tuple[str, ...],
    signature: str,
    payload_hash: str,
    amz_date: str,
    expires_at: datetime | None = None,
) -> VerifiedRequest:
    """The part both forms share: check the signature over the canonical
    request and describe what was verified. `expires_at` is set for presigned
    URLs (their payload is never signed)."""
    presigned = expires_at is not None
    mode, expected = payload_mode(payload_hash, presigned=presigned)
    _check_unsigned_amz_headers(collected, signed_headers)

    signing_key = derive_signing_key(secret, credential.date, credential.region, credential.service)
    candidates = canonical_requests(
        method, raw_path, query_candidates, collected, signed_headers, payload_hash
    )
    _check_signature(candidates, amz_date, credential, signing_key, signature)

    return VerifiedRequest(
        access_key=credential.access_key,
        payload_mode=mode,
        expected_sha256=expected,
        amz_date=amz_date,
        scope=credential.scope,
        region=credential.region,
        seed_signature=signature.lower(),
        signing_key=signing_key,
        signed_headers=signed_headers,
        presigned=presigned,
        expires_at=expires_at,
        decoded_content_length=int_header(collected, "x-amz-decoded-content-length"),
        declared_trailers=_declared_trailers(collected),
    )
