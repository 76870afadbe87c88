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
(see ``app.s3.payload.request_body``).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Final, Literal
from urllib.parse import quote_from_bytes, unquote_to_bytes

from app.parsing import parse_decimal
from app.s3.errors import S3Error

ALGORITHM: Final = "AWS4-HMAC-SHA256"
SERVICE: Final = "s3"
TERMINATOR: Final = "aws4_request"
EMPTY_SHA256: Final = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
UNSIGNED_PAYLOAD: Final = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED_PAYLOAD: Final = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_PAYLOAD_TRAILER: Final = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_PAYLOAD_TRAILER: Final = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

#: How far ``x-amz-date`` may be from the server's clock (header form), and how
#: far in the future a presigned ``X-Amz-Date`` may be.
MAX_SKEW: Final = timedelta(minutes=15)
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

#: Query parameters whose presence makes a request a presigned one.
_PRESIGN_MARKERS: Final = frozenset({b"X-Amz-Signature", b"X-Amz-Algorithm", b"X-Amz-Credential"})
_AMZ_DATE_RE: Final = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_HEX64_RE: Final = re.compile(r"[0-9a-fA-F]{64}")
_BLANKS_RE: Final = re.compile(rb"[ \t]+")
_SIGNED_HEADER_RE: Final = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")


class PayloadMode(enum.Enum):
    """How the body is protected, from ``x-amz-content-sha256``."""

    #: A hex SHA-256 of the body: verify it as the body streams
    #: (``payload.verify_sha256``).
    SIGNED_HEX = "signed-hex"
    #: ``UNSIGNED-PAYLOAD`` (and every presigned URL): the body is taken as is.
    UNSIGNED = "unsigned"
    #: ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``: aws-chunked framing, every chunk
    #: signed (minio-go for streams, the AWS Java/.NET SDKs).
    STREAMING_SIGNED = "streaming-signed"
    #: ``STREAMING-UNSIGNED-PAYLOAD-TRAILER``: aws-chunked framing, no chunk
    #: signatures, checksum trailer (botocore >= 1.36 and minio-go over TLS).
    STREAMING_UNSIGNED_TRAILER = "streaming-unsigned-trailer"
    #: ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER``: signed chunks and a
    #: signed checksum trailer.
    STREAMING_SIGNED_TRAILER = "streaming-signed-trailer"


_PAYLOAD_MODES: Final[Mapping[str, PayloadMode]] = {
    UNSIGNED_PAYLOAD: PayloadMode.UNSIGNED,
    STREAMING_SIGNED_PAYLOAD: PayloadMode.STREAMING_SIGNED,
    STREAMING_UNSIGNED_PAYLOAD_TRAILER: PayloadMode.STREAMING_UNSIGNED_TRAILER,
    STREAMING_SIGNED_PAYLOAD_TRAILER: PayloadMode.STREAMING_SIGNED_TRAILER,
}
_NOT_IMPLEMENTED_PAYLOADS: Final = frozenset(
    {
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
        "STREAMING-AWS4-HMAC-SHA256-EVENTS",
    }
)


