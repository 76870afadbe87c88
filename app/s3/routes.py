"""The S3 HTTP surface: a pure ASGI gateway in front of the native API.

A request signed with SigV4 (an `Authorization: AWS4-HMAC-SHA256 ...` header or
`X-Amz-Signature` in the query), or addressed to `<bucket>.<S3_DOMAIN>`, is an
S3 request; everything else goes on to the native routes. Bucket and key come
from the raw path exactly as sent, because that is what the client signed.

Each operation checks the signature, decodes the body through the verifying
decoders of `payload.py` (the object becomes visible only if the whole body
verified), calls `S3Service`, and answers in S3's XML.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import structlog
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.active_content import protective_headers
from app.api.http_ranges import RangeNotSatisfiable, http_date, parse_http_date, parse_range
from app.parsing import parse_decimal
from app.s3 import xml
from app.s3.errors import S3Error, s3_error_for
from app.s3.names import split_path, validate_bucket_name, validate_object_key
from app.s3.payload import request_body, strip_aws_chunked
from app.s3.service import DEFAULT_CONTENT_TYPE, S3Service, SourceChanged
from app.s3.sigv4 import VerifiedRequest, is_sigv4_request, parse_query, verify_request
from app.services import Services
from app.store.limits import MAX_CONTENT_TYPE_LENGTH, MAX_USER_METADATA_BYTES
from app.store.listing import ListedObject
from app.store.service import ObjectInfo

log = structlog.get_logger("app.s3")

XML = "application/xml"
MAX_KEYS = 1000
# Headers stored with an object and given back on GET/HEAD.
STORED_HEADERS = (
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
)
RESPONSE_OVERRIDES = {
    "response-content-type": "content-type",
    "response-content-language": "content-language",
    "response-expires": "expires",
    "response-cache-control": "cache-control",
    "response-content-disposition": "content-disposition",
    "response-content-encoding": "content-encoding",
}
# Tries of a copy whose source is replaced while it runs (then SlowDown).
COPY_ATTEMPTS = 5
_COPY_RANGE = re.compile(r"bytes=([0-9]{1,19})-([0-9]{1,19})")

ServiceLookup = Callable[[Scope], Services | None]


class S3Gateway:
    def __init__(self, app: ASGIApp, services: ServiceLookup) -> None:
        self.app = app
        self._services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        services = self._services(scope)
        headers = Headers(scope=scope)
        virtual_bucket = _virtual_host_bucket(headers, services)
        if virtual_bucket is None and not is_sigv4_request(headers, scope["query_string"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        response = await _handle(request, services, virtual_bucket)
        await response(scope, receive, send)


def draining_refusal(scope: Scope, services: Services | None, request_id: str) -> bytes | None:
    """The `<Error>` body of the 503 that refuses an S3 write during shutdown
    (the request middleware sends it); None if the request is not an S3 one."""
    headers = Headers(scope=scope)
    if _virtual_host_bucket(headers, services) is None and not is_sigv4_request(
        headers, scope["query_string"]
    ):
        return None
    path = scope.get("raw_path") or scope["path"].encode()
    error = S3Error("ServiceUnavailable", "The service is shutting down; retry shortly.")
    return xml.s3_error_xml(error, resource=path.decode("latin-1"), request_id=request_id)


def _virtual_host_bucket(headers: Headers, services: Services | None) -> str | None:
    domain = services.settings.s3_domain if services is not None else None
    if not domain:
        return None
    host = headers.get("host", "").rsplit(":", 1)[0].lower()
    suffix = "." + domain.lower().lstrip(".")
    if host.endswith(suffix) and len(host) > len(suffix):
        return host[: -len(suffix)]
    return None


async def _handle(
    request: Request, services: Services | None, virtual_bucket: str | None
) -> Response:
    path = request.scope.get("raw_path") or request.scope["path"].encode()
    try:
        if services is None:
            raise S3Error("ServiceUnavailable", "The service is starting.")
        credentials = {
            key: secret.get_secret_value()
            for key, secret in services.settings.s3_credentials.items()
        }
        if not credentials:
            raise S3Error(
                "AccessDenied",
                "The S3 API is turned off: no S3_CREDENTIALS are configured.",
            )
        verified = verify_request(
            request.method,
            path,
            request.scope["query_string"],
            request.headers,
            credentials,
            now=datetime.now(UTC),
            region=services.settings.s3_region,
        )
        if virtual_bucket is not None:
            bucket: str | None = virtual_bucket
            key: str | None = unquote(path.decode("latin-1"))[1:] or None
        else:
            bucket, key = split_path(path)
        operation = S3Operation(request, services, verified, bucket, key)
        return await operation.run()
    except ClientDisconnect:
        return Response(status_code=400)
    except Exception as exc:
        return _error_response(_as_s3_error(exc, request.method), request, path)


def _as_s3_error(exc: BaseException, method: str) -> S3Error:
    """What an operation raised, as an S3 client reads it."""
    if isinstance(exc, S3Error):
        return exc
    error = s3_error_for(exc)
    if error is not None:
        return error
    log.error("s3_internal_error", method=method, exc_info=exc)
    return S3Error("InternalError")


# Complete answers normally within this many seconds; later, 200 + whitespace.
COMPLETE_EARLY_ANSWER = 5.0
KEEPALIVE_INTERVAL = 5.0
XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'


def _request_id() -> str:
    return str(structlog.contextvars.get_contextvars().get("request_id", ""))


def _error_response(error: S3Error, request: Request, path: bytes) -> Response:
    request_id = _request_id()
    headers = {"x-amz-request-id": request_id, **error.headers}
    if error.status == 503:
        headers.setdefault("Retry-After", "5")
    if request.method == "HEAD" or error.status == 304:
        return Response(status_code=error.status, headers=headers)
    body = xml.s3_error_xml(
        error, resource=error.resource or path.decode("latin-1"), request_id=request_id
    )
    return Response(body, status_code=error.status, headers=headers, media_type=XML)


def _xml(body: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        body,
        status_code=status,
        media_type=XML,
        headers={"x-amz-request-id": _request_id(), **(headers or {})},
    )


def _empty(status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        status_code=status, headers={"x-amz-request-id": _request_id(), **(headers or {})}
    )


def _int_param(query: Mapping[str, str], name: str, default: int, *, top: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    value = parse_decimal(raw.strip())
    if value is None:
        raise S3Error(
            "InvalidArgument",
            f"{name} must be a non-negative integer of at most 19 digits.",
            details={"ArgumentName": name, "ArgumentValue": raw[:64]},
        )
    return min(value, top)


class S3Operation:
    """One S3 request: picks the operation from method, path and query."""

    def __init__(
        self,
        request: Request,
        services: Services,
        verified: VerifiedRequest,
        bucket: str | None,
        key: str | None,
    ) -> None:
        self.request = request
        self.headers = request.headers
        self.s3: S3Service = services.s3
        self.store = services.store
        self.settings = services.settings
        self.verified = verified
        self.bucket = bucket
        self.key = key
        self.query: dict[str, str] = {}
        for name, value in parse_query(request.scope["query_string"]):
            # Markers and prefixes go to the database, which cannot hold NUL.
            if "\x00" in name or "\x00" in value:
                raise S3Error("InvalidArgument", "A query parameter contains NUL.")
            self.query.setdefault(name, value)

    async def run(self) -> Response:
        method = self.request.method
        if self.bucket is None:
            if method == "GET":
                return await self.list_buckets()
            raise S3Error("MethodNotAllowed")
        validate_bucket_name(self.bucket, allow_reserved=method != "PUT")
        if self.key is None:
            return await self._bucket_operation(method)
        validate_object_key(self.key)
        return await self._object_operation(method)

    async def _bucket_operation(self, method: str) -> Response:
        query = self.query
        handlers: dict[tuple[str, str | None], Callable[[], Awaitable[Response]]] = {
            ("GET", "location"): self.get_location,
            ("GET", "versioning"): self.get_versioning,
            ("PUT", "versioning"): self.put_versioning,
            ("GET", "versions"): self.list_versions,
            ("GET", "uploads"): self.list_uploads,
            ("POST", "delete"): self.delete_objects,
        }
        for (verb, flag), handler in handlers.items():
            if method == verb and flag in query:
                return await handler()
        unsupported = {"acl", "policy", "cors", "lifecycle", "tagging", "website", "encryption"}
        if unsupported & set(query):
            raise S3Error("NotImplemented")
        if method == "GET":
            if query.get("list-type") == "2":
                return await self.list_objects_v2()
            return await self.list_objects_v1()
        if method == "PUT":
            return await self.create_bucket()
        if method == "HEAD":
            await self.s3.require_bucket(self._bucket())
            return _empty()
        if method == "DELETE":
            await self.s3.delete_bucket(self._bucket())
            return _empty(204)
        raise S3Error("MethodNotAllowed")

    async def _object_operation(self, method: str) -> Response:
        query = self.query
        if query.get("versionId", xml.NULL_VERSION_ID) != xml.NULL_VERSION_ID:
            # Buckets are never versioned: "null" names an object's one version.
            raise S3Error("InvalidArgument", "Invalid version id specified")
        if method == "PUT":
            if "partNumber" in query and "uploadId" in query:
                if "x-amz-copy-source" in self.headers:
                    return await self.upload_part_copy()
                return await self.upload_part()
            if "x-amz-copy-source" in self.headers:
                return await self.copy_object()
            if {"acl", "tagging", "retention", "legal-hold"} & set(query):
                raise S3Error("NotImplemented")
            return await self.put_object()
        if method in ("GET", "HEAD"):
            if "uploadId" in query and method == "GET":
                return await self.list_parts()
            if {"acl", "tagging", "attributes", "torrent"} & set(query):
                raise S3Error("NotImplemented")
            return await self.get_object(head=method == "HEAD")
        if method == "POST":
            if "uploads" in query:
                return await self.create_upload()
            if "uploadId" in query:
                return await self.complete_upload()
            raise S3Error("MethodNotAllowed")
        if method == "DELETE":
            if "uploadId" in query:
                await self.s3.abort_upload(self._bucket(), self._key(), query["uploadId"])
                return _empty(204)
            await self.s3.delete_object(self._bucket(), self._key())
            return _empty(204)
        raise S3Error("MethodNotAllowed")

    def _bucket(self) -> str:
        assert self.bucket is not None
        return self.bucket

    def _key(self) -> str:
        assert self.key is not None
        return self.key

    def _declared_size(self) -> int | None:
        """The decoded body size the client announced, if it did."""
        declared = self.headers.get("content-length")
        size = self.verified.decoded_content_length
        if size is None and declared is not None and not self.verified.is_aws_chunked:
            size = parse_decimal(declared.strip())
        return size

    def _body(self) -> AsyncIterator[bytes]:
        size = self._declared_size()
        if size is not None and size > self.settings.max_upload_size:
            raise S3Error(
                "EntityTooLarge",
                f"Your proposed upload exceeds the maximum allowed size of "
                f"{self.settings.max_upload_size} bytes.",
            )
        return request_body(self.request.stream(), self.verified, self.headers)

    def _content_type(self) -> str | None:
        """The request's Content-Type, refused before the body if it cannot be stored."""
        value = self.headers.get("content-type")
        if value is not None and len(value) > MAX_CONTENT_TYPE_LENGTH:
            raise S3Error(
                "InvalidArgument",
                f"The Content-Type is longer than {MAX_CONTENT_TYPE_LENGTH} characters.",
                details={"ArgumentName": "Content-Type"},
            )
        return value

    def _metadata(self) -> dict[str, str]:
        """Stored headers and user metadata (checked against S3's size limit)."""
        stored: dict[str, str] = {}
        user_bytes = 0
        for name, value in self.headers.items():
            lower = name.lower()
            if lower.startswith("x-amz-meta-"):
                user_bytes += len(lower) - len("x-amz-meta-") + len(value.encode("latin-1"))
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

    # --- buckets -------------------------------------------------------------------

    async def list_buckets(self) -> Response:
        buckets = await self.s3.list_buckets()
        entries = [xml.BucketEntry(name=b.name, creation_date=b.created_at) for b in buckets]
        return _xml(xml.list_buckets_xml(entries))

    async def create_bucket(self) -> Response:
        await self._drain_small_body()
        await self.s3.create_bucket(self._bucket())
        return _empty(headers={"Location": f"/{self._bucket()}"})

    async def _drain_small_body(self) -> bytes:
        data = b""
        async for piece in self._body():
            data += piece
            if len(data) > xml.MAX_XML_BYTES:
                raise S3Error("MalformedXML", "The XML body is too large.")
        return data

    async def get_location(self) -> Response:
        await self.s3.require_bucket(self._bucket())
        return _xml(xml.location_constraint_xml(self.settings.s3_region))

    async def get_versioning(self) -> Response:
        await self.s3.require_bucket(self._bucket())
        return _xml(xml.versioning_configuration_xml())

    async def put_versioning(self) -> Response:
        """Suspended is what an unversioned bucket already is; Enabled would
        promise old versions that are never kept, so it is refused."""
        await self.s3.require_bucket(self._bucket())
        status = xml.parse_versioning_configuration(await self._drain_small_body())
        if status == "Enabled":
            raise S3Error(
                "NotImplemented",
                "Versioning is not supported: every object has one version (null).",
            )
        return _empty()

    def _encoding_type(self) -> str | None:
        value = self.query.get("encoding-type")
        if value is None:
            return None
        if value != "url":
            raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request")
        return value

    async def list_objects_v1(self) -> Response:
        prefix = self.query.get("prefix", "")
        delimiter = self.query.get("delimiter") or None
        marker = self.query.get("marker", "")
        max_keys = _int_param(self.query, "max-keys", MAX_KEYS, top=MAX_KEYS)
        listing = await self.s3.list_objects(
            self._bucket(),
            prefix=prefix,
            delimiter=delimiter,
            after=marker or None,
            max_keys=max_keys,
        )
        return _xml(
            xml.list_objects_v1_xml(
                bucket=self._bucket(),
                prefix=prefix,
                marker=marker,
                max_keys=max_keys,
                is_truncated=listing.truncated,
                contents=[_entry(info) for info in listing.objects],
                common_prefixes=listing.prefixes,
                delimiter=delimiter,
                next_marker=listing.last if listing.truncated and delimiter else None,
                encoding_type=self._encoding_type(),
            )
        )

    async def list_versions(self) -> Response:
        """ListObjectVersions: the objects, each as its one version "null"."""
        prefix = self.query.get("prefix", "")
        delimiter = self.query.get("delimiter") or None
        key_marker = self.query.get("key-marker", "")
        version_id_marker = self.query.get("version-id-marker", "")
        max_keys = _int_param(self.query, "max-keys", MAX_KEYS, top=MAX_KEYS)
        encoding_type = self._encoding_type()
        # A key's only version is "null": after (key, "null") comes the next key.
        listing = await self.s3.list_objects(
            self._bucket(),
            prefix=prefix,
            delimiter=delimiter,
            after=key_marker or None,
            max_keys=max_keys,
        )
        return _xml(
            xml.list_object_versions_xml(
                bucket=self._bucket(),
                prefix=prefix,
                key_marker=key_marker,
                version_id_marker=version_id_marker,
                max_keys=max_keys,
                is_truncated=listing.truncated,
                versions=[_entry(info) for info in listing.objects],
                common_prefixes=listing.prefixes,
                delimiter=delimiter,
                next_key_marker=listing.last if listing.truncated else None,
                encoding_type=encoding_type,
            )
        )

    async def list_objects_v2(self) -> Response:
        prefix = self.query.get("prefix", "")
        delimiter = self.query.get("delimiter") or None
        token = self.query.get("continuation-token")
        start_after = self.query.get("start-after")
        max_keys = _int_param(self.query, "max-keys", MAX_KEYS, top=MAX_KEYS)
        after = _decode_token(token) if token else start_after
        listing = await self.s3.list_objects(
            self._bucket(), prefix=prefix, delimiter=delimiter, after=after, max_keys=max_keys
        )
        fetch_owner = self.query.get("fetch-owner") == "true"
        return _xml(
            xml.list_objects_v2_xml(
                bucket=self._bucket(),
                prefix=prefix,
                max_keys=max_keys,
                is_truncated=listing.truncated,
                contents=[_entry(info, owner=fetch_owner) for info in listing.objects],
                common_prefixes=listing.prefixes,
                delimiter=delimiter,
                continuation_token=token,
                next_continuation_token=(
                    _encode_token(listing.last) if listing.truncated and listing.last else None
                ),
                start_after=start_after,
                encoding_type=self._encoding_type(),
            )
        )

    async def list_uploads(self) -> Response:
        prefix = self.query.get("prefix", "")
        delimiter = self.query.get("delimiter") or None
        key_marker = self.query.get("key-marker") or None
        upload_id_marker = self.query.get("upload-id-marker") or None
        max_uploads = _int_param(self.query, "max-uploads", MAX_KEYS, top=MAX_KEYS)
        listing = await self.s3.list_uploads(
            self._bucket(),
            prefix=prefix,
            delimiter=delimiter,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            max_uploads=max_uploads,
        )
        return _xml(
            xml.list_multipart_uploads_xml(
                bucket=self._bucket(),
                uploads=[
                    xml.UploadEntry(key=u.key, upload_id=u.upload_id, initiated=u.initiated)
                    for u in listing.uploads
                ],
                key_marker=key_marker or "",
                upload_id_marker=upload_id_marker or "",
                next_key_marker=listing.next_key if listing.truncated else None,
                next_upload_id_marker=listing.next_upload_id if listing.truncated else None,
                max_uploads=max_uploads,
                is_truncated=listing.truncated,
                prefix=prefix,
                delimiter=delimiter,
                common_prefixes=listing.prefixes,
                encoding_type=self._encoding_type(),
            )
        )

    async def delete_objects(self) -> Response:
        body = await self._drain_small_body()
        request = xml.parse_delete_objects(body)
        await self.s3.require_bucket(self._bucket())
        deleted: list[str] = []
        errors: list[xml.DeleteError] = []
        for key in request.keys:
            try:
                validate_object_key(key)
                await self.s3.delete_object(self._bucket(), key)
                deleted.append(key)
            except S3Error as exc:
                errors.append(xml.DeleteError(key=key, code=exc.code, message=exc.message))
        return _xml(xml.delete_result_xml(deleted, errors, quiet=request.quiet))

    # --- objects -------------------------------------------------------------------

    async def put_object(self) -> Response:
        content_type, metadata = self._content_type(), self._metadata()
        info = await self.s3.put_object(
            self._bucket(),
            self._key(),
            self._body(),
            content_type=content_type,
            metadata=metadata,
            expected_size=self._declared_size(),
        )
        return _empty(headers={"ETag": info.etag})

    async def get_object(self, *, head: bool) -> Response:
        info = await self.s3.head_object(self._bucket(), self._key())
        headers = _object_headers(info)
        precondition = _check_preconditions(self.headers, info)
        if precondition is not None:
            if precondition == 304:
                return _empty(304, {"ETag": info.etag, "Last-Modified": headers["Last-Modified"]})
            raise S3Error("PreconditionFailed", resource=f"/{self.bucket}/{self.key}")
        for param, header in RESPONSE_OVERRIDES.items():
            if param in self.query:
                headers[_title(header)] = self.query[param]
        # After the overrides: a presigned URL may ask for text/html.
        headers.update(protective_headers(headers["Content-Type"]))
        start, end, status = 0, info.size, 200
        range_header = self.headers.get("range")
        if range_header:
            try:
                byte_range = parse_range(range_header, info.size)
            except RangeNotSatisfiable as exc:
                if "malformed" in exc.detail:
                    byte_range = None  # S3 ignores a malformed Range
                else:
                    raise S3Error(
                        "InvalidRange",
                        "The requested range is not satisfiable",
                        headers={"Content-Range": f"bytes */{info.size}"},
                        details={"ActualObjectSize": str(info.size)},
                    ) from None
            if byte_range is not None:
                start, end, status = byte_range.start, byte_range.end, 206
                headers["Content-Range"] = byte_range.content_range(info.size)
        headers["Content-Length"] = str(end - start)
        headers["x-amz-request-id"] = _request_id()
        if head:
            return Response(status_code=status, headers=headers)
        body = await self.store.open_range(info, start, end)
        return StreamingResponse(body, status_code=status, headers=headers)

    def _copy_source(self) -> tuple[str, str]:
        """The source's bucket and key, validated like a request's own: a
        source outside the S3 buckets (the native API's `_native`) is refused."""
        raw = self.headers["x-amz-copy-source"]
        try:
            source = unquote(raw.split("?", 1)[0], errors="strict").lstrip("/")
        except UnicodeDecodeError:
            raise S3Error("InvalidArgument", "Copy Source is not valid UTF-8.") from None
        bucket, _, key = source.partition("/")
        if not bucket or not key:
            raise S3Error(
                "InvalidArgument",
                "Copy Source must mention the source bucket and key: sourcebucket/sourcekey.",
            )
        validate_bucket_name(bucket, allow_reserved=True)
        validate_object_key(key)
        return bucket, key

    async def _source_object(self) -> ObjectInfo:
        bucket, key = self._copy_source()
        # Read access to the source bucket, exactly as a GET of it would need.
        await self.s3.require_bucket(bucket)
        source = await self.s3.head_object(bucket, key)
        condition = _check_copy_preconditions(self.headers, source)
        if condition:
            raise S3Error("PreconditionFailed")
        return source

    async def _retrying_copy(self, copy: Callable[[], Awaitable[Response]]) -> Response:
        """Run `copy` again (reading the source and its conditions afresh) when
        the source was replaced while it ran: the request is valid, and the
        copy takes the version current then. A source that keeps changing
        gets SlowDown after COPY_ATTEMPTS."""
        for _ in range(COPY_ATTEMPTS):
            try:
                return await copy()
            except SourceChanged:
                log.info("copy_source_changed", bucket=self.bucket, key=self.key)
        raise S3Error("SlowDown", "The source object kept changing while being copied.")

    async def copy_object(self) -> Response:
        return await self._retrying_copy(self._copy_object_once)

    async def _copy_object_once(self) -> Response:
        source = await self._source_object()
        directive = self.headers.get("x-amz-metadata-directive", "COPY").upper()
        if directive not in ("COPY", "REPLACE"):
            raise S3Error("InvalidArgument", "Unknown metadata directive.")
        same = (source.bucket, source.key) == (self.bucket, self.key)
        if same and directive == "COPY":
            raise S3Error(
                "InvalidRequest",
                "This copy request is illegal because it is trying to copy an object to itself "
                "without changing the object's metadata, storage class, website redirect "
                "location or encryption attributes.",
            )
        if directive == "REPLACE":
            content_type = self._content_type() or DEFAULT_CONTENT_TYPE
            metadata: dict[str, Any] = self._metadata()
        else:
            content_type, metadata = source.content_type, source.metadata
        copied = await self.s3.copy_object(
            source,
            bucket=self._bucket(),
            key=self._key(),
            content_type=content_type,
            metadata=metadata,
        )
        return _xml(xml.copy_object_xml(copied.etag, copied.updated_at))

    # --- multipart ------------------------------------------------------------------

    def _part_number(self) -> int:
        raw = self.query.get("partNumber", "")
        number = parse_decimal(raw.strip(), max_digits=5)
        if number is None:
            raise S3Error(
                "InvalidArgument",
                f"Part number must be an integer between 1 and {xml.MAX_PART_NUMBER}, inclusive.",
                details={"ArgumentName": "partNumber", "ArgumentValue": raw[:64]},
            )
        return number

    async def create_upload(self) -> Response:
        upload = await self.s3.create_upload(
            self._bucket(),
            self._key(),
            content_type=self._content_type(),
            metadata=self._metadata(),
        )
        return _xml(
            xml.initiate_multipart_upload_xml(self._bucket(), self._key(), upload.upload_id)
        )

    async def upload_part(self) -> Response:
        part_number = self._part_number()
        etag = await self.s3.upload_part(
            self._bucket(),
            self._key(),
            self.query["uploadId"],
            part_number,
            self._body(),
            expected_size=self._declared_size(),
        )
        return _empty(headers={"ETag": etag})

    async def upload_part_copy(self) -> Response:
        return await self._retrying_copy(self._upload_part_copy_once)

    async def _upload_part_copy_once(self) -> Response:
        source = await self._source_object()
        start, end = 0, source.size
        copy_range = self.headers.get("x-amz-copy-source-range")
        if copy_range:
            match = _COPY_RANGE.fullmatch(copy_range.strip())
            if match is None:
                raise S3Error(
                    "InvalidArgument",
                    "The x-amz-copy-source-range value must be of the form bytes=first-last.",
                )
            start, last = int(match.group(1)), int(match.group(2))
            if last < start or last >= source.size:
                raise S3Error(
                    "InvalidRange",
                    "The requested range is not satisfiable",
                    details={"ActualObjectSize": str(source.size)},
                )
            end = last + 1
        etag = await self.s3.upload_part_copy(
            self._bucket(),
            self._key(),
            self.query["uploadId"],
            self._part_number(),
            source,
            start,
            end,
        )
        return _xml(xml.copy_part_xml(etag, datetime.now(UTC)))

    async def complete_upload(self) -> Response:
        """Completing may wait for spooled parts to reach Telegram. Past
        COMPLETE_EARLY_ANSWER seconds, do what AWS does: answer 200 at once,
        keep the connection alive with whitespace (SDKs time out reads after
        60 s), and end with the result, or with an <Error> document if it
        failed after all (SDKs look for one in a 200 Complete)."""
        body = await self._drain_small_body()
        parts = xml.parse_complete_multipart(body)
        bucket, key = self._bucket(), self._key()
        location = f"/{self.bucket}/{self.key}"
        completing = asyncio.ensure_future(
            self.s3.complete_upload(
                bucket,
                key,
                self.query["uploadId"],
                [(part.part_number, part.etag) for part in parts],
            )
        )
        try:
            info = await asyncio.wait_for(asyncio.shield(completing), COMPLETE_EARLY_ANSWER)
        except TimeoutError:
            return StreamingResponse(
                self._complete_in_whitespace(completing, location),
                media_type=XML,
                headers={"x-amz-request-id": _request_id()},
            )
        except BaseException:
            completing.cancel()
            raise
        return _xml(xml.complete_multipart_upload_xml(location, bucket, key, info.etag))

    # A client that hangs up does not stop the completion (its task is not
    # cancelled): the parts are the client's, and it may ask again.
    async def _complete_in_whitespace(
        self, completing: asyncio.Future[ObjectInfo], location: str
    ) -> AsyncIterator[bytes]:
        yield XML_DECLARATION
        while True:
            try:
                info = await asyncio.wait_for(asyncio.shield(completing), KEEPALIVE_INTERVAL)
            except TimeoutError:
                yield b" "
                continue
            except Exception as exc:
                error = _as_s3_error(exc, self.request.method)
                document = xml.s3_error_xml(error, resource=location, request_id=_request_id())
            else:
                document = xml.complete_multipart_upload_xml(
                    location, self._bucket(), self._key(), info.etag
                )
            yield document.removeprefix(XML_DECLARATION)
            return

    async def list_parts(self) -> Response:
        upload_id = self.query["uploadId"]
        marker = _int_param(self.query, "part-number-marker", 0, top=xml.MAX_PART_NUMBER)
        max_parts = _int_param(self.query, "max-parts", MAX_KEYS, top=MAX_KEYS)
        parts = await self.s3.list_parts(
            self._bucket(), self._key(), upload_id, after=marker, limit=max_parts + 1
        )
        page = parts[:max_parts]
        return _xml(
            xml.list_parts_xml(
                bucket=self._bucket(),
                key=self._key(),
                upload_id=upload_id,
                parts=[
                    xml.PartEntry(
                        part_number=p.part_number,
                        last_modified=p.created_at,
                        etag=p.etag,
                        size=p.size,
                    )
                    for p in page
                ],
                part_number_marker=marker,
                max_parts=max_parts,
                is_truncated=len(parts) > max_parts,
            )
        )


