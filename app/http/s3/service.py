"""S3 operations on top of the object store: buckets, objects, copies,
listings and multipart uploads.

Everything that moves content goes through the object store (chunks in
Telegram, or inline when small). Copies — CopyObject and UploadPartCopy — are
metadata only: the new object or part points at the same chunks, so moving a
multi-GB blob (the Docker registry does that on every push) costs no upload.
A part copied into an upload with a checksum algorithm is read back once, to
checksum it (MultipartStore.upload_part_copy).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NamedTuple

from app.http.s3.errors import S3Error
from app.http.s3.write_conditions import WriteConditions
from app.store.buckets import BucketInfo, BucketNotEmpty, BucketStore
from app.store.errors import ObjectNotFound, UploadTooLarge
from app.store.limits import MAX_PART_NUMBER
from app.store.listing import Listing, UnsupportedDelimiter, UploadListing
from app.store.multipart import (
    FlushFailed,
    InvalidPart,
    InvalidPartOrder,
    MultipartStore,
    PartInfo,
    PartTooSmall,
    UploadInfo,
    UploadMissing,
)
from app.store.object_seal import ObjectSeal
from app.store.object_write import ObjectWrite, object_name
from app.store.service import (
    DEFAULT_CONTENT_TYPE,
    ObjectInfo,
    ObjectStore,
    PartSummary,
    StoredChecksum,
)

# Uploads aborted per listing while a bucket is deleted.
MAX_UPLOADS_PER_ROUND = 1000


class CopiedPart(NamedTuple):
    """What UploadPartCopy answers: the part's ETag, and its checksum in the
    upload's algorithm (both None without one)."""

    etag: str
    checksum_algorithm: str | None
    checksum: str | None


class SourceChanged(S3Error):
    """The copy source was replaced or deleted between reading it and copying
    its pieces. The routes read it again and retry (`COPY_ATTEMPTS`)."""

    def __init__(self) -> None:
        super().__init__("NoSuchKey", "The source object changed while being copied.")


