"""S3 listings a page at a time: ListObjects (keys) and ListMultipartUploads
(uploads), rolled up into common prefixes at a delimiter.

A page is one statement (see app.db.listing): it reads only the columns a
listing shows, and a common prefix costs one index seek however many keys are
under it, so a page costs the same in a bucket of a thousand keys or millions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.db.listing import (
    CommonPrefix,
    ListedObject,
    ListedUpload,
    ListingRepository,
    RowReader,
    UnsupportedDelimiter,
)

__all__ = ["ListedObject", "ListedUpload", "Listing", "UnsupportedDelimiter", "UploadListing"]


@dataclass
class Listing:
    objects: list[ListedObject] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    # The last key or common prefix returned: where the next page starts.
    last: str | None = None

    @property
    def count(self) -> int:
        return len(self.objects) + len(self.prefixes)


@dataclass
class UploadListing:
    uploads: list[ListedUpload] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    # Where the next page starts (S3's NextKeyMarker and NextUploadIdMarker):
    # the last upload, or the last common prefix and no upload id.
    next_key: str | None = None
    next_upload_id: str | None = None


async def list_objects(
    reader: RowReader,
    bucket: str,
    *,
    prefix: str,
    delimiter: str | None,
    after: str | None,
    max_keys: int,
) -> Listing:
    """Up to `max_keys` keys and common prefixes after `after`, in byte order.

    Raises UnsupportedDelimiter. A page of none (max-keys=0) is empty and
    not truncated, as S3 answers it.
    """
    if max_keys <= 0:
        return Listing()
    # One entry more than the page tells whether it is the last.
    entries = await ListingRepository(reader).objects(
        bucket, prefix=prefix, delimiter=delimiter, after=after, limit=max_keys + 1
    )
    listing = Listing(truncated=len(entries) > max_keys)
    for entry in entries[:max_keys]:
        if isinstance(entry, CommonPrefix):
            listing.prefixes.append(entry.prefix)
            listing.last = entry.prefix
        else:
            listing.objects.append(entry)
            listing.last = entry.key
    return listing


async def list_uploads(
    reader: RowReader,
    bucket: str,
    *,
    prefix: str,
    delimiter: str | None,
    key_marker: str | None,
    upload_id_marker: str | None,
    max_uploads: int,
) -> UploadListing:
    """Up to `max_uploads` uploads and common prefixes after the markers.

    Raises UnsupportedDelimiter.
    """
    entries = await ListingRepository(reader).uploads(
        bucket,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        upload_id_marker=upload_id_marker,
        limit=max_uploads + 1,
    )
    listing = UploadListing(truncated=len(entries) > max_uploads)
    for entry in entries[:max_uploads]:
        if isinstance(entry, CommonPrefix):
            listing.prefixes.append(entry.prefix)
            listing.next_key, listing.next_upload_id = entry.prefix, None
        else:
            listing.uploads.append(entry)
            listing.next_key, listing.next_upload_id = entry.key, entry.upload_id
    return listing
