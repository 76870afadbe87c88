"""S3 XML: response documents and request-body parsers.

Builders are plain functions taking values (or the small dataclasses below) and
returning the UTF-8 document, XML declaration included, in the S3 namespace
``http://s3.amazonaws.com/doc/2006-03-01/``. Text is escaped here; characters
XML 1.0 cannot carry literally (control characters, a ``\\r``) are written as
character references, as AWS does, so keys survive a round trip through any
XML parser. With ``encoding_type="url"`` keys, prefixes, delimiters, markers and
``StartAfter`` are percent-encoded (``quote(value, safe="/")``: a space is
``%20``, ``+`` is ``%2B``); botocore asks for that on every ListObjects call and
decodes the answer.

Parsers take the request body (at most :data:`MAX_XML_BYTES`), parse it with
defusedxml (DTDs, entities and external references refused) and raise
``S3Error("MalformedXML")`` on anything unexpected. Element names are matched
without their namespace: clients send the S3 namespace or none.

Times: :func:`iso8601` (``2026-11-30T08:00:00.000Z``) for XML, :func:`http_date`
(``Mon, 30 Nov 2026 08:00:00 GMT``) for ``Last-Modified``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, NamedTuple
from urllib.parse import quote
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as DefusedET
from defusedxml import DefusedXmlException

from app.parsing import parse_decimal
from app.s3.errors import S3Error
from app.store.limits import MAX_PART_NUMBER

S3_NAMESPACE: Final = "http://s3.amazonaws.com/doc/2006-03-01/"
XML_DECLARATION: Final = b'<?xml version="1.0" encoding="UTF-8"?>\n'
#: Largest request XML body accepted (DeleteObjects with 1000 long keys fits).
MAX_XML_BYTES: Final = 2 * 1024 * 1024
MAX_DELETE_KEYS: Final = 1000

# --------------------------------------------------------------------------- times


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def iso8601(when: datetime) -> str:
    """``2026-11-30T08:00:00.000Z`` (UTC, milliseconds; naive means UTC)."""
    when = _utc(when)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# --------------------------------------------------------------------------- writing

_INVALID_XML_CHARS: Final = re.compile("[\x00-\x08\x0b\x0c\x0d\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _char_ref(match: re.Match[str]) -> str:
    return f"&#x{ord(match.group()):X};"


def escape(text: str) -> str:
    """Escape text content: ``& < >`` and characters XML cannot hold literally."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _INVALID_XML_CHARS.sub(_char_ref, text)


class _Doc:
    """A tiny XML writer (elements and text only)."""

    def __init__(self, root: str, namespace: bool = True) -> None:
        self._parts: list[str] = []
        attrs = f' xmlns="{S3_NAMESPACE}"' if namespace else ""
        self._parts.append(f"<{root}{attrs}>")
        self._root = root

    def leaf(self, tag: str, value: str | int | bool | None) -> None:
        """``<tag>value</tag>``; ``None`` writes nothing; booleans are ``true``/``false``."""
        if value is None:
            return
        text = ("true" if value else "false") if isinstance(value, bool) else escape(str(value))
        self._parts.append(f"<{tag}>{text}</{tag}>")

    def text(self, value: str) -> None:
        self._parts.append(escape(value))

    def open(self, tag: str) -> None:
        self._parts.append(f"<{tag}>")

    def close(self, tag: str) -> None:
        self._parts.append(f"</{tag}>")

    def bytes(self) -> bytes:
        return XML_DECLARATION + ("".join(self._parts) + f"</{self._root}>").encode("utf-8")


def _encode(value: str | None, encoding_type: str | None) -> str | None:
    if value is None or encoding_type != "url":
        return value
    return quote(value, safe="/")


def _etag(etag: str) -> str:
    """ETags are quoted in S3 XML; accept them bare or quoted."""
    etag = etag.strip()
    return etag if etag.startswith('"') else f'"{etag}"'


@dataclass(frozen=True, slots=True)
class Owner:
    id: str
    display_name: str