@dataclass(frozen=True, slots=True)
class VerifiedRequest:
    """A request whose signature checked out.

    ``amz_date``, ``scope``, ``signing_key`` and ``seed_signature`` are what the
    chunk and trailer signatures of a ``STREAMING_SIGNED*`` body chain from;
    ``signing_key`` is secret-derived: never log it (it is left out of
    ``repr``).
    """

    access_key: str
    payload_mode: PayloadMode
    #: Lowercase hex SHA-256 the body must have (``SIGNED_HEX`` only).
    expected_sha256: str | None
    #: ``YYYYMMDDTHHMMSSZ`` the request was signed at.
    amz_date: str
    #: ``YYYYMMDD/region/s3/aws4_request``.
    scope: str
    region: str
    #: The request's own signature (the seed of a chunk-signature chain).
    seed_signature: str
    signing_key: bytes = field(repr=False)
    signed_headers: tuple[str, ...] = ()
    presigned: bool = False
    #: When a presigned URL stops being valid.
    expires_at: datetime | None = None
    #: ``x-amz-decoded-content-length``: the body's size once aws-chunked
    #: framing is removed.
    decoded_content_length: int | None = None
    #: Lowercased names from ``x-amz-trailer`` (e.g. ``x-amz-checksum-crc32``).
    declared_trailers: tuple[str, ...] = ()

    @property
    def is_aws_chunked(self) -> bool:
        """The body uses aws-chunked framing (any ``STREAMING-*`` mode)."""
        return self.payload_mode in (
            PayloadMode.STREAMING_SIGNED,
            PayloadMode.STREAMING_SIGNED_TRAILER,
            PayloadMode.STREAMING_UNSIGNED_TRAILER,
        )

    @property
    def chunks_signed(self) -> bool:
        return self.payload_mode in (
            PayloadMode.STREAMING_SIGNED,
            PayloadMode.STREAMING_SIGNED_TRAILER,
        )

    @property
    def has_trailer(self) -> bool:
        return self.payload_mode in (
            PayloadMode.STREAMING_SIGNED_TRAILER,
            PayloadMode.STREAMING_UNSIGNED_TRAILER,
        )


# --------------------------------------------------------------------------- helpers


def _as_bytes(value: bytes | str) -> bytes:
    if isinstance(value, bytes):
        return value
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def _decode_component(raw: bytes) -> bytes:
    """Percent-decode one query name or value, ``+`` meaning a space."""
    return unquote_to_bytes(raw.replace(b"+", b" "))


def _query_pairs(query: bytes | str) -> list[tuple[bytes, bytes]]:
    pairs: list[tuple[bytes, bytes]] = []
    for piece in _as_bytes(query).split(b"&"):
        if not piece:
            continue
        name, _, value = piece.partition(b"=")
        pairs.append((_decode_component(name), _decode_component(value)))
    return pairs


def parse_query(query: bytes | str) -> list[tuple[str, str]]:
    """Decode a raw query string into ``(name, value)`` pairs, in order.

    ``+`` is a space, ``?uploads`` gives ``("uploads", "")``, empty pieces are
    skipped, invalid UTF-8 is replaced with U+FFFD. This is the interpretation
    the signature is checked against (and the one Starlette's
    ``request.query_params`` uses).
    """
    return [
        (n.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for n, v in _query_pairs(query)
    ]


def _uri_encode(raw: bytes, *, keep_slash: bool) -> str:
    return quote_from_bytes(raw, safe="/" if keep_slash else "")


def canonical_uri(raw_path: bytes | str) -> str:
    """The canonical URI of a path as received: decoded once, encoded once."""
    raw = _as_bytes(raw_path) or b"/"
    return _uri_encode(unquote_to_bytes(raw), keep_slash=True)


def _uri_candidates(raw_path: bytes | str) -> list[str]:
    raw = _as_bytes(raw_path) or b"/"
    canonical = canonical_uri(raw)
    candidates = [canonical]
    try:
        as_sent = raw.decode("ascii")
    except UnicodeDecodeError:
        return candidates
    if as_sent != canonical:
        candidates.append(as_sent)
    return candidates


def canonical_query_string(query: bytes | str, *, exclude: Iterable[str] = ()) -> str:
    """The canonical query string of a raw query (``exclude``: names to drop)."""
    excluded = {name.encode() for name in exclude}
    encoded = sorted(
        (_uri_encode(name, keep_slash=False), _uri_encode(value, keep_slash=False))
        for name, value in _query_pairs(query)
        if name not in excluded
    )
    return "&".join(f"{name}={value}" for name, value in encoded)


def _collect_headers(headers: Mapping[str, str]) -> dict[str, list[str]]:
    # Starlette's Headers.items() yields repeated headers separately; a plain
    # dict simply has one value per name.
    collected: dict[str, list[str]] = {}
    for name, value in headers.items():
        collected.setdefault(name.lower(), []).append(value)
    return collected


def _first(collected: Mapping[str, list[str]], name: str) -> str | None:
    values = collected.get(name)
    return values[0] if values else None


def _canonical_header_value(values: list[str]) -> bytes:
    return b",".join(_BLANKS_RE.sub(b" ", _as_bytes(v)).strip(b" \t") for v in values)


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
    return hmac.new(signing_key, msg, hashlib.sha256).hexdigest()


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


def _parse_amz_date(value: str) -> datetime | None:
    if not _AMZ_DATE_RE.fullmatch(value):
        return None
    try:
        return datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def format_amz_date(when: datetime) -> str:
    """``YYYYMMDDTHHMMSSZ`` in UTC."""
    return _utc(when).strftime("%Y%m%dT%H%M%SZ")


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _iso(when: datetime) -> str:
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- detection


AuthKind = Literal["header", "query"]


def auth_kind(headers: Mapping[str, str], query: bytes | str) -> AuthKind | None:
    """``"header"`` or ``"query"`` for a SigV4 request, else ``None``."""
    for name, value in headers.items():
        if name.lower() == "authorization" and value.startswith(ALGORITHM):
            return "header"
    for raw_name, _ in _query_pairs(query):
        if raw_name in _PRESIGN_MARKERS:
            return "query"
    return None


def is_sigv4_request(headers: Mapping[str, str], query: bytes | str) -> bool:
    """Whether the request carries SigV4 authentication (header or presigned)."""
    return auth_kind(headers, query) is not None


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True, slots=True)
class _Credential:
    access_key: str
    date: str
    region: str
    service: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{TERMINATOR}"


