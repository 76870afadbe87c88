"""Object operations: PUT, GET/HEAD (conditions, Range, response overrides),
DELETE and CopyObject, and the copy-source rules UploadPartCopy shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import structlog
from starlette.responses import Response, StreamingResponse

from app.http.s3 import checksum_headers, metadata_text, sse, tagging
from app.http.s3.context import (
    STORED_HEADERS,
    S3Request,
    empty_response,
    request_id,
    xml_response,
)
from app.http.s3.errors import S3Error
from app.http.s3.names import validate_bucket_name, validate_object_key
from app.http.s3.payload_checks import BodyResult
from app.http.s3.service import SourceChanged
from app.http.s3.write_conditions import WriteConditions
from app.http.s3.xml.responses import copy_object_xml
from app.http.shared.active_content import protective_headers
from app.http.shared.conditions import NOT_MODIFIED, copy_source_refused, evaluate, http_date
from app.http.shared.header_names import is_header_name
from app.http.shared.parsing import parse_decimal
from app.http.shared.ranges import RangeNotSatisfiable, parse_range
from app.store.limits import MAX_PART_NUMBER
from app.store.service import DEFAULT_CONTENT_TYPE, ObjectInfo, StoredChecksum

log = structlog.get_logger("app.s3")

T = TypeVar("T")

RESPONSE_OVERRIDES = {
    "response-content-type": "content-type",
    "response-content-language": "content-language",
    "response-expires": "expires",
    "response-cache-control": "cache-control",
    "response-content-disposition": "content-disposition",
    "response-content-encoding": "content-encoding",
}
#: Tries of a copy whose source is replaced while it runs (then SlowDown).
COPY_ATTEMPTS = 5


async def put_object(req: S3Request) -> Response:
    content_type, metadata = req.content_type(), req.metadata()
    result = BodyResult()
    tags = tagging.parse_header(req.headers.get("x-amz-tagging"))
    conditions = WriteConditions.from_headers(req.headers, f"/{req.bucket}/{req.key}")
    customer = sse.check_write(req.headers, encryption_on=req.store.encryption_enabled)
    with req.store.customer_key(customer):
        info = await req.s3.put_object(
            req.bucket,
            req.key,
            req.body(result),
            content_type=content_type,
            metadata=metadata,
            expected_size=req.declared_size(),
            checksum=lambda: checksum_headers.of_body(result),
            tags=tags,
            conditions=conditions,
        )
    sealed = customer is None and (await req.store.seal_of(info)).master
    return empty_response(
        headers={
            "ETag": info.etag,
            **checksum_headers.response_headers(info.checksum),
            **sse.response_headers(sealed, customer),
        }
    )


async def get_object(req: S3Request) -> Response:
    """GetObject and HeadObject, of the whole object, a Range or a part (partNumber)."""
    info = await req.s3.head_object(req.bucket, req.key)
    seal = await req.store.seal_of(info)
    customer = sse.opening_key(seal, info, sse.customer_key(req.headers))
    part = await _requested_part(req, info)
    headers = _object_headers(info)
    headers.update(sse.response_headers(seal.master, customer))
    headers.update(tagging.count_header(info.tags))
    precondition = evaluate(req.headers, etag=info.etag, last_modified=info.updated_at)
    if precondition is not None:
        if precondition == NOT_MODIFIED:
            return empty_response(
                304, {"ETag": info.etag, "Last-Modified": headers["Last-Modified"]}
            )
        raise S3Error("PreconditionFailed", resource=f"/{req.bucket}/{req.key}")
    for param, header in RESPONSE_OVERRIDES.items():
        if param in req.query:
            headers[_title(header)] = _header_value(param, req.query[param])
    # After the overrides: a presigned URL may ask for text/html.
    headers.update(protective_headers(headers["Content-Type"]))
    start, end, status = 0, info.size, 200
    range_header = req.headers.get("range")
    if part is not None:
        start, end, count, part_checksum = part
        if count is not None:  # a multipart object: the part's range
            status = 206
            headers["x-amz-mp-parts-count"] = str(count)
            # An empty (last) part has no first and last byte to name.
            span = f"{start}-{end - 1}" if end > start else "*"
            headers["Content-Range"] = f"bytes {span}/{info.size}"
        if checksum_headers.wanted(req.headers) and part_checksum is not None:
            headers.update(checksum_headers.response_headers(part_checksum))
    elif range_header:
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
    if status == 200 and checksum_headers.wanted(req.headers):
        # Only of the whole object: a checksum says nothing of a range.
        headers.update(checksum_headers.response_headers(info.checksum))
    headers["Content-Length"] = str(end - start)
    headers["x-amz-request-id"] = request_id()
    if req.method == "HEAD":
        return Response(status_code=status, headers=headers)
    inline = req.store.inline_range(info, start, end)
    if inline is not None:
        # Already in memory: a plain response, without a streaming response's
        # task that watches for the client going away.
        return Response(inline, status_code=status, headers=headers)
    # The chunks' data keys are unwrapped as the range is opened.
    with req.store.customer_key(customer):
        body = await req.store.open_range(info, start, end)
    return StreamingResponse(body, status_code=status, headers=headers)


#: A part of an object: [start, end), the object's number of parts (None if
#: CompleteMultipartUpload did not make it), the part's checksum.
Part = tuple[int, int, int | None, StoredChecksum | None]


async def _requested_part(req: S3Request, info: ObjectInfo) -> Part | None:
    """The part `partNumber` names, if it names one. An object not made by
    CompleteMultipartUpload is one part; a part past the last is
    InvalidPartNumber (416, as AWS)."""
    raw = req.query.get("partNumber")
    if raw is None:
        return None
    number = parse_decimal(raw.strip(), max_digits=5)
    if number is None or not 1 <= number <= MAX_PART_NUMBER:
        raise S3Error(
            "InvalidArgument",
            f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive.",
            details={"ArgumentName": "partNumber", "ArgumentValue": raw[:64]},
        )
    if "range" in req.headers:
        raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber query.")
    parts = await req.s3.parts_of(info)
    if parts is None:
        if number != 1:
            raise S3Error("InvalidPartNumber", details={"PartNumberRequested": str(number)})
        return 0, info.size, None, info.checksum
    if number > len(parts):
        raise S3Error("InvalidPartNumber", details={"PartNumberRequested": str(number)})
    start = sum(size for size, _ in parts[: number - 1])
    size, value = parts[number - 1]
    checksum = None
    if value is not None and info.checksum is not None:
        checksum = StoredChecksum(info.checksum.algorithm, value, info.checksum.type)
    return start, start + size, len(parts), checksum


async def delete_object(req: S3Request) -> Response:
    await req.s3.delete_object(req.bucket, req.key)
    return empty_response(204)


async def copy_object(req: S3Request) -> Response:
    return await retrying_copy(req, _copy_object_once)


async def _copy_object_once(req: S3Request) -> Response:
    customer = sse.check_write(req.headers, encryption_on=req.store.encryption_enabled)
    source, source_key = await source_object(req)
    # A copy shares the source's chunks, sealed as they are; one that
    # changes the customer key (to another, to none, from none) seals every
    # byte anew: read with the source's key, stored with the target's.
    reseal = source.size > 0 and customer != source_key
    directive = req.headers.get("x-amz-metadata-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown metadata directive.")
    same = (source.bucket, source.key) == (req.bucket, req.key)
    if same and directive == "COPY" and not reseal:
        raise S3Error(
            "InvalidRequest",
            "This copy request is illegal because it is trying to copy an object to itself "
            "without changing the object's metadata, storage class, website redirect "
            "location or encryption attributes.",
        )
    if directive == "REPLACE":
        content_type = req.content_type() or DEFAULT_CONTENT_TYPE
        metadata: dict[str, Any] = req.metadata()
    else:
        content_type, metadata = source.content_type, source.metadata
    if reseal:
        with req.store.customer_key(source_key):
            content = await req.store.open_range(source, 0, source.size)
        with req.store.customer_key(customer):
            copied = await req.s3.put_object(
                req.bucket,
                req.key,
                content,
                content_type=content_type,
                metadata=metadata,
                expected_size=source.size,
                tags=_copy_tags(req, source),
            )
    else:
        copied = await req.s3.copy_object(
            source,
            bucket=req.bucket,
            key=req.key,
            content_type=content_type,
            metadata=metadata,
            tags=_copy_tags(req, source),
        )
    sealed = customer is None and (await req.store.seal_of(copied)).master
    return xml_response(
        copy_object_xml(copied.etag, copied.updated_at),
        headers=sse.response_headers(sealed, customer),
    )


def _copy_tags(req: S3Request, source: ObjectInfo) -> dict[str, str] | None:
    """x-amz-tagging-directive: COPY (the default) keeps the source's tags,
    REPLACE takes x-amz-tagging (none: no tags)."""
    directive = req.headers.get("x-amz-tagging-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown tagging directive.")
    if directive == "COPY":
        return source.tags
    return tagging.parse_header(req.headers.get("x-amz-tagging"))


def _copy_source(req: S3Request) -> tuple[str, str]:
    """The source's bucket and key, validated like a request's own: a
    source outside the S3 buckets (the native API's `_native`) is refused."""
    raw = req.headers["x-amz-copy-source"]
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


async def source_object(req: S3Request) -> tuple[ObjectInfo, bytes | None]:
    """The copy source and the customer key that opens it (None: it needs
    none), after its x-amz-copy-source-if-* conditions. The key is checked
    first, as a GET of the source checks it: a condition on the ETag of an
    object under a customer key must not answer without that key."""
    bucket, key = _copy_source(req)
    # Read access to the source bucket, exactly as a GET of it would need.
    await req.s3.require_bucket(bucket)
    source = await req.s3.head_object(bucket, key)
    source_key = sse.customer_key(req.headers, sse.COPY_SOURCE_CUSTOMER)
    source_key = sse.opening_key(await req.store.seal_of(source), source, source_key)
    if copy_source_refused(req.headers, etag=source.etag, last_modified=source.updated_at):
        raise S3Error("PreconditionFailed")
    return source, source_key


async def retrying_copy(req: S3Request, copy: Callable[[S3Request], Awaitable[T]]) -> T:
    """Run `copy` again (reading the source and its conditions afresh) when
    the source was replaced while it ran: the request is valid, and the
    copy takes the version current then. A source that keeps changing
    gets SlowDown after COPY_ATTEMPTS."""
    for _ in range(COPY_ATTEMPTS):
        try:
            return await copy(req)
        except SourceChanged:
            log.info("copy_source_changed", bucket=req.bucket, key=req.key)
    raise S3Error("SlowDown", "The source object kept changing while being copied.")


def _title(header: str) -> str:
    return "-".join(part.capitalize() for part in header.split("-"))


def _header_value(param: str, value: str) -> str:
    """A `response-*` override as a header value: HTTP carries Latin-1 text
    without control characters (percent-encode anything else, as RFC 6266's
    filename* does)."""
    if not value.isprintable() or not all(ord(char) < 256 for char in value):
        raise S3Error(
            "InvalidArgument",
            f"{param} must be printable Latin-1 text (percent-encode other characters).",
        )
    return value


def _object_headers(info: ObjectInfo) -> dict[str, str]:
    headers = {
        "ETag": info.etag,
        "Last-Modified": http_date(info.updated_at),
        "Accept-Ranges": "bytes",
        "Content-Type": info.content_type,
    }
    for name, value in info.metadata.items():
        if name.startswith("x-amz-meta-"):
            if not is_header_name(name):
                # Stored by POST Object before such names were refused: no
                # header can carry it, and sending it would break the answer.
                continue
            headers[name] = metadata_text.to_header(value)
        elif name in STORED_HEADERS:
            headers[_title(name)] = value
    return headers