#: The version id of every object: buckets here are never versioned, and
#: that is how S3 names the one version of an object in such a bucket.
NULL_VERSION_ID: Final = "null"

#: Used when the caller has no better owner to report.
DEFAULT_OWNER: Final = Owner("teleuploader", "teleuploader")


def _owner(doc: _Doc, owner: Owner | None, tag: str = "Owner") -> None:
    if owner is None:
        return
    doc.open(tag)
    doc.leaf("ID", owner.id)
    doc.leaf("DisplayName", owner.display_name)
    doc.close(tag)


def error_xml(
    code: str,
    message: str,
    *,
    resource: str | None = None,
    request_id: str | None = None,
    details: Iterable[tuple[str, str]] = (),
) -> bytes:
    """``<Error>`` (no namespace, like AWS) with Code, Message, details, Resource, RequestId."""
    doc = _Doc("Error", namespace=False)
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


@dataclass(frozen=True, slots=True)
class BucketEntry:
    name: str
    creation_date: datetime


def list_buckets_xml(
    buckets: Sequence[BucketEntry],
    owner: Owner = DEFAULT_OWNER,
    *,
    continuation_token: str | None = None,
    prefix: str | None = None,
) -> bytes:
    """``ListAllMyBucketsResult`` (a page: ``ContinuationToken`` when there is more)."""
    doc = _Doc("ListAllMyBucketsResult")
    _owner(doc, owner)
    doc.open("Buckets")
    for bucket in buckets:
        doc.open("Bucket")
        doc.leaf("Name", bucket.name)
        doc.leaf("CreationDate", iso8601(bucket.creation_date))
        doc.close("Bucket")
    doc.close("Buckets")
    doc.leaf("ContinuationToken", continuation_token)
    doc.leaf("Prefix", prefix)
    return doc.bytes()


@dataclass(frozen=True, slots=True)
class ObjectEntry:
    """One ``<Contents>`` of a listing. ``etag`` bare or quoted."""

    key: str
    last_modified: datetime
    etag: str
    size: int
    storage_class: str = "STANDARD"
    owner: Owner | None = None


def _contents(doc: _Doc, entries: Sequence[ObjectEntry], encoding_type: str | None) -> None:
    for entry in entries:
        doc.open("Contents")
        doc.leaf("Key", _encode(entry.key, encoding_type))
        doc.leaf("LastModified", iso8601(entry.last_modified))
        doc.leaf("ETag", _etag(entry.etag))
        doc.leaf("Size", entry.size)
        _owner(doc, entry.owner)
        doc.leaf("StorageClass", entry.storage_class)
        doc.close("Contents")


def _common_prefixes(doc: _Doc, prefixes: Sequence[str], encoding_type: str | None) -> None:
    for prefix in prefixes:
        doc.open("CommonPrefixes")
        doc.leaf("Prefix", _encode(prefix, encoding_type))
        doc.close("CommonPrefixes")


def list_objects_v1_xml(
    *,
    bucket: str,
    prefix: str = "",
    marker: str = "",
    max_keys: int = 1000,
    is_truncated: bool = False,
    contents: Sequence[ObjectEntry] = (),
    common_prefixes: Sequence[str] = (),
    delimiter: str | None = None,
    next_marker: str | None = None,
    encoding_type: str | None = None,
) -> bytes:
    """``ListBucketResult`` (ListObjects v1).

    ``next_marker``: AWS sends it only when a delimiter was given and the
    listing is truncated (clients otherwise continue from the last key); pass
    ``None`` to leave it out.

    The top-level ``Prefix`` is never URL-encoded in v1: AWS sends it as
    given, and botocore (which decodes Marker, NextMarker, Delimiter, keys and
    common prefixes of a v1 answer) would hand ``%0A`` to the user for ``\n``.
    """
    doc = _Doc("ListBucketResult")
    doc.leaf("Name", bucket)
    doc.leaf("Prefix", prefix)
    doc.leaf("Marker", _encode(marker, encoding_type))
    doc.leaf("NextMarker", _encode(next_marker, encoding_type))
    doc.leaf("MaxKeys", max_keys)
    doc.leaf("Delimiter", _encode(delimiter, encoding_type))
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("EncodingType", encoding_type)
    _contents(doc, contents, encoding_type)
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.bytes()


