"""Multipart uploads: create, upload (and copy) parts, complete, abort, and
list a bucket's uploads and an upload's parts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from starlette.responses import Response, StreamingResponse

from app.parsing import parse_decimal
from app.s3 import tagging, xml
from app.s3.context import (
    MAX_KEYS,
    XML,
    S3Request,
    empty_response,
    request_id,
    xml_response,
)
from app.s3.errors import S3Error, as_s3_error
from app.s3.object_handlers import retrying_copy, source_object
from app.s3.write_conditions import WriteConditions
from app.store.limits import MAX_PART_NUMBER
from app.store.service import ObjectInfo

# Complete answers normally within this many seconds; later, 200 + whitespace.
COMPLETE_EARLY_ANSWER = 5.0
KEEPALIVE_INTERVAL = 5.0
XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'
_COPY_RANGE = re.compile(r"bytes=([0-9]{1,19})-([0-9]{1,19})")


def _part_number(req: S3Request) -> int:
    raw = req.query.get("partNumber", "")
    number = parse_decimal(raw.strip(), max_digits=5)
    if number is None:
        raise S3Error(
            "InvalidArgument",
            f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive.",
            details={"ArgumentName": "partNumber", "ArgumentValue": raw[:64]},
        )
    return number


async def create_upload(req: S3Request) -> Response:
    upload = await req.s3.create_upload(
        req.bucket,
        req.key,
        content_type=req.content_type(),
        metadata=req.metadata(),
        tags=tagging.parse_header(req.headers.get("x-amz-tagging")),
    )
    return xml_response(xml.initiate_multipart_upload_xml(req.bucket, req.key, upload.upload_id))


async def upload_part(req: S3Request) -> Response:
    part_number = _part_number(req)
    etag = await req.s3.upload_part(
        req.bucket,
        req.key,
        req.query["uploadId"],
        part_number,
        req.body(),
        expected_size=req.declared_size(),
    )
    return empty_response(headers={"ETag": etag})


async def upload_part_copy(req: S3Request) -> Response:
    return await retrying_copy(req, _upload_part_copy_once)


async def _upload_part_copy_once(req: S3Request) -> Response:
    source = await source_object(req)
    start, end = 0, source.size
    copy_range = req.headers.get("x-amz-copy-source-range")
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
    etag = await req.s3.upload_part_copy(
        req.bucket,
        req.key,
        req.query["uploadId"],
        _part_number(req),
        source,
        start,
        end,
    )
    return xml_response(xml.copy_part_xml(etag, datetime.now(UTC)))


async def complete_upload(req: S3Request) -> Response:
    """Completing may wait for spooled parts to reach Telegram. Past
    COMPLETE_EARLY_ANSWER seconds, do what AWS does: answer 200 at once,
    keep the connection alive with whitespace (SDKs time out reads after
    60 s), and end with the result, or with an <Error> document if it
    failed after all (SDKs look for one in a 200 Complete)."""
    body = await req.small_body()
    parts = xml.parse_complete_multipart(body)
    bucket, key = req.bucket, req.key
    location = f"/{bucket}/{key}"
    completing = asyncio.ensure_future(
        req.s3.complete_upload(
            bucket,
            key,
            req.query["uploadId"],
            [(part.part_number, part.etag) for part in parts],
            WriteConditions.from_headers(req.headers, location),
        )
    )
    try:
        info = await asyncio.wait_for(asyncio.shield(completing), COMPLETE_EARLY_ANSWER)
    except TimeoutError:
        return StreamingResponse(
            _complete_in_whitespace(req, completing, location),
            media_type=XML,
            headers={"x-amz-request-id": request_id()},
        )
    except BaseException:
        completing.cancel()
        raise
    return xml_response(xml.complete_multipart_upload_xml(location, bucket, key, info.etag))


# A client that hangs up does not stop the completion (its task is not
# cancelled): the parts are the client's, and it may ask again.
async def _complete_in_whitespace(
    req: S3Request, completing: asyncio.Future[ObjectInfo], location: str
) -> AsyncIterator[bytes]:
    yield XML_DECLARATION
    while True:
        try:
            info = await asyncio.wait_for(asyncio.shield(completing), KEEPALIVE_INTERVAL)
        except TimeoutError:
            yield b" "
            continue
        except Exception as exc:
            error = as_s3_error(exc, req.method)
            document = xml.s3_error_xml(error, resource=location, request_id=request_id())
        else:
            document = xml.complete_multipart_upload_xml(location, req.bucket, req.key, info.etag)
        yield document.removeprefix(XML_DECLARATION)
        return


async def abort_upload(req: S3Request) -> Response:
    await req.s3.abort_upload(req.bucket, req.key, req.query["uploadId"])
    return empty_response(204)


async def list_parts(req: S3Request) -> Response:
    upload_id = req.query["uploadId"]
    marker = req.int_param("part-number-marker", 0, top=MAX_PART_NUMBER)
    max_parts = req.int_param("max-parts", MAX_KEYS, top=MAX_KEYS)
    parts = await req.s3.list_parts(
        req.bucket, req.key, upload_id, after=marker, limit=max_parts + 1
    )
    page = parts[:max_parts]
    return xml_response(
        xml.list_parts_xml(
            bucket=req.bucket,
            key=req.key,
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


async def list_uploads(req: S3Request) -> Response:
    """ListMultipartUploads (a bucket sub-resource)."""
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter") or None
    key_marker = req.query.get("key-marker") or None
    upload_id_marker = req.query.get("upload-id-marker") or None
    max_uploads = req.int_param("max-uploads", MAX_KEYS, top=MAX_KEYS)
    listing = await req.s3.list_uploads(
        req.bucket,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        upload_id_marker=upload_id_marker,
        max_uploads=max_uploads,
    )
    return xml_response(
        xml.list_multipart_uploads_xml(
            bucket=req.bucket,
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
            encoding_type=req.encoding_type(),
        )
    )