class S3Service:
    def __init__(
        self,
        store: ObjectStore,
        buckets: BucketStore,
        multipart: MultipartStore,
        *,
        max_upload_size: int,
    ) -> None:
        self._store = store
        self._buckets = buckets
        self._multipart = multipart
        self._max_upload_size = max_upload_size

    # --- buckets ------------------------------------------------------------------

    async def list_buckets(
        self, *, prefix: str = "", after: str | None = None, limit: int | None = None
    ) -> list[BucketInfo]:
        return await self._buckets.list(prefix=prefix, after=after, limit=limit)

    async def create_bucket(self, name: str) -> bool:
        return await self._buckets.create(name)

    async def require_bucket(self, name: str) -> None:
        if not await self._buckets.exists(name):
            raise S3Error("NoSuchBucket", resource=f"/{name}")

    async def delete_bucket(self, name: str) -> None:
        """Delete a bucket with no objects. Multipart uploads still in progress
        do not keep it (as in AWS): they are aborted, their parts go to the GC."""
        await self.require_bucket(name)
        while True:
            page = await self._buckets.list_uploads(
                name,
                prefix="",
                delimiter=None,
                key_marker=None,
                upload_id_marker=None,
                max_uploads=MAX_UPLOADS_PER_ROUND,
            )
            if not page.uploads:
                break
            for listed in page.uploads:
                upload = await self._multipart.get(listed.upload_id, bucket=name, key=listed.key)
                if upload is not None:  # else aborted or completed meanwhile
                    await self._multipart.abort(upload)
        try:
            deleted = await self._buckets.delete(name)
        except BucketNotEmpty:
            raise S3Error("BucketNotEmpty", resource=f"/{name}") from None
        if not deleted:
            raise S3Error("NoSuchBucket", resource=f"/{name}")

    # --- objects ------------------------------------------------------------------

    async def head_object(self, bucket: str, key: str) -> ObjectInfo:
        info = await self._store.get(bucket, key)
        if info is None:
            await self.require_bucket(bucket)
            raise S3Error("NoSuchKey", resource=f"/{bucket}/{key}")
        return info

    async def put_object(
        self,
        bucket: str,
        key: str,
        body: AsyncIterator[bytes],
        *,
        content_type: str | None,
        metadata: Mapping[str, str],
        expected_size: int | None = None,
        checksum: Callable[[], StoredChecksum | None] | None = None,
        tags: Mapping[str, str] | None = None,
        conditions: WriteConditions | None = None,
    ) -> ObjectInfo:
        await self.require_bucket(bucket)
        check = None
        if conditions is not None:
            # Before the body is read: a refused PUT sends nothing to Telegram.
            current = await self._store.get(bucket, key)
            conditions.check_now(current.etag if current is not None else None)
            check = conditions.at_commit()
        try:
            return await self._store.put_stream(
                body,
                ObjectWrite(
                    bucket=bucket,
                    key=key,
                    name=object_name(key),
                    content_type=content_type,
                    metadata=metadata,
                    max_size=self._max_upload_size,
                    expected_size=expected_size,
                    checksum=checksum,
                    tags=tags,
                    check=check,
                ),
            )
        except UploadTooLarge:
            raise _too_large(self._max_upload_size) from None

    async def parts_of(self, info: ObjectInfo) -> list[PartSummary] | None:
        """The parts of an object CompleteMultipartUpload made (None for others)."""
        return await self._store.parts_of(info)

    async def set_object_tags(self, bucket: str, key: str, tags: Mapping[str, str] | None) -> None:
        """Replace the tags of the object (None: remove them)."""
        await self.require_bucket(bucket)
        if not await self._store.set_tags(bucket, key, tags):
            raise S3Error("NoSuchKey", resource=f"/{bucket}/{key}")

    async def delete_object(self, bucket: str, key: str) -> None:
        await self.require_bucket(bucket)
        await self._store.delete(bucket, key)

    async def copy_object(
        self,
        source: ObjectInfo,
        *,
        bucket: str,
        key: str,
        content_type: str,
        metadata: Mapping[str, Any],
        tags: Mapping[str, str] | None = None,
    ) -> ObjectInfo:
        """A new object with the source's content, pointing at the same chunks."""
        await self.require_bucket(bucket)
        copied = await self._store.copy(
            source,
            bucket=bucket,
            key=key,
            name=object_name(key),
            content_type=content_type,
            metadata=metadata,
            tags=tags,
        )
        if copied is None:
            raise SourceChanged()
        return copied

    async def list_objects(
        self,
        bucket: str,
        *,
        prefix: str,
        delimiter: str | None,
        after: str | None,
        max_keys: int,
    ) -> Listing:
        await self.require_bucket(bucket)
        try:
            return await self._buckets.list_objects(
                bucket, prefix=prefix, delimiter=delimiter, after=after, max_keys=max_keys
            )
        except UnsupportedDelimiter as exc:
            raise S3Error("InvalidArgument", f"Invalid delimiter: {exc}.") from None

    # --- multipart ----------------------------------------------------------------

    async def create_upload(
        self,
        bucket: str,
        key: str,
        *,
        content_type: str | None,
        metadata: Mapping[str, Any],
        checksum_algorithm: str | None = None,
        checksum_type: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> UploadInfo:
        await self.require_bucket(bucket)
        return await self._multipart.create(
            bucket=bucket,
            key=key,
            content_type=content_type or DEFAULT_CONTENT_TYPE,
            metadata=metadata,
            checksum_algorithm=checksum_algorithm,
            checksum_type=checksum_type,
            tags=tags,
        )

    async def require_upload(self, bucket: str, key: str, upload_id: str) -> UploadInfo:
        upload = await self._multipart.get(upload_id, bucket=bucket, key=key)
        if upload is None:
            raise _no_such_upload(bucket, key)
        return upload

    async def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        body: AsyncIterator[bytes],
        expected_size: int | None = None,
        checksum: Callable[[], str | None] | None = None,
        *,
        upload: UploadInfo | None = None,
    ) -> str:
        """Store one part; returns its ETag (quoted MD5). `upload`: the
        upload, when the caller has read it already."""
        _check_part_number(part_number)
        if upload is None:
            upload = await self.require_upload(bucket, key, upload_id)
        try:
            return await self._multipart.upload_part(
                upload,
                part_number,
                body,
                max_size=self._max_upload_size,
                expected_size=expected_size,
                checksum=checksum,
            )
        except UploadTooLarge:
            raise _too_large(self._max_upload_size) from None
        except UploadMissing:
            raise _no_such_upload(bucket, key) from None

    async def upload_seal(self, upload: UploadInfo, *, sample: bool = False) -> ObjectSeal:
        """How the parts of `upload` so far are sealed (`sample`: one chunk's)."""
        return await self._multipart.seal_of(upload, sample=sample)

    async def find_upload(self, bucket: str, key: str, upload_id: str) -> UploadInfo | None:
        """The upload, or None (completed, aborted, or never made)."""
        return await self._multipart.get(upload_id, bucket=bucket, key=key)

    async def upload_part_copy(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        source: ObjectInfo,
        start: int,
        end: int,
    ) -> CopiedPart:
        """A part made of bytes [start, end) of an existing object, by reference."""
        _check_part_number(part_number)
        upload = await self.require_upload(bucket, key, upload_id)
        # A copied range has no MD5 of its own without reading it back from
        # Telegram; the ETag names the source and range instead. Clients only
        # echo part ETags back in CompleteMultipartUpload.
        etag = '"' + hashlib.md5(f"{source.etag}:{start}-{end}".encode()).hexdigest() + '"'
        try:
            checksum = await self._multipart.upload_part_copy(
                upload, part_number, source, start, end, etag=etag
            )
        except ObjectNotFound:
            raise SourceChanged() from None
        except UploadMissing:
            raise _no_such_upload(bucket, key) from None
        algorithm = upload.checksum_algorithm if checksum is not None else None
        return CopiedPart(etag, algorithm, checksum)

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, *, after: int, limit: int
    ) -> list[PartInfo]:
        try:
            return await self._multipart.list_parts(
                upload_id, bucket=bucket, key=key, after=after, limit=limit
            )
        except UploadMissing:
            raise _no_such_upload(bucket, key) from None

    async def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str,
        delimiter: str | None,
        key_marker: str | None,
        upload_id_marker: str | None,
        max_uploads: int,
    ) -> UploadListing:
        await self.require_bucket(bucket)
        try:
            return await self._buckets.list_uploads(
                bucket,
                prefix=prefix,
                delimiter=delimiter,
                key_marker=key_marker,
                upload_id_marker=upload_id_marker,
                max_uploads=max_uploads,
            )
        except UnsupportedDelimiter as exc:
            raise S3Error("InvalidArgument", f"Invalid delimiter: {exc}.") from None

    async def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        upload = await self.require_upload(bucket, key, upload_id)
        if not await self._multipart.abort(upload):
            raise _no_such_upload(bucket, key)

    async def complete_upload(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        parts: list[tuple[int, str]],
        conditions: WriteConditions | None = None,
    ) -> ObjectInfo:
        upload = await self._multipart.get(upload_id, bucket=bucket, key=key)
        try:
            if upload is None:
                raise UploadMissing(upload_id)
            check = None
            if conditions is not None:
                # Before waiting for spooled parts to reach Telegram.
                current = await self._store.get(bucket, key)
                conditions.check_now(current.etag if current is not None else None)
                check = conditions.at_commit()
            return await self._multipart.complete(upload, parts, name=object_name(key), check=check)
        except UploadMissing:
            # An SDK retries a Complete whose answer it lost; the first one
            # made the object, so the retry gets the same result. Its
            # conditions still hold it back, judged against that object as a
            # first Complete's would be: If-None-Match: * is 412 now.
            done = await self._multipart.completed_object(bucket, key, parts)
            if done is None:
                raise _no_such_upload(bucket, key) from None
            if conditions is not None:
                conditions.check_now(done.etag)
            return done
        except FlushFailed as exc:
            raise S3Error(
                "ServiceUnavailable", f"The parts cannot be stored in Telegram now: {exc}"
            ) from None
        except InvalidPartOrder:
            raise S3Error("InvalidPartOrder") from None
        except PartTooSmall as exc:
            raise S3Error(
                "EntityTooSmall",
                details={
                    "PartNumber": str(exc.part_number),
                    "ProposedSize": str(exc.size),
                    "MinSizeAllowed": str(exc.minimum),
                },
            ) from None
        except InvalidPart as exc:
            raise S3Error(
                "InvalidPart",
                f"Part {exc.part_number} could not be found, or its ETag does not match.",
            ) from None


def _no_such_upload(bucket: str, key: str) -> S3Error:
    return S3Error("NoSuchUpload", resource=f"/{bucket}/{key}")


def _check_part_number(part_number: int) -> None:
    if not 1 <= part_number <= MAX_PART_NUMBER:
        raise S3Error(
            "InvalidArgument",
            f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive.",
        )


def _too_large(limit: int) -> S3Error:
    return S3Error(
        "EntityTooLarge",
        f"Your proposed upload exceeds the maximum allowed size of {limit} bytes.",
        details={"MaxSizeAllowed": str(limit)},
    )