def _parse_credential(value: str, error_code: str) -> _Credential:
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
    return _Credential(access_key, date, region, service)


def _parse_signed_headers(value: str, error_code: str) -> tuple[str, ...]:
    names = tuple(value.split(";"))
    if not value or any(not _SIGNED_HEADER_RE.fullmatch(n) for n in names):
        raise S3Error(error_code, "SignedHeaders must be a ';'-separated list of lowercase names.")
    if len(set(names)) != len(names):
        raise S3Error(error_code, "SignedHeaders lists a header twice.")
    if "host" not in names:
        raise S3Error(error_code, "The host header must be signed.")
    return names


def _parse_authorization(value: str) -> tuple[_Credential, tuple[str, ...], str]:
    code = "AuthorizationHeaderMalformed"
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
    if not _HEX64_RE.fullmatch(signature):
        raise S3Error(code, "The authorization header is malformed; bad Signature.")
    credential = _parse_credential(fields["Credential"], code)
    return credential, _parse_signed_headers(fields["SignedHeaders"], code), signature


def _check_region(credential: _Credential, region: str | None, error_code: str) -> None:
    if region is not None and credential.region != region:
        raise S3Error(
            error_code,
            f"The authorization header is malformed; the region {credential.region!r} is wrong; "
            f"expecting {region!r}.",
            details={"Region": region},
        )


def _lookup_secret(credentials: Mapping[str, str], access_key: str) -> str:
    secret = credentials.get(access_key)
    # An empty secret would make every signature "verify" with a guessable key.
    if not secret:
        raise S3Error("InvalidAccessKeyId", details={"AWSAccessKeyId": access_key})
    return secret


def _payload_mode(value: str, *, presigned: bool) -> tuple[PayloadMode, str | None]:
    if _HEX64_RE.fullmatch(value):
        return PayloadMode.SIGNED_HEX, value.lower()
    mode = _PAYLOAD_MODES.get(value)
    if mode is None:
        if value in _NOT_IMPLEMENTED_PAYLOADS:
            raise S3Error("NotImplemented", f"x-amz-content-sha256 {value!r} is not supported.")
        raise S3Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, "
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER "
            "or a valid sha256 value.",
            details={"ArgumentName": "x-amz-content-sha256", "ArgumentValue": value[:128]},
        )
    if presigned and mode is not PayloadMode.UNSIGNED:
        raise S3Error("InvalidRequest", "A presigned URL cannot carry a streaming payload.")
    return mode, None


