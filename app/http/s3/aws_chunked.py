"""The aws-chunked content encoding: framing removed, chunk and trailer
signatures, length and trailing checksums verified as the body streams.

A chunk's data is yielded as it arrives, *before* that chunk's signature
(which can only be checked at the chunk's end) is verified: see
:mod:`app.http.s3.payload` for what a caller must do with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Iterable
from typing import Final

from app.http.s3.errors import S3Error
from app.http.s3.payload_checks import (
    CHECKSUM_HEADER_PREFIX,
    BodyResult,
    compare_checksum,
    decode_checksum_value,
)
from app.http.s3.sigv4 import (
    VerifiedRequest,
    chunk_string_to_sign,
    sign_hex,
    signatures_equal,
    trailer_string_to_sign,
)
from app.kit.checksums import Checksum, new_checksum

#: Longest chunk-header line (``<hex size>;chunk-signature=<64 hex>``) accepted.
MAX_CHUNK_HEADER: Final = 4096
#: Largest trailer section (after the final zero-size chunk) accepted.
MAX_TRAILER_BYTES: Final = 16 * 1024
#: Largest chunk size accepted in aws-chunked framing (clients use 8 KiB-16 MiB).
MAX_CHUNK_SIZE: Final = 1 << 34
TRAILER_SIGNATURE: Final = "x-amz-trailer-signature"
_HEX64_BYTES: Final = re.compile(rb"[0-9a-fA-F]{64}")


class _Reader:
    """Buffered reads over an async byte iterator, holding at most one piece."""

    def __init__(self, body: AsyncIterator[bytes]) -> None:
        self._it = body.__aiter__()
        self._buf = b""
        self._pos = 0

    async def _fill(self) -> bool:
        while True:
            try:
                piece = await self._it.__anext__()
            except StopAsyncIteration:
                return False
            if piece:
                rest = self._buf[self._pos :]
                self._buf = rest + bytes(piece) if rest else bytes(piece)
                self._pos = 0
                return True

    async def readline(self, limit: int) -> bytes:
        """One CRLF-terminated line, without the CRLF."""
        while True:
            end = self._buf.find(b"\n", self._pos, self._pos + limit + 2)
            if end >= 0:
                line = self._buf[self._pos : end]
                self._pos = end + 1
                if not line.endswith(b"\r"):
                    raise _malformed("a chunk header must end with CRLF")
                return line[:-1]
            if len(self._buf) - self._pos > limit:
                raise _malformed("chunk header too long")
            if not await self._fill():
                raise S3Error("IncompleteBody", "The aws-chunked body ended inside a chunk header.")

    async def read_some(self, n: int) -> bytes:
        """Between 1 and ``n`` bytes."""
        if self._pos >= len(self._buf) and not await self._fill():
            raise S3Error("IncompleteBody", "The aws-chunked body ended inside a chunk.")
        end = min(len(self._buf), self._pos + n)
        data = self._buf[self._pos : end]
        self._pos = end
        return data

    async def read_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            data += await self.read_some(n - len(data))
        return data

    async def read_rest(self, limit: int) -> bytes:
        """Everything up to the end of the stream (at most ``limit`` bytes)."""
        data = self._buf[self._pos :]
        self._buf, self._pos = b"", 0
        while len(data) <= limit:
            try:
                piece = await self._it.__anext__()
            except StopAsyncIteration:
                return data
            data += bytes(piece)
        raise _malformed("the trailer section is too large")


def _malformed(why: str) -> S3Error:
    return S3Error("InvalidRequest", f"Malformed aws-chunked body: {why}.")


def _parse_chunk_header(line: bytes, signed: bool) -> tuple[int, str | None]:
    size_text, _, extensions = line.partition(b";")
    size_text = size_text.strip(b" \t")
    if not size_text or len(size_text) > 16:
        raise _malformed("bad chunk size")
    try:
        size = int(size_text, 16)
    except ValueError:
        raise _malformed("bad chunk size") from None
    if not all(c in b"0123456789abcdefABCDEF" for c in size_text):
        raise _malformed("bad chunk size")
    if size > MAX_CHUNK_SIZE:
        raise _malformed("chunk too large")
    signature: str | None = None
    for extension in extensions.split(b";") if extensions else ():
        name, _, value = extension.partition(b"=")
        if name.strip(b" \t") == b"chunk-signature":
            value = value.strip(b" \t")
            # Hex only: a signature is compared as ASCII, and bytes beyond
            # that would fail there instead of here.
            if not _HEX64_BYTES.fullmatch(value):
                raise _malformed("a chunk signature is not 64 hexadecimal digits")
            signature = value.decode("ascii")
    if signed and signature is None:
        raise _malformed("a chunk signature is missing")
    return size, signature


def _parse_trailer_section(data: bytes) -> tuple[list[tuple[str, str]], str | None]:
    """Lines ``name:value`` separated by LF or CRLF; blank lines are skipped."""
    entries: list[tuple[str, str]] = []
    signature: str | None = None
    for raw_line in data.split(b"\n"):
        line = raw_line.rstrip(b"\r")
        if not line.strip():
            continue
        name_bytes, sep, value_bytes = line.partition(b":")
        if not sep:
            raise _malformed("a trailer line has no ':'")
        try:
            name = name_bytes.strip().lower().decode("ascii")
            value = value_bytes.strip(b" \t").decode("ascii")
        except UnicodeDecodeError:
            raise _malformed("a trailer is not ASCII") from None
        if name == TRAILER_SIGNATURE:
            if signature is not None:
                raise _malformed("two trailer signatures")
            signature = value
        else:
            entries.append((name, value))
    return entries, signature


def _check_trailer_signature(
    signed: VerifiedRequest,
    previous_signature: str,
    entries: list[tuple[str, str]],
    provided: str | None,
) -> None:
    if provided is None:
        raise S3Error("SignatureDoesNotMatch", "The trailer signature is missing.")
    orders = [entries]
    if sorted(entries) != entries:
        orders.append(sorted(entries))
    for order in orders:
        canonical = "".join(f"{name}:{value}\n" for name, value in order).encode("ascii")
        expected = sign_hex(
            signed.signing_key,
            trailer_string_to_sign(
                signed.amz_date,
                signed.scope,
                previous_signature,
                hashlib.sha256(canonical).hexdigest(),
            ),
        )
        if len(provided) == 64 and signatures_equal(expected, provided):
            return
    raise S3Error("SignatureDoesNotMatch", "The trailer signature does not match.")


async def decode_aws_chunked(
    body: AsyncIterator[bytes],
    *,
    signed: VerifiedRequest | None,
    decoded_length: int | None,
    trailer: bool,
    declared_trailers: Iterable[str] = (),
    result: BodyResult | None = None,
) -> AsyncIterator[bytes]:
    """Remove aws-chunked framing, verifying signatures, length and trailing checksums.

    Framing: ``<hex size>[;chunk-signature=<sig>]\\r\\n<data>\\r\\n`` ... then a
    zero-size chunk, then (``trailer=True``) trailer lines ``name:value``
    (LF or CRLF; minio-go ends them with a bare LF), an optional
    ``x-amz-trailer-signature:<sig>`` line and a blank line.

    ``signed``: the verified request when chunks are signed
    (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]``); every chunk signature is
    checked against the chain seeded by the request signature, and with
    ``trailer=True`` the trailer signature too. ``None`` for unsigned chunks
    (``STREAMING-UNSIGNED-PAYLOAD-TRAILER``), where signatures are ignored.

    ``decoded_length``: ``x-amz-decoded-content-length``; the decoded total must
    equal it (``IncompleteBody`` if shorter, ``InvalidRequest`` as soon as it
    is exceeded).

    ``declared_trailers``: the names from ``x-amz-trailer``; each must arrive and
    nothing else may. ``x-amz-checksum-<alg>`` trailers are verified (crc32,
    crc32c, crc64nvme, sha1, sha256) against checksums computed while streaming,
    which is why they must be declared. Mismatch: ``BadDigest``.

    Data is yielded as it arrives, before the signature of its chunk has been
    checked (see the module docstring): a caller must discard everything if the
    iteration raises. Errors: ``SignatureDoesNotMatch``, ``IncompleteBody``,
    ``InvalidRequest`` (malformed framing), ``BadDigest``.
    """
    reader = _Reader(body)
    declared = tuple(name.lower() for name in declared_trailers)
    checksums: dict[str, Checksum] = {}
    for name in declared:
        if name.startswith(CHECKSUM_HEADER_PREFIX):
            algorithm = name[len(CHECKSUM_HEADER_PREFIX) :]
            checksum = new_checksum(algorithm)
            if checksum is not None:
                checksums[algorithm] = checksum
    previous_signature = signed.seed_signature if signed is not None else ""
    total = 0

    while True:
        size, chunk_signature = _parse_chunk_header(
            await reader.readline(MAX_CHUNK_HEADER), signed is not None
        )
        if decoded_length is not None and total + size > decoded_length:
            raise S3Error(
                "InvalidRequest",
                "The aws-chunked body is longer than x-amz-decoded-content-length.",
            )
        hasher = hashlib.sha256() if signed is not None else None
        remaining = size
        while remaining:
            piece = await reader.read_some(remaining)
            remaining -= len(piece)
            if hasher is not None:
                hasher.update(piece)
            for checksum in checksums.values():
                checksum.update(piece)
            if result is not None:
                result.size += len(piece)
            yield piece
        total += size

        if signed is not None and hasher is not None and chunk_signature is not None:
            expected = sign_hex(
                signed.signing_key,
                chunk_string_to_sign(
                    signed.amz_date, signed.scope, previous_signature, hasher.hexdigest()
                ),
            )
            if not signatures_equal(expected, chunk_signature):
                raise S3Error("SignatureDoesNotMatch", "A chunk signature does not match.")
            previous_signature = chunk_signature.lower()

        if size == 0:
            break
        if await reader.read_exact(2) != b"\r\n":
            raise _malformed("chunk data must be followed by CRLF")

    entries, trailer_signature = _parse_trailer_section(await reader.read_rest(MAX_TRAILER_BYTES))
    if not trailer:
        if entries or trailer_signature is not None:
            raise _malformed("unexpected data after the final chunk")
    else:
        if signed is not None:
            _check_trailer_signature(signed, previous_signature, entries, trailer_signature)
        received = {name for name, _ in entries}
        if len(received) != len(entries):
            raise _malformed("a trailer is repeated")
        missing = [name for name in declared if name not in received]
        if missing:
            raise S3Error("InvalidRequest", f"The declared trailer {missing[0]} was not sent.")
        if declared and received - set(declared):
            extra = sorted(received - set(declared))[0]
            raise S3Error(
                "InvalidRequest", f"The trailer {extra} was not declared in x-amz-trailer."
            )
        for name, value in entries:
            if result is not None:
                result.trailers[name] = value
            if not name.startswith(CHECKSUM_HEADER_PREFIX):
                continue
            algorithm = name[len(CHECKSUM_HEADER_PREFIX) :]
            expected_raw = decode_checksum_value(algorithm, value, "trailing header")
            checksum = checksums.get(algorithm)
            if checksum is None:
                if result is not None:
                    result.unverified[algorithm] = value
                continue
            compare_checksum(algorithm, checksum, expected_raw, result)

    if decoded_length is not None and total != decoded_length:
        raise S3Error(
            "IncompleteBody",
            "The aws-chunked body is shorter than x-amz-decoded-content-length.",
        )


def strip_aws_chunked(content_encoding: str | None) -> str | None:
    """``Content-Encoding`` without the ``aws-chunked`` token (``None`` if nothing is left).

    aws-chunked describes the transfer, not the object: it must not be stored.
    """
    if content_encoding is None:
        return None
    kept = [
        token.strip()
        for token in content_encoding.split(",")
        if token.strip() and token.strip().lower() != "aws-chunked"
    ]
    return ", ".join(kept) or None
