"""Multipart uploads: create, upload (and copy) parts, complete, abort, and
list a bucket's uploads and an upload's parts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

from starlette.responses import Response, StreamingResponse

from app.http.s3 import checksum_headers, sse, tagging
from app.http.s3.context import (
    MAX_KEYS,
    XML,
    S3Request,
    empty_response,
    request_id,
    xml_response,
)
from app.http.s3.errors import S3Error, as_s3_error
from app.http.s3.object_handlers import retrying_copy, source_object
from app.http.s3.payload_checks import CHECKSUM_HEADER_PREFIX, BodyResult
from app.http.s3.service import CopiedPart
from app.http.s3.write_conditions import WriteConditions
from app.http.s3.xml.listings import (
    PartEntry,
    UploadEntry,
    list_multipart_uploads_xml,
    list_parts_xml,
)
from app.http.s3.xml.parsing import (
    CompletedPart,
    parse_complete_multipart,
    parse_complete_part_checksums,
)
from app.http.s3.xml.responses import (
    complete_multipart_upload_xml,
    copy_part_xml,
    initiate_multipart_upload_xml,
    s3_error_xml,
)
from app.http.s3.xml.writer import Checksum
from app.http.shared.parsing import parse_decimal
from app.kit.checksums import CHECKSUM_SIZES, object_checksum
from app.store.limits import MAX_PART_NUMBER
from app.store.multipart import UploadInfo
from app.store.service import ObjectInfo

# A Complete or a part copy answers normally within this many seconds; later,
# 200 + whitespace.
EARLY_ANSWER = 5.0
KEEPALIVE_INTERVAL = 5.0
XML_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'
T = TypeVar("T")
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
    # A customer key is checked, not kept: each part brings it (SSE-C).
    customer = sse.check_write(req.headers, encryption_on=req.store.encryption_enabled)
    algorithm, kind = checksum_headers.requested(req.headers)
    upload = await req.s3.create_upload(
        req.bucket,
        req.key,
        content_type=req.content_type(),
        metadata=req.metadata(),
        checksum_algorithm=algorithm,
        checksum_type=kind,
        tags=tagging.parse_header(req.headers.get("x-amz-tagging")),
    )
    headers = sse.response_headers(False, customer)
    if algorithm is not None and kind is not None:
        headers.update(
            {
                checksum_headers.ALGORITHM_HEADER: algorithm.upper(),
                checksum_headers.TYPE_HEADER: kind,
            }
        )
    return xml_response(
        initiate_multipart_upload_xml(req.bucket, req.key, upload.upload_id),
        headers=headers,
    )


async def upload_part(req: S3Request) -> Response:
    """A part's checksum is kept in its upload's algorithm (verified if the
    client sent it, computed here if not), else the one the client sent."""
    part_number = _part_number(req)
    customer = sse.customer_key(req.headers)
    upload = await req.s3.require_upload(req.bucket, req.key, req.query["uploadId"])
    # Before the body is read; one earlier chunk tells, as every part is
    # checked so (CompleteMultipartUpload checks them all).
    sse.check_part_key(await req.s3.upload_seal(upload, sample=True), customer)
    result = BodyResult()
    body = req.body(result)
    algorithm = upload.checksum_algorithm
    checksum: Callable[[], str | None]
    if algorithm is not None:
        header = f"x-amz-checksum-{algorithm}"
        given = header in req.headers or header in req.verified.declared_trailers
        body, checksum = checksum_headers.part_checksum(body, algorithm, result, sent=given)
    else:

        def checksum() -> str | None:
            sent = checksum_headers.of_body(result)
            return sent.value if sent is not None else None

    with req.store.customer_key(customer):
        etag = await req.s3.upload_part(
            req.bucket,
            req.key,
            req.query["uploadId"],
            part_number,
            body,
            expected_size=req.declared_size(),
            checksum=checksum,
            upload=upload,
        )
    headers = {"ETag": etag, **sse.response_headers(False, customer)}
    value, sent = checksum(), checksum_headers.of_body(result)
    named = algorithm or (sent.algorithm if sent is not None else None)
    if value is not None and named is not None:
        headers[f"x-amz-checksum-{named}"] = value
    return empty_response(headers=headers)


async def upload_part_copy(req: S3Request) -> Response:
    """A copy into an upload with a checksum algorithm reads its range back
    from Telegram first, which for a large part can outlast a client's read
    timeout: past EARLY_ANSWER seconds it is answered like a slow Complete."""
    copying = asyncio.ensure_future(retrying_copy(req, _upload_part_copy_once))
    return await _answer_in_time(req, copying, _copy_part_result)


async def _upload_part_copy_once(req: S3Request) -> CopiedPart:
    customer = sse.customer_key(req.headers)
    source, source_key = await source_object(req)
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
    upload = await req.s3.require_upload(req.bucket, req.key, req.query["uploadId"])
    sse.check_part_key(await req.s3.upload_seal(upload, sample=True), customer)
    if end > start and customer != source_key:
        return await _resealed_part(req, upload, source, (source_key, customer), (start, end))
    # By reference to the source's chunks (a checksum reads them: with its key).
    with req.store.customer_key(source_key):
        return await req.s3.upload_part_copy(
            req.bucket,
            req.key,
            req.query["uploadId"],
            _part_number(req),
            source,
            start,
            end,
        )


async def _resealed_part(
    req: S3Request,
    upload: UploadInfo,
    source: ObjectInfo,
    keys: tuple[bytes | None, bytes | None],
    span: tuple[int, int],
) -> CopiedPart:
    """A copied part whose customer key differs from its source's (`keys`:
    the source's, the part's): bytes `span` read with the one and stored,
    sealed anew, with the other."""
    (source_key, customer), (start, end) = keys, span
    if upload.checksum_algorithm is not None:
        raise S3Error(
            "NotImplemented",
            "UploadPartCopy that changes the customer key (SSE-C) into an upload with a "
            "checksum algorithm is not implemented.",
        )
    with req.store.customer_key(source_key):
        content = await req.store.open_range(source, start, end)
    with req.store.customer_key(customer):
        etag = await req.s3.upload_part(
            req.bucket,
            req.key,
            req.query["uploadId"],
            _part_number(req),
            content,
            expected_size=end - start,
            checksum=lambda: None,
            upload=upload,
        )
    return CopiedPart(etag, None, None)


def _copy_part_result(copied: CopiedPart) -> bytes:
    checksum = None
    if copied.checksum_algorithm is not None and copied.checksum is not None:
        checksum = Checksum(copied.checksum_algorithm, copied.checksum)
    return copy_part_xml(copied.etag, datetime.now(UTC), checksum)


async def complete_upload(req: S3Request) -> Response:
    """Completing may wait for spooled parts to reach Telegram: past
    EARLY_ANSWER seconds it is answered as `_answer_in_time` says."""
    # x-amz-checksum-* here name the whole object, not this XML body.
    body = await req.small_body(header_checksums=False)
    parts = parse_complete_multipart(body)
    await _check_checksums(req, parts, parse_complete_part_checksums(body))
    bucket, key = req.bucket, req.key
    location = f"/{bucket}/{key}"
    customer = sse.customer_key(req.headers)
    upload = await req.s3.find_upload(bucket, key, req.query["uploadId"])
    # None: already completed (a retry gets the first answer) or gone; the
    # Complete itself answers that.
    if upload is not None:
        sse.check_part_key(await req.s3.upload_seal(upload), customer, completing=True)
    completing = asyncio.ensure_future(
        req.s3.complete_upload(
            bucket,
            key,
            req.query["uploadId"],
            [(part.part_number, part.etag) for part in parts],
            WriteConditions.from_headers(req.headers, location),
        )
    )

    def result(info: ObjectInfo) -> bytes:
        return complete_multipart_upload_xml(location, bucket, key, info.etag, _xml_checksum(info))

    async def headers(info: ObjectInfo) -> dict[str, str]:
        seal = await req.store.seal_of(info)
        return sse.response_headers(seal.master, customer if seal.needs_customer_key else None)

    return await _answer_in_time(req, completing, result, headers)


async def _answer_in_time(
    req: S3Request,
    work: asyncio.Future[T],
    result: Callable[[T], bytes],
    headers: Callable[[T], Awaitable[dict[str, str]]] | None = None,
) -> Response:
    """The XML `result` of `work`, or, if it takes longer than EARLY_ANSWER
    seconds, what AWS does for a slow Complete or copy: 200 at once, the
    connection kept alive with whitespace (SDKs time out reads after 60 s),
    and then the result, or an <Error> document if the work failed after all
    (SDKs look for one in a 200 answer to these requests)."""
    try:
        done = await asyncio.wait_for(asyncio.shield(work), EARLY_ANSWER)
    except TimeoutError:
        return StreamingResponse(
            _in_whitespace(req, work, result),
            media_type=XML,
            headers={"x-amz-request-id": request_id()},
        )
    except BaseException:
        work.cancel()
        raise
    # (Headers cannot follow an early answer: that one goes without them.)
    return xml_response(result(done), headers=None if headers is None else await headers(done))


# A client that hangs up does not stop the work (its task is not cancelled):
# a completion or a copied part is the client's, and it may ask again.
async def _in_whitespace(
    req: S3Request, work: asyncio.Future[T], result: Callable[[T], bytes]
) -> AsyncIterator[bytes]:
    yield XML_DECLARATION
    while True:
        try:
            done = await asyncio.wait_for(asyncio.shield(work), KEEPALIVE_INTERVAL)
        except TimeoutError:
            yield b" "
            continue
        except Exception as exc:
            error = as_s3_error(exc, req.method)
            resource = f"/{req.bucket}/{req.key}"
            document = s3_error_xml(error, resource=resource, request_id=request_id())
        else:
            document = result(done)
        yield document.removeprefix(XML_DECLARATION)
        return


async def _check_checksums(
    req: S3Request, parts: list[CompletedPart], listed: dict[int, tuple[str, str]]
) -> None:
    """Before anything is completed: a part checksum the Complete lists must
    be the part's (InvalidPart), and an `x-amz-checksum-<algorithm>` header,
    the object's checksum as the parts give it (BadDigest), as AWS checks."""
    sent = {
        name.lower().removeprefix(CHECKSUM_HEADER_PREFIX): value.strip()
        for name, value in req.headers.items()
        if name.lower().removeprefix(CHECKSUM_HEADER_PREFIX) in CHECKSUM_SIZES
    }
    if not listed and not sent:
        return
    try:
        upload = await req.s3.require_upload(req.bucket, req.key, req.query["uploadId"])
        stored_parts = await req.s3.list_parts(
            req.bucket, req.key, upload.upload_id, after=0, limit=MAX_PART_NUMBER
        )
    except S3Error as exc:
        if exc.code == "NoSuchUpload":
            return  # completed already: a retry, which Complete answers
        raise
    stored = {part.part_number: part for part in stored_parts}
    for number, (algorithm, value) in listed.items():
        known = stored[number].checksum if number in stored else None
        wrong_algorithm = upload.checksum_algorithm not in (None, algorithm)
        if wrong_algorithm or (known is not None and known != value):
            raise S3Error(
                "InvalidPart",
                f"Part {number}: the {algorithm.upper()} checksum given is not the part's.",
            )
    for algorithm, value in sent.items():
        if algorithm != upload.checksum_algorithm:
            created = (upload.checksum_algorithm or "no").upper()
            raise S3Error(
                "InvalidRequest",
                f"The upload was created with {created} checksum algorithm, "
                f"not {algorithm.upper()}.",
            )
        summaries = [
            (stored[p.part_number].size, stored[p.part_number].checksum)
            for p in parts
            if p.part_number in stored
        ]
        expected = object_checksum(algorithm, upload.checksum_type, summaries)
        if expected is not None and value not in (expected, expected.rpartition("-")[0]):
            raise S3Error(
                "BadDigest",
                f"The {algorithm.upper()} you specified did not match the calculated checksum.",
            )


