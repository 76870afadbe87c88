"""Listing documents: buckets, objects (v1, v2, versions), parts, multipart uploads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, NamedTuple

from app.http.s3.xml.writer import (
    DEFAULT_OWNER,
    NULL_VERSION_ID,
    STANDARD_STORAGE_CLASS,
    Doc,
    Owner,
    checksum_element,
    encoded,
    escape,
    iso8601,
    owner_markup,
    quoted_etag,
    write_owner,
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
    doc = Doc("ListAllMyBucketsResult")
    write_owner(doc, owner)
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


class ObjectEntry(NamedTuple):
    """One ``<Contents>`` of a listing. ``etag`` bare or quoted. (A named
    tuple: a page makes up to 1,000, and a frozen dataclass takes twice as
    long to build.)"""

    key: str
    last_modified: datetime
    etag: str
    size: int
    storage_class: str = STANDARD_STORAGE_CLASS
    owner: Owner | None = None


def _contents(doc: Doc, entries: Sequence[ObjectEntry], encoding_type: str | None) -> None:
    _object_elements(doc, "Contents", entries, encoding_type)


# What a ListObjectVersions entry adds after its key: every object is its
# bucket's one and latest version.
_ONLY_VERSION: Final = f"<VersionId>{NULL_VERSION_ID}</VersionId><IsLatest>true</IsLatest>"


def _object_elements(
    doc: Doc,
    element: str,
    entries: Sequence[ObjectEntry],
    encoding_type: str | None,
    after_key: str = "",
) -> None:
    # One string per entry: up to 1,000 of them, where element by element
    # took more CPU than reading the page from the database.
    for entry in entries:
        key = encoded(entry.key, encoding_type)
        owner = "" if entry.owner is None else owner_markup(entry.owner)
        doc.raw(
            f"<{element}><Key>{escape(key)}</Key>{after_key}"
            f"<LastModified>{iso8601(entry.last_modified)}</LastModified>"
            f"<ETag>{escape(quoted_etag(entry.etag))}</ETag><Size>{entry.size}</Size>{owner}"
            f"<StorageClass>{escape(entry.storage_class)}</StorageClass></{element}>"
        )


def _common_prefixes(doc: Doc, prefixes: Sequence[str], encoding_type: str | None) -> None:
    for prefix in prefixes:
        doc.raw(
            f"<CommonPrefixes><Prefix>{escape(encoded(prefix, encoding_type))}</Prefix>"
            "</CommonPrefixes>"
        )


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
    doc = Doc("ListBucketResult")
    doc.leaf("Name", bucket)
    doc.leaf("Prefix", prefix)
    doc.leaf("Marker", encoded(marker, encoding_type))
    doc.leaf("NextMarker", encoded(next_marker, encoding_type))
    doc.leaf("MaxKeys", max_keys)
    doc.leaf("Delimiter", encoded(delimiter, encoding_type))
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
    doc = Doc("ListBucketResult")
    doc.leaf("Name", bucket)
    doc.leaf("Prefix", encoded(prefix, encoding_type))
    doc.leaf("KeyCount", len(contents) + len(common_prefixes))
    doc.leaf("MaxKeys", max_keys)
    doc.leaf("Delimiter", encoded(delimiter, encoding_type))
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("ContinuationToken", continuation_token)
    doc.leaf("NextContinuationToken", next_continuation_token)
    doc.leaf("StartAfter", encoded(start_after, encoding_type))
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
    doc = Doc("ListVersionsResult")
    doc.leaf("Name", bucket)
    doc.leaf("Prefix", encoded(prefix, encoding_type))
    doc.leaf("KeyMarker", encoded(key_marker, encoding_type))
    doc.leaf("VersionIdMarker", version_id_marker)
    if is_truncated and next_key_marker is not None:
        doc.leaf("NextKeyMarker", encoded(next_key_marker, encoding_type))
        doc.leaf("NextVersionIdMarker", NULL_VERSION_ID)
    doc.leaf("MaxKeys", max_keys)
    doc.leaf("Delimiter", encoded(delimiter, encoding_type))
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("EncodingType", encoding_type)
    _object_elements(doc, "Version", versions, encoding_type, after_key=_ONLY_VERSION)
    _common_prefixes(doc, common_prefixes, encoding_type)
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
    storage_class: str = STANDARD_STORAGE_CLASS,
    owner: Owner = DEFAULT_OWNER,
    checksum_algorithm: str | None = None,
    checksum_type: str | None = None,
) -> bytes:
    """``ListPartsResult``. ``next_part_number_marker`` defaults to the last part's number."""
    if next_part_number_marker is None:
        next_part_number_marker = parts[-1].part_number if parts else part_number_marker
    doc = Doc("ListPartsResult")
    doc.leaf("Bucket", bucket)
    doc.leaf("Key", key)
    doc.leaf("UploadId", upload_id)
    write_owner(doc, owner, "Initiator")
    write_owner(doc, owner)
    doc.leaf("StorageClass", storage_class)
    doc.leaf("ChecksumAlgorithm", checksum_algorithm.upper() if checksum_algorithm else None)
    doc.leaf("ChecksumType", checksum_type)
    doc.leaf("PartNumberMarker", part_number_marker)
    doc.leaf("NextPartNumberMarker", next_part_number_marker)
    doc.leaf("MaxParts", max_parts)
    doc.leaf("IsTruncated", is_truncated)
    for part in parts:
        checksum = ""
        if part.checksum is not None:
            tag = checksum_element(part.checksum[0])
            checksum = f"<{tag}>{escape(part.checksum[1])}</{tag}>"
        doc.raw(
            f"<Part><PartNumber>{part.part_number}</PartNumber>"
            f"<LastModified>{iso8601(part.last_modified)}</LastModified>"
            f"<ETag>{escape(quoted_etag(part.etag))}</ETag><Size>{part.size}</Size>{checksum}"
            "</Part>"
        )
    return doc.bytes()


@dataclass(frozen=True, slots=True)
class UploadEntry:
    key: str
    upload_id: str
    initiated: datetime
    storage_class: str = STANDARD_STORAGE_CLASS


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
    doc = Doc("ListMultipartUploadsResult")
    doc.leaf("Bucket", bucket)
    doc.leaf("KeyMarker", encoded(key_marker, encoding_type))
    doc.leaf("UploadIdMarker", upload_id_marker)
    doc.leaf("NextKeyMarker", encoded(next_key_marker or "", encoding_type))
    doc.leaf("NextUploadIdMarker", next_upload_id_marker or "")
    doc.leaf("Prefix", encoded(prefix, encoding_type))
    doc.leaf("Delimiter", encoded(delimiter, encoding_type))
    doc.leaf("MaxUploads", max_uploads)
    doc.leaf("IsTruncated", is_truncated)
    doc.leaf("EncodingType", encoding_type)
    owners = owner_markup(owner, "Initiator") + owner_markup(owner)
    for upload in uploads:
        key = encoded(upload.key, encoding_type)
        doc.raw(
            f"<Upload><Key>{escape(key)}</Key><UploadId>{escape(upload.upload_id)}</UploadId>"
            f"{owners}<StorageClass>{escape(upload.storage_class)}</StorageClass>"
            f"<Initiated>{iso8601(upload.initiated)}</Initiated></Upload>"
        )
    _common_prefixes(doc, common_prefixes, encoding_type)
    return doc.bytes()