def _entry(info: ListedObject, *, owner: bool = True) -> xml.ObjectEntry:
    return xml.ObjectEntry(
        key=info.key,
        last_modified=info.modified,
        etag=info.etag,
        size=info.size,
        owner=xml.DEFAULT_OWNER if owner else None,
    )


def _encode_token(last: str) -> str:
    import base64

    return base64.urlsafe_b64encode(last.encode()).decode()


def _decode_token(token: str) -> str:
    import base64
    import binascii

    try:
        after = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        after = "\x00"
    if "\x00" in after:
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect")
    return after


def _title(header: str) -> str:
    return "-".join(part.capitalize() for part in header.split("-"))


def _object_headers(info: ObjectInfo) -> dict[str, str]:
    headers = {
        "ETag": info.etag,
        "Last-Modified": http_date(info.updated_at),
        "Accept-Ranges": "bytes",
        "Content-Type": info.content_type,
    }
    for name, value in info.metadata.items():
        if name.startswith("x-amz-meta-"):
            headers[name] = value
        elif name in STORED_HEADERS:
            headers[_title(name)] = value
    return headers


def _seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _etag_in(header: str, etag: str) -> bool:
    if header.strip() == "*":
        return True
    return any(tag.strip().strip('"') == etag.strip('"') for tag in header.split(","))


