"""GetObjectAttributes (``GET /bucket/key?attributes``): what HeadObject
tells, and an object's parts, in XML, for the attributes the
``x-amz-object-attributes`` header names."""

from __future__ import annotations

from typing import Final

from starlette.responses import Response

from app.http.s3 import sse
from app.http.s3.context import MAX_KEYS, S3Request, xml_response
from app.http.s3.errors import S3Error
from app.http.s3.xml.responses import AttributeParts, get_object_attributes_xml
from app.http.s3.xml.writer import STANDARD_STORAGE_CLASS, Checksum
from app.http.shared.conditions import http_date

ATTRIBUTES: Final = frozenset({"ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"})


def _attributes(req: S3Request) -> set[str]:
    # One header may repeat, or list several values separated by commas.
    raw = ",".join(req.headers.getlist("x-amz-object-attributes"))
    names = {name.strip() for name in raw.split(",") if name.strip()}
    if not names:
        raise S3Error(
            "InvalidArgument",
            "The x-amz-object-attributes header specifying the attributes to be retrieved "
            "is either missing or empty",
        )
    unknown = names - ATTRIBUTES
    if unknown:
        raise S3Error("InvalidArgument", f"Invalid attribute name specified: {sorted(unknown)[0]}")
    return names


async def get_object_attributes(req: S3Request) -> Response:
    names = _attributes(req)
    max_parts = req.int_header("x-amz-max-parts", MAX_KEYS, top=MAX_KEYS)
    marker = req.int_header("x-amz-part-number-marker", 0, top=1 << 31)
    info = await req.s3.head_object(req.bucket, req.key)
    # The checksums are the plaintext's: under a customer key, for that key
    # only (refused as HEAD refuses).
    sse.opening_key(await req.store.seal_of(info), info, sse.customer_key(req.headers))
    checksum = None
    if "Checksum" in names and info.checksum is not None:
        checksum = Checksum(info.checksum.algorithm, info.checksum.value, info.checksum.type)
    page = None
    if "ObjectParts" in names:
        parts = await req.s3.parts_of(info)
        if parts is not None:  # only an object CompleteMultipartUpload made has parts
            numbered = [(number, size, value) for number, (size, value) in enumerate(parts, 1)]
            after = [part for part in numbered if part[0] > marker]
            page = AttributeParts(
                total=len(parts),
                parts=after[:max_parts],
                part_number_marker=marker,
                max_parts=max_parts,
                is_truncated=len(after) > max_parts,
                algorithm=info.checksum.algorithm if info.checksum is not None else None,
            )
    document = get_object_attributes_xml(
        etag=info.etag if "ETag" in names else None,
        checksum=checksum,
        parts=page,
        storage_class=STANDARD_STORAGE_CLASS if "StorageClass" in names else None,
        size=info.size if "ObjectSize" in names else None,
    )
    return xml_response(document, headers={"Last-Modified": http_date(info.updated_at)})