def list_objects_v2_xml(
    *,
    bucket: str,
    prefix: str = "",
    max_keys: int = 1000,
    is_truncated: bool = False,
    contents: Sequence[ObjectEntry] = (),
    common_prefixes: Sequence[str] = (),
    delimiter: str | None = None,
    continuation_token: str | None = None,
    next_continuation_token: str | None = None,
    start_after: str | None = None,
    encoding_type: str | None = None,
) -> bytes:
    """``ListBucketResult`` (ListObjectsV2). ``KeyCount`` = contents + common prefixes.

    Continuation tokens are opaque and never URL-encoded.
    """
    doc = _Doc("ListBucketResult")
    doc.leaf("Name", bucket)
    doc.leaf("Prefix", _encode(prefix, encoding_type))
    doc.leaf("KeyCount", len(contents) + len(common_prefixes))
    doc.leaf("MaxKeys", max_keys)
    doc.leaf("Delimiter", _encode(delimiter, encoding_type))
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("ContinuationToken", continuation_token)
    doc.leaf("NextContinuationToken", next_continuation_token)
    doc.leaf("StartAfter", _encode(start_after, encoding_type))
    doc.leaf("EncodingType", encoding_type)
    _contents(doc, contents, encoding_type)
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.bytes()


def list_object_versions_xml(
    *,
    bucket: str,
    prefix: str = "",
    key_marker: str = "",
    version_id_marker: str = "",
    max_keys: int = 1000,
    is_truncated: bool = False,
    versions: Sequence[ObjectEntry] = (),
    common_prefixes: Sequence[str] = (),
    delimiter: str | None = None,
    next_key_marker: str | None = None,
    encoding_type: str | None = None,
) -> bytes:
    """``ListVersionsResult`` of an unversioned bucket: every object is its
    one and latest version, with the version id ``null``, as AWS lists the
    objects of a bucket that never had versioning."""
    doc = _Doc("ListVersionsResult")
    doc.leaf("Name", bucket)
    doc.leaf("Prefix", _encode(prefix, encoding_type))
    doc.leaf("KeyMarker", _encode(key_marker, encoding_type))
    doc.leaf("VersionIdMarker", version_id_marker)
    if is_truncated and next_key_marker is not None:
        doc.leaf("NextKeyMarker", _encode(next_key_marker, encoding_type))
        doc.leaf("NextVersionIdMarker", NULL_VERSION_ID)
    doc.leaf("MaxKeys", max_keys)
    doc.leaf("Delimiter", _encode(delimiter, encoding_type))
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("EncodingType", encoding_type)
    for entry in versions:
        doc.open("Version")
        doc.leaf("Key", _encode(entry.key, encoding_type))
        doc.leaf("VersionId", NULL_VERSION_ID)
        doc.leaf("IsLatest", True)
        doc.leaf("LastModified", iso8601(entry.last_modified))
        doc.leaf("ETag", _etag(entry.etag))
        doc.leaf("Size", entry.size)
        _owner(doc, entry.owner)
        doc.leaf("StorageClass", entry.storage_class)
        doc.close("Version")
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.bytes()


def initiate_multipart_upload_xml(bucket: str, key: str, upload_id: str) -> bytes:
    """``InitiateMultipartUploadResult``."""
    doc = _Doc("InitiateMultipartUploadResult")
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("UploadId", upload_id)
    return doc.bytes()


def complete_multipart_upload_xml(
    location: str, bucket: str, key: str, etag: str, checksum: Checksum | None = None
) -> bytes:
    """``CompleteMultipartUploadResult`` (``etag`` like ``"<md5 of md5s>-N"``)."""
    doc = _Doc("CompleteMultipartUploadResult")
    doc.leaf("Location", location)
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("ETag", _etag(etag))
    _checksum(doc, checksum)
    return doc.bytes()


