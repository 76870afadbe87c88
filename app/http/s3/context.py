"""One S3 request as the handlers see it, and the answers they build.

The gateway has verified the signature and split the path; an `S3Request`
carries that, the services, and the request's parsed query. Its helpers read
what several operations read the same way: the body (through the verifying
decoders of `payload.py`), Content-Type, stored headers and user metadata.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from app.http.s3 import metadata_text
from app.http.s3.aws_chunked import strip_aws_chunked
from app.http.s3.errors import S3Error
from app.http.s3.payload import request_body
from app.http.s3.payload_checks import CHECKSUM_HEADER_PREFIX, BodyResult
from app.http.s3.service import S3Service
from app.http.s3.sigv4 import VerifiedRequest, parse_query
from app.http.s3.xml.parsing import MAX_XML_BYTES
from app.http.shared.parsing import parse_decimal
from app.kit.logging import REQUEST_ID
from app.store.limits import MAX_CONTENT_TYPE_LENGTH, MAX_USER_METADATA_BYTES
from app.store.services import Services

XML = "application/xml"
#: The most keys, uploads or parts one listing page holds (S3's own cap).
MAX_KEYS = 1000
#: Headers stored with an object and given back on GET/HEAD.
STORED_HEADERS = (
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
)


class S3Request:
    """A verified S3 request: who asked for what, and the services to do it."""

    def __init__(
        self,
        request: Request,
        headers: Headers,
        services: Services,
        s3: S3Service,
        verified: VerifiedRequest,
        bucket: str | None,
        key: str | None,
    ) -> None:
        self.request = request
        self.method = request.method
        self.headers = headers
        self.s3 = s3
        self.store = services.store
        self.settings = services.settings
        self.verified = verified
        self._bucket_name = bucket
        self._key_name = key
        self.query: dict[str, str] = {}
        for name, value in parse_query(request.scope["query_string"]):
            # Markers and prefixes go to the database, which cannot hold NUL.
            if "\x00" in name or "\x00" in value:
                raise S3Error("InvalidArgument", "A query parameter contains NUL.")
            self.query.setdefault(name, value)

    @property
    def has_bucket(self) -> bool:
        return self._bucket_name is not None

    @property
    def has_key(self) -> bool:
        return self._key_name is not None

    @property
    def bucket(self) -> str:
        """The bucket (the router sends only bucket and object requests here)."""
        assert self._bucket_name is not None
        return self._bucket_name

    @property
    def key(self) -> str:
        assert self._key_name is not None
        return self._key_name

    def int_param(self, name: str, default: int, *, top: int) -> int:
        """A non-negative integer query parameter, capped at `top`."""
        return _non_negative(name, self.query.get(name), default, top)

    def int_header(self, name: str, default: int, *, top: int) -> int:
        """A non-negative integer header, capped at `top`."""
        return _non_negative(name, self.headers.get(name), default, top)

    def declared_size(self) -> int | None:
        """The decoded body size the client announced, if it did."""
        declared = self.headers.get("content-length")
        size = self.verified.decoded_content_length
        if size is None and declared is not None and not self.verified.is_aws_chunked:
            size = parse_decimal(declared.strip())
        return size

    def body(
        self, result: BodyResult | None = None, *, header_checksums: bool = True
    ) -> AsyncIterator[bytes]:
        """The verified body; `result` learns its checksums. Without
        `header_checksums`, x-amz-checksum-* headers are not about this body
        (CompleteMultipartUpload's name the whole object)."""
        size = self.declared_size()
        if size is not None and size > self.settings.max_upload_size:
            raise S3Error(
                "EntityTooLarge",
                f"Your proposed upload exceeds the maximum allowed size of "
                f"{self.settings.max_upload_size} bytes.",
            )
        headers: Mapping[str, str] = self.headers
        if not header_checksums:
            headers = {
                name: value
                for name, value in self.headers.items()
                if not name.lower().startswith(CHECKSUM_HEADER_PREFIX)
            }
        return request_body(self.request.stream(), self.verified, headers, result=result)

    async def small_body(self, *, header_checksums: bool = True) -> bytes:
        """An XML request body, refused past MAX_XML_BYTES."""
        data = b""
        async for piece in self.body(header_checksums=header_checksums):
            data += piece
            if len(data) > MAX_XML_BYTES:
                raise S3Error("MalformedXML", "The XML body is too large.")
        return data

    def content_type(self) -> str | None:
        """The request's Content-Type, refused before the body if it cannot be stored."""
        value = self.headers.get("content-type")
        if value is not None and len(value) > MAX_CONTENT_TYPE_LENGTH:
            raise S3Error(
                "InvalidArgument",
                f"The Content-Type is longer than {MAX_CONTENT_TYPE_LENGTH} characters.",
                details={"ArgumentName": "Content-Type"},
            )
        return value

    def metadata(self) -> dict[str, str]:
        """Stored headers and user metadata (checked against S3's size limit)."""
        return stored_metadata(self.headers.items())

    def encoding_type(self) -> str | None:
        value = self.query.get("encoding-type")
        if value is None:
            return None
        if value != "url":
            raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request")
        return value


def _non_negative(name: str, raw: str | None, default: int, top: int) -> int:
    if raw is None or not raw.strip():
        return default
    value = parse_decimal(raw.strip())
    if value is None:
        raise S3Error(
            "InvalidArgument",
            f"{name} must be a non-negative integer of at most 19 digits.",
            details={"ArgumentName": name, "ArgumentValue": raw[:64]},
        )
    return min(value, top)


def stored_metadata(fields: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Of a request's headers (or a POST form's fields): the stored headers
    and user metadata, checked against S3's size limit."""
    stored: dict[str, str] = {}
    user_bytes = 0
    for name, value in fields:
        lower = name.lower()
        if lower.startswith("x-amz-meta-"):
            value = metadata_text.from_header(value)
            user_bytes += len(lower) - len("x-amz-meta-") + len(value.encode("utf-8"))
        if lower.startswith("x-amz-meta-") or lower in STORED_HEADERS:
            stored[lower] = value
    if user_bytes > MAX_USER_METADATA_BYTES:
        raise S3Error(
            "MetadataTooLarge",
            f"Your metadata headers exceed the maximum allowed metadata size of "
            f"{MAX_USER_METADATA_BYTES} bytes.",
            details={"MaxSizeAllowed": str(MAX_USER_METADATA_BYTES)},
        )
    encoding = strip_aws_chunked(stored.get("content-encoding"))
    if encoding is None:
        stored.pop("content-encoding", None)
    else:
        stored["content-encoding"] = encoding
    return stored


def request_id() -> str:
    return REQUEST_ID.get() or ""


def xml_response(
    body: bytes, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        body,
        status_code=status,
        media_type=XML,
        headers={"x-amz-request-id": request_id(), **(headers or {})},
    )


def empty_response(status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        status_code=status, headers={"x-amz-request-id": request_id(), **(headers or {})}
    )
