"""SigV4's keys and signatures: the signing key of a credential scope, HMACs
and their constant-time comparison, request dates, and the strings to sign of
aws-chunked chunks and trailers (the chain a STREAMING-* body is signed with).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta
from typing import Final

ALGORITHM: Final = "AWS4-HMAC-SHA256"
SERVICE: Final = "s3"
TERMINATOR: Final = "aws4_request"
EMPTY_SHA256: Final = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

#: How far ``x-amz-date`` may be from the server's clock (header form), and how
#: far in the future a presigned ``X-Amz-Date`` may be.
MAX_SKEW: Final = timedelta(minutes=15)
_AMZ_DATE_RE: Final = re.compile(r"[0-9]{8}T[0-9]{6}Z")


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


@functools.lru_cache(maxsize=256)
def derive_signing_key(secret: str, date: str, region: str, service: str = SERVICE) -> bytes:
    """``kSigning`` for a secret and a ``YYYYMMDD/region/service`` scope (cached)."""
    k_date = _hmac(("AWS4" + secret).encode("utf-8"), date.encode("utf-8"))
    k_region = _hmac(k_date, region.encode("utf-8"))
    k_service = _hmac(k_region, service.encode("utf-8"))
    return _hmac(k_service, TERMINATOR.encode("ascii"))


def sign_hex(signing_key: bytes, string_to_sign: str | bytes) -> str:
    """Hex HMAC-SHA256 of a string to sign."""
    msg = string_to_sign.encode("utf-8") if isinstance(string_to_sign, str) else string_to_sign
    mac = _keyed(signing_key).copy()
    mac.update(msg)
    return mac.hexdigest()


@functools.lru_cache(maxsize=256)
def _keyed(signing_key: bytes) -> hmac.HMAC:
    """An HMAC with `signing_key` and no message yet, to copy: setting up
    OpenSSL's HMAC for a key costs more than the copy and the hash together,
    and one key signs a client's requests all day (and every chunk of a
    streaming body)."""
    return hmac.new(signing_key, digestmod=hashlib.sha256)


def chunk_string_to_sign(
    amz_date: str, scope: str, previous_signature: str, data_sha256: str
) -> str:
    """String to sign of one aws-chunked chunk (``AWS4-HMAC-SHA256-PAYLOAD``)."""
    return "\n".join(
        ("AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous_signature, EMPTY_SHA256, data_sha256)
    )


def trailer_string_to_sign(
    amz_date: str, scope: str, previous_signature: str, trailer_sha256: str
) -> str:
    """String to sign of the trailer of a signed aws-chunked body."""
    return "\n".join(
        ("AWS4-HMAC-SHA256-TRAILER", amz_date, scope, previous_signature, trailer_sha256)
    )


def signatures_equal(expected: str, provided: str) -> bool:
    """Constant-time comparison of two hex signatures (case-insensitive)."""
    return hmac.compare_digest(expected.lower().encode("ascii"), provided.lower().encode("ascii"))


def parse_amz_date(value: str) -> datetime | None:
    if not _AMZ_DATE_RE.fullmatch(value):
        return None
    # By hand: strptime cost a tenth of a small request's verification.
    try:
        return datetime(
            int(value[0:4]),
            int(value[4:6]),
            int(value[6:8]),
            int(value[9:11]),
            int(value[11:13]),
            int(value[13:15]),
            tzinfo=UTC,
        )
    except ValueError:
        return None


def format_amz_date(when: datetime) -> str:
    """``YYYYMMDDTHHMMSSZ`` in UTC."""
    return as_utc(when).strftime("%Y%m%dT%H%M%SZ")


def as_utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def iso8601(when: datetime) -> str:
    return as_utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")
