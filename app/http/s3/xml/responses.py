"""The documents single operations answer with: ``<Error>``, copies,
multipart results, GetObjectAttributes, DeleteObjects, bucket settings."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from app.http.s3.errors import S3Error
from app.http.s3.xml.writer import (
    Checksum,
    Doc,
    checksum_element,
    iso8601,
    quoted_etag,
    write_checksum,
)


def error_xml(
    code: str,
    message: str,
    *,
    resource: str | None = None,
    request_id: str | None = None,
    details: Iterable[tuple[str, str]] = (),
) -> bytes:
    """``<Error>`` (no namespace, like AWS) with Code, Message, details, Resource, RequestId."""
    doc = Doc("Error", namespace=False)
    doc.leaf("Code", code)
    doc.leaf("Message", message)
    for name, value in details:
        doc.leaf(name, value)
    doc.leaf("Resource", resource)
    doc.leaf("RequestId", request_id)
    return doc.bytes()


def s3_error_xml(
    err: S3Error, *, resource: str | None = None, request_id: str | None = None
) -> bytes:
    """:func:`error_xml` for an :class:`S3Error` (its own resource wins over ``resource``)."""
    return error_xml(
        err.code,
        err.message,
        resource=err.resource if err.resource is not None else resource,
        request_id=request_id,
        details=err.details.items(),
    )


def initiate_multipart_upload_xml(bucket: str, key: str, upload_id: str) -> bytes:
    """``InitiateMultipartUploadResult``."""
    doc = Doc("InitiateMultipartUploadResult")
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("UploadId", upload_id)
    return doc.bytes()


def complete_multipart_upload_xml(
    location: str, bucket: str, key: str, etag: str, checksum: Checksum | None = None
) -> bytes:
    """``CompleteMultipartUploadResult`` (``etag`` like ``"<md5 of md5s>-N"``)."""
    doc = Doc("CompleteMultipartUploadResult")
    doc.leaf("Location", location)
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("ETag", quoted_etag(etag))
    write_checksum(doc, checksum)
    return doc.bytes()


def post_response_xml(location: str, bucket: str, key: str, etag: str) -> bytes:
    """``PostResponse``: what POST Object answers with `success_action_status=201`."""
    doc = Doc("PostResponse")
    doc.leaf("Location", location)
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("ETag", quoted_etag(etag))
    return doc.bytes()


def copy_object_xml(etag: str, last_modified: datetime) -> bytes:
    """``CopyObjectResult``."""
    doc = Doc("CopyObjectResult")
    doc.leaf("LastModified", iso8601(last_modified))
    doc.leaf("ETag", quoted_etag(etag))
    return doc.bytes()


def copy_part_xml(etag: str, last_modified: datetime, checksum: Checksum | None = None) -> bytes:
    """``CopyPartResult`` (UploadPartCopy), with the part's checksum when its
    upload has an algorithm (a part has no checksum type)."""
    doc = Doc("CopyPartResult")
    doc.leaf("LastModified", iso8601(last_modified))
    doc.leaf("ETag", quoted_etag(etag))
    write_checksum(doc, checksum)
    return doc.bytes()


@dataclass(frozen=True, slots=True)
class AttributeParts:
    """A page of an object's parts for GetObjectAttributes' ``ObjectParts``."""

    total: int
    #: (part number, size, checksum or None), in order.
    parts: Sequence[tuple[int, int, str | None]]
    part_number_marker: int
    max_parts: int
    is_truncated: bool
    #: The algorithm of the parts' checksums.
    algorithm: str | None = None


def get_object_attributes_xml(
    *,
    etag: str | None = None,
    checksum: Checksum | None = None,
    parts: AttributeParts | None = None,
    storage_class: str | None = None,
    size: int | None = None,
) -> bytes:
    """``GetObjectAttributesResponse`` with the attributes given (``None``:
    not asked for, or not there). The ETag goes without quotes, as AWS sends
    it here."""
    doc = Doc("GetObjectAttributesResponse")
    doc.leaf("ETag", etag.strip('"') if etag is not None else None)
    if checksum is not None:
        doc.open("Checksum")
        write_checksum(doc, checksum)
        doc.close("Checksum")
    if parts is not None:
        doc.open("ObjectParts")
        doc.leaf("PartsCount", parts.total)
        doc.leaf("PartNumberMarker", parts.part_number_marker)
        if parts.parts:
            doc.leaf("NextPartNumberMarker", parts.parts[-1][0])
        doc.leaf("MaxParts", parts.max_parts)
        doc.leaf("IsTruncated", parts.is_truncated)
        for number, part_size, part_checksum in parts.parts:
            doc.open("Part")
            doc.leaf("PartNumber", number)
            doc.leaf("Size", part_size)
            if part_checksum is not None and parts.algorithm is not None:
                doc.leaf(checksum_element(parts.algorithm), part_checksum)
            doc.close("Part")
        doc.close("ObjectParts")
    doc.leaf("StorageClass", storage_class)
    doc.leaf("ObjectSize", size)
    return doc.bytes()


@dataclass(frozen=True, slots=True)
class DeleteError:
    key: str
    code: str
    message: str


def delete_result_xml(
    deleted: Sequence[str], errors: Sequence[DeleteError] = (), *, quiet: bool = False
) -> bytes:
    """``DeleteResult``: a ``<Deleted>`` per key (none if ``quiet``), an ``<Error>`` per failure.

    S3 reports a key that did not exist as deleted.
    """
    doc = Doc("DeleteResult")
    if not quiet:
        for key in deleted:
            doc.open("Deleted")
            doc.leaf("Key", key)
            doc.close("Deleted")
    for error in errors:
        doc.open("Error")
        doc.leaf("Key", error.key)
        doc.leaf("Code", error.code)
        doc.leaf("Message", error.message)
        doc.close("Error")
    return doc.bytes()


def location_constraint_xml(region: str | None) -> bytes:
    """``LocationConstraint``: empty for ``us-east-1`` (or ``None``), like AWS."""
    doc = Doc("LocationConstraint")
    if region and region != "us-east-1":
        doc.text(region)
    return doc.bytes()


def versioning_configuration_xml(status: str | None = None) -> bytes:
    """``VersioningConfiguration``: empty (never enabled) unless ``status`` is given."""
    doc = Doc("VersioningConfiguration")
    doc.leaf("Status", status)
    return doc.bytes()