def post_response_xml(location: str, bucket: str, key: str, etag: str) -> bytes:
    """``PostResponse``: what POST Object answers with `success_action_status=201`."""
    doc = _Doc("PostResponse")
    doc.leaf("Location", location)
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("ETag", _etag(etag))
    return doc.bytes()


class Checksum(NamedTuple):
    """A flexible checksum as S3 XML carries it: algorithm (lowercase), base64
    value, type (COMPOSITE, FULL_OBJECT; None to leave the type out)."""

    algorithm: str
    value: str
    type: str | None = None


def checksum_element(algorithm: str) -> str:
    """``ChecksumCRC32``, ``ChecksumCRC64NVME``, ``ChecksumSHA256``..."""
    return "Checksum" + algorithm.upper()


def _checksum(doc: _Doc, checksum: Checksum | None) -> None:
    if checksum is not None:
        doc.leaf(checksum_element(checksum.algorithm), checksum.value)
        doc.leaf("ChecksumType", checksum.type)


def copy_object_xml(etag: str, last_modified: datetime) -> bytes:
    """``CopyObjectResult``."""
    doc = _Doc("CopyObjectResult")
    doc.leaf("LastModified", iso8601(last_modified))
    doc.leaf("ETag", _etag(etag))
    return doc.bytes()


def copy_part_xml(etag: str, last_modified: datetime) -> bytes:
    """``CopyPartResult`` (UploadPartCopy)."""
    doc = _Doc("CopyPartResult")
    doc.leaf("LastModified", iso8601(last_modified))
    doc.leaf("ETag", _etag(etag))
    return doc.bytes()


@dataclass(frozen=True, slots=True)
class PartEntry:
    part_number: int
    last_modified: datetime
    etag: str
    size: int
    #: (algorithm, base64 value) of the part's checksum, if it has one.
    checksum: tuple[str, str] | None = None


def list_parts_xml(
    *,
    bucket: str,
    key: str,
    upload_id: str,
    parts: Sequence[PartEntry],
    part_number_marker: int = 0,
    next_part_number_marker: int | None = None,
    max_parts: int = 1000,
    is_truncated: bool = False,
    storage_class: str = "STANDARD",
    owner: Owner = DEFAULT_OWNER,
    checksum_algorithm: str | None = None,
    checksum_type: str | None = None,
) -> bytes:
    """``ListPartsResult``. ``next_part_number_marker`` defaults to the last part's number."""
    if next_part_number_marker is None:
        next_part_number_marker = parts[-1].part_number if parts else part_number_marker
    doc = _Doc("ListPartsResult")
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("UploadId", upload_id)
    _owner(doc, owner, "Initiator")
    _owner(doc, owner)
    doc.leaf("StorageClass", storage_class)
    doc.leaf("ChecksumAlgorithm", checksum_algorithm.upper() if checksum_algorithm else None)
    doc.leaf("ChecksumType", checksum_type)
    doc.leaf("PartNumberMarker", part_number_marker)
    doc.leaf("NextPartNumberMarker", next_part_number_marker)
    doc.leaf("MaxParts", max_parts)
    doc.leaf("IsTruncated", is_truncated)
    for part in parts:
        doc.open("Part")
        doc.leaf("PartNumber", part.part_number)
        doc.leaf("LastModified", iso8601(part.last_modified))
        doc.leaf("ETag", _etag(part.etag))
        doc.leaf("Size", part.size)
        if part.checksum is not None:
            doc.leaf(checksum_element(part.checksum[0]), part.checksum[1])
        doc.close("Part")
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
    doc = _Doc("GetObjectAttributesResponse")
    doc.leaf("ETag", etag.strip('"') if etag is not None else None)
    if checksum is not None:
        doc.open("Checksum")
        _checksum(doc, checksum)
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
class UploadEntry:
    key: str
    upload_id: str
    initiated: datetime
    storage_class: str = "STANDARD"


