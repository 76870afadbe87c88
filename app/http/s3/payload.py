"""Streaming decoders and verifiers for S3 request bodies: the contract they
share, and :func:`request_body`, which chains them for a verified request.

The verifiers (SHA-256, Content-MD5, ``x-amz-checksum-*``) are in
:mod:`app.http.s3.payload_checks`, the aws-chunked decoder in
:mod:`app.http.s3.aws_chunked`. Every one of them is (or returns) an async
generator over an ``AsyncIterator[bytes]`` (for instance Starlette's
``request.stream()``) and holds a bounded amount of the body in memory: the
pieces it yields are the pieces it received (or slices of them), never the
whole body and never a whole aws-chunked chunk.

**The end of the stream is part of the verification.** A digest, a chunk
signature, a trailing checksum or a length is only known to be right once the
generator is exhausted; a mismatch is raised as :class:`~app.http.s3.errors.S3Error`
from the last ``__anext__`` (or from the middle, as soon as something is known to
be wrong). The caller must write what it receives to temporary storage and
commit it only when the iteration ended without an exception; on any exception
it must discard everything it received. In particular
:func:`~app.http.s3.aws_chunked.decode_aws_chunked` yields a chunk's data as it
arrives, *before* that chunk's signature (which can only be checked at the
chunk's end) is verified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Final

from app.http.s3.aws_chunked import decode_aws_chunked
from app.http.s3.payload_checks import (
    CHECKSUM_HEADER_PREFIX,
    BodyResult,
    decode_checksum_value,
    parse_content_md5,
    verify_checksum,
    verify_md5,
    verify_sha256,
)
from app.http.s3.sigv4 import PayloadMode, VerifiedRequest

#: ``x-amz-checksum-*`` headers that are not checksum values.
_NOT_CHECKSUM_VALUES: Final = frozenset({"algorithm", "type", "mode"})


async def _counted(body: AsyncIterator[bytes], result: BodyResult) -> AsyncIterator[bytes]:
    async for piece in body:
        result.size += len(piece)
        yield piece


def _header_values(headers: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, value in headers.items():
        values.setdefault(name.lower(), value)
    return values


def request_body(
    body: AsyncIterator[bytes],
    verified: VerifiedRequest,
    headers: Mapping[str, str],
    *,
    result: BodyResult | None = None,
) -> AsyncIterator[bytes]:
    """The decoded, verifying body stream of a verified request.

    Chains, as the request calls for: :func:`decode_aws_chunked` (any
    ``STREAMING-*`` mode) or :func:`verify_sha256` (hex payload hash), then
    :func:`verify_md5` for ``Content-MD5`` and :func:`verify_checksum` for each
    ``x-amz-checksum-<alg>`` header. Malformed ``Content-MD5``/checksum headers
    are rejected here, before anything is read. ``result`` (optional) receives
    the decoded size, trailers and checksums.
    """
    values = _header_values(headers)
    content_md5 = values.get("content-md5")
    if content_md5 is not None:
        parse_content_md5(content_md5)
    header_checksums: list[tuple[str, str]] = []
    for name, value in values.items():
        if name.startswith(CHECKSUM_HEADER_PREFIX):
            algorithm = name[len(CHECKSUM_HEADER_PREFIX) :]
            if algorithm in _NOT_CHECKSUM_VALUES:
                continue
            decode_checksum_value(algorithm, value, "header")
            header_checksums.append((algorithm, value))

    stream: AsyncIterator[bytes] = body
    if verified.is_aws_chunked:
        stream = decode_aws_chunked(
            stream,
            signed=verified if verified.chunks_signed else None,
            decoded_length=verified.decoded_content_length,
            trailer=verified.has_trailer,
            declared_trailers=verified.declared_trailers,
            result=result,
        )
    else:
        if verified.payload_mode is PayloadMode.SIGNED_HEX and verified.expected_sha256:
            stream = verify_sha256(stream, verified.expected_sha256)
        if result is not None:
            stream = _counted(stream, result)
    if content_md5 is not None:
        stream = verify_md5(stream, content_md5)
    for algorithm, value in header_checksums:
        stream = verify_checksum(stream, algorithm, value, result=result)
    return stream
