"""S3 operations on top of the object store: buckets, objects, copies,
listings and multipart uploads.

Everything that moves content goes through the object store (chunks in
Telegram, or inline when small). Copies — CopyObject and UploadPartCopy — are
metadata only: the new object or part points at the same chunks, so moving a
multi-GB blob (the Docker registry does that on every push) costs no upload.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.buckets import BucketNotEmpty, BucketRepository
from app.db.models import Bucket, MultipartUpload, UploadPart
from app.db.multipart import (
    InvalidPart,
    InvalidPartOrder,
    MultipartRepository,
    UploadMissing,
)
from app.db.objects import ObjectRepository, prefix_upper_bound
from app.db.session import session_scope
from app.s3.errors import S3Error
from app.store.errors import UploadTooLarge
from app.store.service import ObjectInfo, ObjectStore

DEFAULT_CONTENT_TYPE = "binary/octet-stream"
MAX_PART_NUMBER = 10_000


@dataclass
class Listing:
    objects: list[ObjectInfo] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    # The last key or common prefix returned: where the next page starts.
    last: str | None = None


def object_name(key: str) -> str:
    return key.rstrip("/").rsplit("/", 1)[-1] or key


class S3Service:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        store: ObjectStore,
        *,
        max_upload_size: int,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._store = store
        self._max_upload_size = max_upload_size

    # --- buckets ------------------------------------------------------------------

    async def list_buckets(self) -> list[Bucket]:
        async with session_scope(self._sessionmaker) as session:
            return await BucketRepository(session).list()

    async def create_bucket(self, name: str) -> bool:
        async with session_scope(self._sessionmaker) as session:
            return await BucketRepository(session).create(name)

    async def require_bucket(self, name: str) -> None:
        async with session_scope(self._sessionmaker) as session:
            if not await BucketRepository(session).exists(name):
                raise S3Error("NoSuchBucket", resource=f"/{name}")

    async def delete_bucket(self, name: str) -> None:
        try:
            async with session_scope(self._sessionmaker) as session:
                deleted = await BucketRepository(session).delete(name)
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
    ) -> ObjectInfo:
        await self.require_bucket(bucket)
        try:
            return await self._store.put_stream(
                body,
                bucket=bucket,
                key=key,
                name=object_name(key),
                content_type=content_type or DEFAULT_CONTENT_TYPE,
                metadata=metadata,
                max_size=self._max_upload_size,
                expected_size=expected_size,
            )
        except UploadTooLarge:
            raise _too_large(self._max_upload_size) from None

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
        )
        if copied is None:
            raise S3Error("NoSuchKey", "The source object changed while being copied.")
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
        """Keys after `after`, rolled up into common prefixes at `delimiter`.

        Range scans only: when a key rolls up into a common prefix, the next
        scan starts past every key under that prefix.
        """
        await self.require_bucket(bucket)
        listing = Listing()
        after_key, from_key = after, None
        while max_keys > 0:
            wanted = max_keys - _count(listing) + 1
            batch = await self._store.list(
                bucket, prefix=prefix, after_key=after_key, from_key=from_key, limit=wanted
            )
            jumped = False
            for info in batch:
                rest = info.key[len(prefix) :]
                cut = rest.find(delimiter) if delimiter else -1
                if delimiter and cut >= 0:
                    common = prefix + rest[: cut + len(delimiter)]
                    # A marker that is itself a common prefix was listed already.
                    if after is None or common > after:
                        if _count(listing) == max_keys:
                            listing.truncated = True
                            return listing
                        listing.prefixes.append(common)
                        listing.last = common
                    upper = prefix_upper_bound(common)
                    if upper is None:
                        return listing
                    # Past every key under this prefix (all of them are > after).
                    after_key, from_key = None, upper
                    jumped = True
                    break
                if _count(listing) == max_keys:
                    listing.truncated = True
                    return listing
                listing.objects.append(info)
                listing.last = info.key
                after_key, from_key = info.key, None
            if not jumped and len(batch) < wanted:
                break
        return listing

    # --- multipart ----------------------------------------------------------------

    async def create_upload(
        self, bucket: str, key: str, *, content_type: str | None, metadata: Mapping[str, Any]
    ) -> MultipartUpload:
        await self.require_bucket(bucket)
        async with session_scope(self._sessionmaker) as session:
            return await MultipartRepository(session).create(
                bucket=bucket,
                key=key,
                content_type=content_type or DEFAULT_CONTENT_TYPE,
                user_metadata=dict(metadata),
            )

    async def require_upload(self, bucket: str, key: str, upload_id: str) -> MultipartUpload:
        async with session_scope(self._sessionmaker) as session:
            upload = await MultipartRepository(session).get(upload_id, bucket=bucket, key=key)
        if upload is None:
            raise S3Error("NoSuchUpload", resource=f"/{bucket}/{key}")
        return upload

    async def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        body: AsyncIterator[bytes],
        expected_size: int | None = None,
    ) -> str:
        """Store one part; returns its ETag (quoted MD5)."""
        _check_part_number(part_number)
        await self.require_upload(bucket, key, upload_id)
        try:
            content = await self._store.write_content(
                body,
                max_size=self._max_upload_size,
                label=f"{key} part {part_number}",
                allow_inline=False,
                expected_size=expected_size,
            )
        except UploadTooLarge:
            raise _too_large(self._max_upload_size) from None
        etag = f'"{content.md5_hex}"'
        try:
            async with session_scope(self._sessionmaker) as session:
                await MultipartRepository(session).put_part(
                    upload_id,
                    part_number,
                    size=content.size,
                    etag=etag,
                    pieces=content.piece_specs(),
                )
        except BaseException as exc:
            await self._store.discard(content)
            if isinstance(exc, UploadMissing):
                raise S3Error("NoSuchUpload", resource=f"/{bucket}/{key}") from None
            raise
        return etag

    async def upload_part_copy(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        source: ObjectInfo,
        start: int,
        end: int,
    ) -> str:
        """A part made of bytes [start, end) of an existing object, by reference."""
        _check_part_number(part_number)
        await self.require_upload(bucket, key, upload_id)
        # A copied range has no MD5 of its own without reading it back from
        # Telegram; the ETag names the source and range instead. Clients only
        # echo part ETags back in CompleteMultipartUpload.
        etag = '"' + hashlib.md5(f"{source.etag}:{start}-{end}".encode()).hexdigest() + '"'
        if source.inline_data is not None:
            # Small objects live in the database; a part must be in chunks.
            content = await self._store.write_content(
                _single(source.inline_data[start:end]), allow_inline=False
            )
            try:
                async with session_scope(self._sessionmaker) as session:
                    await MultipartRepository(session).put_part(
                        upload_id,
                        part_number,
                        size=end - start,
                        etag=etag,
                        pieces=content.piece_specs(),
                    )
            except BaseException:
                await self._store.discard(content)
                raise
            return etag
        try:
            async with session_scope(self._sessionmaker) as session:
                pieces = await ObjectRepository(session).piece_specs(source.id, start, end)
                if pieces is None:
                    raise S3Error("NoSuchKey", "The source object changed while being copied.")
                await MultipartRepository(session).put_part(
                    upload_id, part_number, size=end - start, etag=etag, pieces=pieces
                )
        except UploadMissing:
            raise S3Error("NoSuchUpload", resource=f"/{bucket}/{key}") from None
        return etag

    async def list_parts(
        self, bucket: str, key: str, upload_id: str, *, after: int, limit: int
    ) -> list[UploadPart]:
        try:
            async with session_scope(self._sessionmaker) as session:
                return await MultipartRepository(session).list_parts(
                    upload_id, bucket=bucket, key=key, after=after, limit=limit
                )
        except UploadMissing:
            raise S3Error("NoSuchUpload", resource=f"/{bucket}/{key}") from None

    async def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str,
        key_marker: str | None,
        upload_id_marker: str | None,
        limit: int,
    ) -> list[MultipartUpload]:
        await self.require_bucket(bucket)
        async with session_scope(self._sessionmaker) as session:
            return await MultipartRepository(session).list_uploads(
                bucket,
                prefix=prefix,
                key_marker=key_marker,
                upload_id_marker=upload_id_marker,
                limit=limit,
            )

    async def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self.require_upload(bucket, key, upload_id)
        async with session_scope(self._sessionmaker) as session:
            await MultipartRepository(session).abort(upload_id)
        self._store.wake_gc()

    async def complete_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> ObjectInfo:
        await self.require_upload(bucket, key, upload_id)
        try:
            async with session_scope(self._sessionmaker) as session:
                row = await MultipartRepository(session).complete(
                    upload_id, parts, name=object_name(key)
                )
                info = ObjectInfo.from_row(row, with_content=False)
        except UploadMissing:
            raise S3Error("NoSuchUpload", resource=f"/{bucket}/{key}") from None
        except InvalidPartOrder:
            raise S3Error("InvalidPartOrder") from None
        except InvalidPart as exc:
            raise S3Error(
                "InvalidPart",
                f"Part {exc.part_number} could not be found, or its ETag does not match.",
            ) from None
        self._store.wake_gc()
        return info


def _count(listing: Listing) -> int:
    return len(listing.objects) + len(listing.prefixes)


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


async def _single(data: bytes) -> AsyncIterator[bytes]:
    yield data