def _xml_checksum(info: ObjectInfo) -> Checksum | None:
    checksum = info.checksum
    if checksum is None:
        return None
    return Checksum(checksum.algorithm, checksum.value, checksum.type)


async def abort_upload(req: S3Request) -> Response:
    await req.s3.abort_upload(req.bucket, req.key, req.query["uploadId"])
    return empty_response(204)


async def list_parts(req: S3Request) -> Response:
    """The parts' ETags are their plaintexts' MD5s: the parts of an upload
    under a customer key are listed to that key only, as HEAD answers."""
    upload_id = req.query["uploadId"]
    upload = await req.s3.require_upload(req.bucket, req.key, upload_id)
    (await req.s3.upload_seal(upload, sample=True)).check_customer_key(
        sse.customer_key(req.headers)
    )
    marker = req.int_param("part-number-marker", 0, top=MAX_PART_NUMBER)
    max_parts = req.int_param("max-parts", MAX_KEYS, top=MAX_KEYS)
    parts = await req.s3.list_parts(
        req.bucket, req.key, upload_id, after=marker, limit=max_parts + 1
    )
    page = parts[:max_parts]
    return xml_response(
        list_parts_xml(
            bucket=req.bucket,
            key=req.key,
            upload_id=upload_id,
            parts=[
                PartEntry(
                    part_number=p.part_number,
                    last_modified=p.created_at,
                    etag=p.etag,
                    size=p.size,
                    checksum=(upload.checksum_algorithm, p.checksum)
                    if upload.checksum_algorithm is not None and p.checksum is not None
                    else None,
                )
                for p in page
            ],
            part_number_marker=marker,
            max_parts=max_parts,
            is_truncated=len(parts) > max_parts,
            checksum_algorithm=upload.checksum_algorithm,
            checksum_type=upload.checksum_type,
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
        list_multipart_uploads_xml(
            bucket=req.bucket,
            uploads=[
                UploadEntry(key=u.key, upload_id=u.upload_id, initiated=u.initiated)
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
