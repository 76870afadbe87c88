"""The digest and checksum verifiers of S3 request bodies, and what a body
stream learned (:class:`BodyResult`).

Each verifier yields the body as it receives it and raises at its end on a
mismatch (see :mod:`app.http.s3.payload`: the end of the stream is part of the
verification). Malformed header values raise on the first iteration.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from app.http.s3.errors import S3Error
from app.kit.checksums import CHECKSUM_SIZES, Checksum, new_checksum

CHECKSUM_HEADER_PREFIX: Final = "x-amz-checksum-"


def decode_checksum_value(algorithm: str, value: str, where: str) -> bytes:
    size = CHECKSUM_SIZES.get(algorithm)
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if size is None or len(raw) != size:
        raise S3Error("InvalidRequest", f"Value for x-amz-checksum-{algorithm} {where} is invalid.")
    return raw


@dataclass
class BodyResult:
    """What a body stream learned, filled in as it is consumed.

    Only meaningful once the stream ended without an exception.
    """

    #: Bytes yielded (the decoded size).
    size: int = 0
    #: Trailer headers received after an aws-chunked body (lowercase names,
    #: without ``x-amz-trailer-signature``).
    trailers: dict[str, str] = field(default_factory=dict)
    #: algorithm -> base64 value of every checksum that was verified.
    checksums: dict[str, str] = field(default_factory=dict)
    #: algorithm -> base64 value of checksums that could not be verified
    #: (an algorithm S3 does not define).
    unverified: dict[str, str] = field(default_factory=dict)


async def verify_sha256(body: AsyncIterator[bytes], expected_hex: str) -> AsyncIterator[bytes]:
    """Yield ``body``; at its end raise ``XAmzContentSHA256Mismatch`` if its SHA-256 differs."""
    hasher = hashlib.sha256()
    async for piece in body:
        hasher.update(piece)
        yield piece
    computed = hasher.hexdigest()
    if computed != expected_hex.lower():
        raise S3Error(
            "XAmzContentSHA256Mismatch",
            details={
                "ClientComputedContentSHA256": expected_hex,
                "S3ComputedContentSHA256": computed,
            },
        )


def parse_content_md5(value: str) -> bytes:
    """The 16-byte digest of a ``Content-MD5`` header; ``InvalidDigest`` if malformed."""
    try:
        digest = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != 16:
        raise S3Error("InvalidDigest", "The Content-MD5 you specified is not valid.")
    return digest


async def verify_md5(body: AsyncIterator[bytes], content_md5_b64: str) -> AsyncIterator[bytes]:
    """Yield ``body``; at its end raise ``BadDigest`` if its MD5 differs from ``Content-MD5``.

    A malformed header raises ``InvalidDigest`` on the first iteration; call
    :func:`parse_content_md5` first to reject it before reading anything.
    """
    expected = parse_content_md5(content_md5_b64)
    hasher = hashlib.md5(usedforsecurity=False)
    async for piece in body:
        hasher.update(piece)
        yield piece
    if hasher.digest() != expected:
        raise S3Error(
            "BadDigest",
            "The Content-MD5 you specified did not match what we received.",
            details={
                "ExpectedDigest": content_md5_b64.strip(),
                "CalculatedDigest": base64.b64encode(hasher.digest()).decode("ascii"),
            },
        )


async def verify_checksum(
    body: AsyncIterator[bytes],
    algorithm: str,
    expected_b64: str,
    *,
    result: BodyResult | None = None,
) -> AsyncIterator[bytes]:
    """Yield ``body``; at its end raise ``BadDigest`` if its ``x-amz-checksum-<algorithm>`` differs.

    A malformed value raises ``InvalidRequest`` on the first iteration. An
    unsupported algorithm passes the body through and is recorded in
    ``result.unverified``.
    """
    algorithm = algorithm.lower()
    expected = decode_checksum_value(algorithm, expected_b64, "header")
    checksum = new_checksum(algorithm)
    if checksum is None:
        if result is not None:
            result.unverified[algorithm] = expected_b64.strip()
        async for piece in body:
            yield piece
        return
    async for piece in body:
        checksum.update(piece)
        yield piece
    compare_checksum(algorithm, checksum, expected, result)


def compare_checksum(
    algorithm: str, checksum: Checksum, expected: bytes, result: BodyResult | None
) -> None:
    computed = checksum.digest()
    if computed != expected:
        raise S3Error(
            "BadDigest",
            f"The {algorithm.upper()} you specified did not match the calculated checksum.",
        )
    if result is not None:
        result.checksums[algorithm] = base64.b64encode(computed).decode("ascii")