def _check_preconditions(headers: Mapping[str, str], info: ObjectInfo) -> int | None:
    """RFC 7232 order, as S3 applies it: 412, 304, or None to go on."""
    modified = _seconds(info.updated_at)
    if_match = headers.get("if-match")
    if if_match is not None and not _etag_in(if_match, info.etag):
        return 412
    if if_match is None:
        since = parse_http_date(headers.get("if-unmodified-since", ""))
        if since is not None and modified > since:
            return 412
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        return 304 if _etag_in(if_none_match, info.etag) else None
    since = parse_http_date(headers.get("if-modified-since", ""))
    if since is not None and modified <= since:
        return 304
    return None


def _check_copy_preconditions(headers: Mapping[str, str], info: ObjectInfo) -> bool:
    """x-amz-copy-source-if-*: True when the copy must not happen."""
    modified = _seconds(info.updated_at)
    match = headers.get("x-amz-copy-source-if-match")
    if match is not None and not _etag_in(match, info.etag):
        return True
    none_match = headers.get("x-amz-copy-source-if-none-match")
    if none_match is not None and _etag_in(none_match, info.etag):
        return True
    unmodified = parse_http_date(headers.get("x-amz-copy-source-if-unmodified-since", ""))
    if unmodified is not None and modified > unmodified:
        return True
    since = parse_http_date(headers.get("x-amz-copy-source-if-modified-since", ""))
    return since is not None and modified <= since