def list_multipart_uploads_xml(
    *,
    bucket: str,
    uploads: Sequence[UploadEntry],
    key_marker: str = "",
    upload_id_marker: str = "",
    next_key_marker: str | None = None,
    next_upload_id_marker: str | None = None,
    max_uploads: int = 1000,
    is_truncated: bool = False,
    prefix: str = "",
    delimiter: str | None = None,
    common_prefixes: Sequence[str] = (),
    encoding_type: str | None = None,
    owner: Owner = DEFAULT_OWNER,
) -> bytes:
    """``ListMultipartUploadsResult``.

    The next markers default to the last upload's key and id when truncated.
    """
    if is_truncated and uploads:
        if next_key_marker is None:
            next_key_marker = uploads[-1].key
        if next_upload_id_marker is None:
            next_upload_id_marker = uploads[-1].upload_id
    doc = _Doc("ListMultipartUploadsResult")
    doc.leaf("Bucket", bucket)
    doc.leaf("KeyMarker", _encode(key_marker, encoding_type))
    doc.leaf("UploadIdMarker", upload_id_marker)
    doc.leaf("NextKeyMarker", _encode(next_key_marker or "", encoding_type))
    doc.leaf("NextUploadIdMarker", next_upload_id_marker or "")
    doc.leaf("Prefix", _encode(prefix, encoding_type))
    doc.leaf("Delimiter", _encode(delimiter, encoding_type))
    doc.leaf("MaxUploads", max_uploads)
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("EncodingType", encoding_type)
    for upload in uploads:
        doc.open("Upload")
        doc.leaf("Key", _encode(upload.key, encoding_type))
        doc.leaf("UploadId", upload.upload_id)
        _owner(doc, owner, "Initiator")
        _owner(doc, owner)
        doc.leaf("StorageClass", upload.storage_class)
        doc.leaf("Initiated", iso8601(upload.initiated))
        doc.close("Upload")
    _common_prefixes(doc, common_prefixes, encoding_type)
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
    doc = _Doc("DeleteResult")
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
    doc = _Doc("LocationConstraint")
    if region and region != "us-east-1":
        doc.text(region)
    return doc.bytes()


def versioning_configuration_xml(status: str | None = None) -> bytes:
    """``VersioningConfiguration``: empty (never enabled) unless ``status`` is given."""
    doc = _Doc("VersioningConfiguration")
    doc.leaf("Status", status)
    return doc.bytes()


# --------------------------------------------------------------------------- parsing


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def parse_xml(body: bytes, root: str) -> Element:
    """Parse a request body with defusedxml and check its root element name.

    Raises ``MalformedXML`` for anything over :data:`MAX_XML_BYTES`, not
    well-formed, carrying a DTD or entity declarations, or with another root;
    ``MissingRequestBodyError`` for an empty body.
    """
    if not body.strip():
        raise S3Error("MissingRequestBodyError")
    if len(body) > MAX_XML_BYTES:
        raise S3Error("MalformedXML", f"The XML body is larger than {MAX_XML_BYTES} bytes.")
    try:
        element = DefusedET.fromstring(body, forbid_dtd=True)
    except (ParseError, DefusedXmlException, ValueError):
        raise S3Error("MalformedXML") from None
    if _local(element.tag) != root:
        raise S3Error("MalformedXML", f"The root element must be {root}.")
    return element


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child.tag) == name]


def _child_text(element: Element, name: str) -> str | None:
    found = _children(element, name)
    if len(found) > 1:
        raise S3Error("MalformedXML", f"{name} is given twice.")
    if not found:
        return None
    return found[0].text or ""


def parse_versioning_configuration(body: bytes) -> str:
    """``<VersioningConfiguration><Status>Enabled|Suspended</Status>``: the status."""
    root = parse_xml(body, "VersioningConfiguration")
    status = (_child_text(root, "Status") or "").strip()
    if status not in ("Enabled", "Suspended"):
        raise S3Error("MalformedXML", "Status must be Enabled or Suspended.")
    return status


class DeleteRequest(NamedTuple):
    quiet: bool
    keys: list[str]


