"""AWS Signature Version 4 verification of incoming S3 requests.

Two forms are accepted:

* the ``Authorization`` header: ``AWS4-HMAC-SHA256 Credential=AKID/20261130/us-east-1/s3/
  aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=<64 hex>``
  with ``x-amz-date`` (or ``Date``) within :data:`MAX_SKEW` of now;
* presigned URLs: ``X-Amz-Algorithm``, ``X-Amz-Credential``, ``X-Amz-Date``,
  ``X-Amz-Expires`` (at most :data:`MAX_PRESIGN_EXPIRES`), ``X-Amz-SignedHeaders`` and
  ``X-Amz-Signature`` in the query; the payload is ``UNSIGNED-PAYLOAD``.

The canonical request is rebuilt from what the client sent, never from a
normalised form of it:

* **path** -- from the ASGI scope's ``raw_path`` (bytes, still percent-encoded).
  S3 does not normalise paths (``//``, ``/./``, a trailing ``/`` all stay) and
  encodes the path *once*: the canonical URI is the decoded path re-encoded with
  every byte but ``A-Za-z0-9-._~/`` as ``%XX``. That is exactly what botocore,
  minio-go and aws-sdk-go put on the wire, so for them the canonical URI is the
  raw path itself. A client that signs a non-canonical spelling of the path as
  sent (e.g. an unescaped ``!`` or a lowercase ``%2f``) is accepted too: the raw
  path is tried as a second candidate. Both candidates decode to the same path,
  so this leniency never lets one signature cover two different requests.
* **query** -- each ``name=value`` pair is decoded (``+`` means a space, as in
  ``application/x-www-form-urlencoded`` and as Starlette's ``query_params`` and
  Go's ``url.Values`` read it) and re-encoded with ``%20`` for spaces, then the
  pairs are sorted by name and value. A bare ``?uploads`` becomes ``uploads=``.
  The routes must interpret the query the same way (:func:`parse_query` or
  Starlette's ``request.query_params``).
* **headers** -- the ``SignedHeaders`` list in the order given, each value
  trimmed with inner runs of blanks collapsed, repeated headers joined with
  ``,``. Values are used as the raw bytes received (Starlette decodes headers
  as latin-1; they are re-encoded to latin-1 before hashing).
* **payload** -- the ``x-amz-content-sha256`` header as sent: a hex SHA-256,
  ``UNSIGNED-PAYLOAD`` or one of the ``STREAMING-*`` values (see
  :class:`PayloadMode`). A request without that header is accepted only when it
  has no body (its payload hash is then the SHA-256 of nothing).

On top of the signature, like AWS: every ``x-amz-*`` request header must be
signed (otherwise a replayed request could carry an altered
``x-amz-copy-source`` or ``x-amz-meta-*``), ``host`` must be signed, the
credential's service must be ``s3`` and its date the request's date.

The result, :class:`VerifiedRequest`, tells the routes how to read the body
(see ``app.http.s3.payload.request_body``).

This module tells the forms apart and exports what the rest of the app uses;
the work is in one module per concept: ``canonical`` (the canonical request),
``signing`` (keys, HMACs, dates, the chunk and trailer strings to sign),
``checks`` (what both forms check alike), ``header`` and ``presigned`` (the
two forms), ``request`` (:class:`PayloadMode` and :class:`VerifiedRequest`).
SigV2 is another module, ``app.http.s3.sigv2``, to which the gateway sends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final, Literal

from app.http.s3.errors import S3Error
from app.http.s3.sigv4.canonical import (
    canonical_query_string,
    canonical_uri,
    collect_headers,
    first_header,
    parse_query,
    query_pairs,
)
from app.http.s3.sigv4.header import verify_header
from app.http.s3.sigv4.presigned import AUTH_QUERY_PARAMS, MAX_PRESIGN_EXPIRES, verify_presigned
from app.http.s3.sigv4.request import (
    STREAMING_SIGNED_PAYLOAD,
    STREAMING_SIGNED_PAYLOAD_TRAILER,
    STREAMING_UNSIGNED_PAYLOAD_TRAILER,
    UNSIGNED_PAYLOAD,
    PayloadMode,
    VerifiedRequest,
)
from app.http.s3.sigv4.signing import (
    ALGORITHM,
    EMPTY_SHA256,
    MAX_SKEW,
    SERVICE,
    TERMINATOR,
    as_utc,
    chunk_string_to_sign,
    derive_signing_key,
    format_amz_date,
    sign_hex,
    signatures_equal,
    trailer_string_to_sign,
)

__all__ = [
    "ALGORITHM",
    "AUTH_QUERY_PARAMS",
    "EMPTY_SHA256",
    "MAX_PRESIGN_EXPIRES",
    "MAX_SKEW",
    "SERVICE",
    "STREAMING_SIGNED_PAYLOAD",
    "STREAMING_SIGNED_PAYLOAD_TRAILER",
    "STREAMING_UNSIGNED_PAYLOAD_TRAILER",
    "TERMINATOR",
    "UNSIGNED_PAYLOAD",
    "AuthKind",
    "PayloadMode",
    "VerifiedRequest",
    "auth_kind",
    "canonical_query_string",
    "canonical_uri",
    "chunk_string_to_sign",
    "derive_signing_key",
    "format_amz_date",
    "is_sigv4_request",
    "parse_query",
    "sign_hex",
    "signatures_equal",
    "trailer_string_to_sign",
    "verify_request",
]

_PRESIGN_MARKERS: Final = frozenset({b"X-Amz-Signature", b"X-Amz-Algorithm", b"X-Amz-Credential"})


AuthKind = Literal["header", "query"]


def auth_kind(headers: Mapping[str, str], query: bytes | str) -> AuthKind | None:
    """``"header"`` or ``"query"`` for a SigV4 request, else ``None``."""
    if hasattr(headers, "raw"):
        # Starlette's Headers look a name up case-insensitively themselves.
        if headers.get("authorization", "").startswith(ALGORITHM):
            return "header"
    else:
        for name, value in headers.items():
            if name.lower() == "authorization" and value.startswith(ALGORITHM):
                return "header"
    if not query:
        return None
    for raw_name, _ in query_pairs(query):
        if raw_name in _PRESIGN_MARKERS:
            return "query"
    return None


def is_sigv4_request(headers: Mapping[str, str], query: bytes | str) -> bool:
    """Whether the request carries SigV4 authentication (header or presigned)."""
    return auth_kind(headers, query) is not None


def verify_request(
    method: str,
    raw_path: bytes,
    query_string: bytes | str,
    headers: Mapping[str, str],
    credentials: Mapping[str, str],
    *,
    now: datetime,
    region: str | None = None,
) -> VerifiedRequest:
    """Check the SigV4 signature of a request; raise :class:`S3Error` if it fails.

    ``raw_path`` and ``query_string`` are the ASGI scope's ``raw_path`` and
    ``query_string`` (bytes exactly as received); ``headers`` is a
    case-insensitive mapping such as Starlette's ``Headers`` (repeated headers
    are read through ``items()``); ``credentials`` maps access key ids to
    secrets (an empty secret never verifies); ``now`` is the server time
    (naive means UTC); ``region``, when given, is the only region accepted
    (otherwise any region the client signed with is).

    Errors: ``AccessDenied`` (anonymous, expired/not-yet-valid presign, unsigned
    ``x-amz-*`` headers), ``InvalidRequest`` (another algorithm, both forms at
    once, missing ``x-amz-content-sha256`` with a body),
    ``AuthorizationHeaderMalformed`` / ``AuthorizationQueryParametersError``,
    ``InvalidAccessKeyId``, ``RequestTimeTooSkewed``, ``SignatureDoesNotMatch``,
    ``InvalidArgument`` / ``NotImplemented`` (payload hash value).
    """
    now = as_utc(now)
    collected = collect_headers(headers)
    authorization = first_header(collected, "authorization")
    query_names = {name for name, _ in query_pairs(query_string)}
    presigned = bool(query_names & _PRESIGN_MARKERS)
    if authorization is not None and presigned:
        raise S3Error(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the "
            "Authorization header should be specified.",
        )
    if presigned:
        return verify_presigned(method, raw_path, query_string, collected, credentials, now, region)
    if authorization is None:
        raise S3Error("AccessDenied", "Anonymous access is not allowed; sign the request.")
    if not authorization.startswith(ALGORITHM):
        raise S3Error(
            "InvalidRequest",
            "The authorization mechanism you have provided is not supported. "
            "Please use AWS4-HMAC-SHA256.",
        )
    return verify_header(method, raw_path, query_string, collected, credentials, now, region)