def _check_unsigned_amz_headers(
    collected: Mapping[str, list[str]], signed: tuple[str, ...]
) -> None:
    unsigned = sorted(n for n in collected if n.startswith("x-amz-") and n not in signed)
    if unsigned:
        raise S3Error(
            "AccessDenied",
            "There were headers present in the request which were not signed: "
            + ", ".join(unsigned)[:512],
            details={"HeadersNotSigned": ", ".join(unsigned)[:512]},
        )


def _int_header(collected: Mapping[str, list[str]], name: str) -> int | None:
    value = _first(collected, name)
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


def _has_body(collected: Mapping[str, list[str]]) -> bool:
    if collected.get("transfer-encoding"):
        return True
    length = _first(collected, "content-length")
    return length is not None and length.strip() not in ("", "0")


def _query_candidates(query: bytes | str, *, exclude: tuple[str, ...] = ()) -> list[bytes]:
    """The canonical query string, then the query as sent with its pairs sorted.

    botocore (and minio-py) sign the query pieces as they are in the URL, sorted
    but not re-encoded; they only ever send canonical encodings, but a query
    spelt differently (``%7E`` for ``~``) is signed that way. As for paths, the
    as-sent candidate covers the same bytes the routes will read.
    """
    canonical = canonical_query_string(query, exclude=exclude)
    excluded = {name.encode() for name in exclude}
    raw = _as_bytes(query)
    pairs = sorted(
        (name, value)
        for name, _, value in (piece.partition(b"=") for piece in raw.split(b"&"))
        if raw and name not in excluded
    )
    as_sent = b"&".join(name + b"=" + value for name, value in pairs)
    candidates = [canonical.encode("ascii")]
    if as_sent != candidates[0]:
        candidates.append(as_sent)
    return candidates


def _canonical_requests(
    method: str,
    raw_path: bytes,
    query_candidates: list[bytes],
    collected: Mapping[str, list[str]],
    signed_headers: tuple[str, ...],
    payload_hash: str,
) -> list[bytes]:
    header_block = b"".join(
        name.encode("ascii") + b":" + _canonical_header_value(collected.get(name, [])) + b"\n"
        for name in signed_headers
    )
    tail = (
        b"\n"
        + header_block
        + b"\n"
        + ";".join(signed_headers).encode("ascii")
        + b"\n"
        + _as_bytes(payload_hash)
    )
    head = method.upper().encode("ascii") + b"\n"
    return [
        head + uri.encode("ascii") + b"\n" + query + tail
        for uri in _uri_candidates(raw_path)
        for query in query_candidates
    ]


def _string_to_sign(amz_date: str, scope: str, canonical_request: bytes) -> str:
    digest = hashlib.sha256(canonical_request).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"


def _check_signature(
    candidates: list[bytes],
    amz_date: str,
    credential: _Credential,
    signing_key: bytes,
    provided: str,
) -> None:
    matched = False
    for canonical in candidates:
        if signatures_equal(
            sign_hex(signing_key, _string_to_sign(amz_date, credential.scope, canonical)),
            provided,
        ):
            matched = True
    if not matched:
        canonical = candidates[0]
        raise S3Error(
            "SignatureDoesNotMatch",
            details={
                "AWSAccessKeyId": credential.access_key,
                "StringToSign": _string_to_sign(amz_date, credential.scope, canonical),
                "SignatureProvided": provided,
                "CanonicalRequest": canonical.decode("utf-8", "replace"),
            },
        )


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
    now = _utc(now)
    collected = _collect_headers(headers)
    authorization = _first(collected, "authorization")
    query_names = {name for name, _ in _query_pairs(query_string)}
    presigned = bool(query_names & _PRESIGN_MARKERS)
    if authorization is not None and presigned:
        raise S3Error(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the "
            "Authorization header should be specified.",
        )
    if presigned:
        return _verify_presigned(
            method, raw_path, query_string, collected, credentials, now, region
        )
    if authorization is None:
        if {b"AWSAccessKeyId", b"Signature"} <= query_names:
            raise S3Error(
                "InvalidRequest",
                "Signature Version 2 presigned URLs are not supported; sign with "
                "AWS4-HMAC-SHA256 (boto3: Config(signature_version='s3v4')).",
            )
        raise S3Error("AccessDenied", "Anonymous access is not allowed; sign the request.")
    if not authorization.startswith(ALGORITHM):
        raise S3Error(
            "InvalidRequest",
            "The authorization mechanism you have provided is not supported. "
            "Please use AWS4-HMAC-SHA256.",
        )
    return _verify_header(method, raw_path, query_string, collected, credentials, now, region)