def parse_delete_objects(body: bytes) -> DeleteRequest:
    """``<Delete><Quiet>?</Quiet><Object><Key>k</Key></Object>...</Delete>``.

    Keys are returned exactly (whitespace kept), in order; ``VersionId`` is
    ignored (no versioning). 1 to :data:`MAX_DELETE_KEYS` objects, else
    ``MalformedXML``.
    """
    root = parse_xml(body, "Delete")
    quiet_text = _child_text(root, "Quiet")
    quiet = False
    if quiet_text is not None:
        normalized = quiet_text.strip().lower()
        if normalized not in ("true", "false"):
            raise S3Error("MalformedXML", "Quiet must be true or false.")
        quiet = normalized == "true"
    objects = _children(root, "Object")
    if not objects:
        raise S3Error("MalformedXML", "Delete must list at least one Object.")
    if len(objects) > MAX_DELETE_KEYS:
        raise S3Error("MalformedXML", f"Delete may list at most {MAX_DELETE_KEYS} objects.")
    keys: list[str] = []
    for obj in objects:
        key = _child_text(obj, "Key")
        if key is None:
            raise S3Error("MalformedXML", "Every Object needs a Key.")
        keys.append(key)
    return DeleteRequest(quiet, keys)


class CompletedPart(NamedTuple):
    part_number: int
    #: The ETag without quotes or surrounding blanks.
    etag: str


def parse_complete_multipart(body: bytes) -> list[CompletedPart]:
    """``<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"x"</ETag></Part>...``.

    Returns the parts in the order given, ETags unquoted. No part at all is
    accepted (AWS refuses it, but Docker's registry 2.8 completes an empty
    blob that way; it makes an empty object); part numbers 1-10000
    (``InvalidArgument`` otherwise) in strictly ascending order
    (``InvalidPartOrder`` otherwise); checksum elements are ignored.
    """
    root = parse_xml(body, "CompleteMultipartUpload")
    elements = _children(root, "Part")
    if len(elements) > MAX_PART_NUMBER:
        raise S3Error("MalformedXML", f"At most {MAX_PART_NUMBER} parts can be completed.")
    parts: list[CompletedPart] = []
    for element in elements:
        number_text = _child_text(element, "PartNumber")
        etag = _child_text(element, "ETag")
        if number_text is None or etag is None:
            raise S3Error("MalformedXML", "Every Part needs a PartNumber and an ETag.")
        number_text = number_text.strip()
        number = parse_decimal(number_text, max_digits=9)
        if number is None:
            raise S3Error("MalformedXML", "PartNumber must be an integer.")
        if not 1 <= number <= MAX_PART_NUMBER:
            raise S3Error(
                "InvalidArgument",
                f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive",
                details={"ArgumentName": "PartNumber", "ArgumentValue": number_text},
            )
        if parts and number <= parts[-1].part_number:
            raise S3Error("InvalidPartOrder")
        parts.append(CompletedPart(number, etag.strip().strip('"')))
    return parts


def parse_complete_part_checksums(body: bytes) -> dict[int, tuple[str, str]]:
    """The ``Checksum<ALGORITHM>`` a CompleteMultipartUpload body gives for
    its parts: part number -> (algorithm lowercase, base64 value). Call after
    :func:`parse_complete_multipart`, which checks the rest."""
    root = parse_xml(body, "CompleteMultipartUpload")
    found: dict[int, tuple[str, str]] = {}
    for element in _children(root, "Part"):
        number = parse_decimal((_child_text(element, "PartNumber") or "").strip(), max_digits=9)
        for child in element:
            name = _local(child.tag)
            if name.startswith("Checksum") and name != "ChecksumType" and number is not None:
                found[number] = (name.removeprefix("Checksum").lower(), (child.text or "").strip())
    return found


def parse_create_bucket_configuration(body: bytes) -> str | None:
    """The ``LocationConstraint`` of a CreateBucket body (``None`` for no body or none given)."""
    if not body.strip():
        return None
    root = parse_xml(body, "CreateBucketConfiguration")
    location = _child_text(root, "LocationConstraint")
    return location.strip() or None if location is not None else None