def _verify_header(
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
        _first(collected, "authorization") or ""
    )
    _check_region(credential, region, code)

    amz_date_header = _first(collected, "x-amz-date")
    if amz_date_header is not None:
        request_time = _parse_amz_date(amz_date_header.strip())
    else:
        date_header = _first(collected, "date")
        try:
            request_time = parsedate_to_datetime(date_header) if date_header else None
        except (TypeError, ValueError):
            request_time = None
        if request_time is not None:
            request_time = _utc(request_time)
    if request_time is None:
        raise S3Error(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    amz_date = format_amz_date(request_time)
    if credential.date != amz_date[:8]:
        raise S3Error(
            code,
            f"Invalid credential date {credential.date!r}. Date is not the same as X-Amz-Date.",
        )

    secret = _lookup_secret(credentials, credential.access_key)

    if abs(now - request_time) > MAX_SKEW:
        raise S3Error(
            "RequestTimeTooSkewed",
            details={
                "RequestTime": amz_date,
                "ServerTime": _iso(now),
                "MaxAllowedSkewMilliseconds": str(int(MAX_SKEW.total_seconds() * 1000)),
            },
        )

    payload_hash = _first(collected, "x-amz-content-sha256")
    if payload_hash is None:
        if _has_body(collected):
            raise S3Error(
                "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
            )
        payload_hash = EMPTY_SHA256
    payload_hash = payload_hash.strip()
    return _checked(
        method,
        raw_path,
        _query_candidates(query_string),
        collected,
        credential=credential,
        secret=secret,
        signed_headers=signed_headers,
        signature=signature,
        payload_hash=payload_hash,
        amz_date=amz_date,
    )


def _verify_presigned(
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
    credential = _parse_credential(params["X-Amz-Credential"], code)
    _check_region(credential, region, code)
    signed_headers = _parse_signed_headers(params["X-Amz-SignedHeaders"], code)
    signature = params["X-Amz-Signature"]
    if not _HEX64_RE.fullmatch(signature):
        raise S3Error(code, "X-Amz-Signature must be 64 hexadecimal digits.")
    request_time = _parse_amz_date(params["X-Amz-Date"])
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

    secret = _lookup_secret(credentials, credential.access_key)

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
                "Expires": _iso(expires_at),
                "ServerTime": _iso(now),
            },
        )

    return _checked(
        method,
        raw_path,
        _query_candidates(query_string, exclude=("X-Amz-Signature",)),
        collected,
        credential=credential,
        secret=secret,
        signed_headers=signed_headers,
        signature=signature,
        payload_hash=params.get("X-Amz-Content-Sha256", UNSIGNED_PAYLOAD),
        amz_date=amz_date,
        expires_at=expires_at,
    )


def _checked(
    method: str,
    raw_path: bytes,
    query_candidates: list[bytes],
    collected: Mapping[str, list[str]],
    *,
    credential: _Credential,
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
    mode, expected = _payload_mode(payload_hash, presigned=presigned)
    _check_unsigned_amz_headers(collected, signed_headers)

    signing_key = derive_signing_key(secret, credential.date, credential.region, credential.service)
    candidates = _canonical_requests(
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
        decoded_content_length=_int_header(collected, "x-amz-decoded-content-length"),
        declared_trailers=_declared_trailers(collected),
    )
