"""S3 buckets: names only; objects and uploads name their bucket without a foreign key."""

from __future__ import annotations

import builtins

from sqlalchemy import delete, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.key_ranges import key_prefix_bounds
from app.db.locking import dialect_name, lock_database_for_write
from app.db.models import MAX_BUCKET_NAME_LENGTH, Bucket, MultipartUpload, StoredObject
from app.db.types import utcnow


class BucketNotEmpty(Exception):
    """The bucket still holds objects or multipart uploads."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"bucket {name!r} is not empty")


class BucketRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def create(self, name: str) -> bool:
        """Create the bucket; False (no error) if it already exists.

        INSERT ... ON CONFLICT DO NOTHING: two concurrent creates of one name
        both succeed, one of them reporting that it did not create it.
        Checking S3's naming rules is the caller's job (app.http.s3.names).
        """
        if not name or len(name) > MAX_BUCKET_NAME_LENGTH:
            raise ValueError(f"bucket name must be 1 to {MAX_BUCKET_NAME_LENGTH} characters")
        await lock_database_for_write(self._session)
        created = await self._session.scalar(
            upsert_insert(dialect_name(self._session), Bucket)
            .values(name=name, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=[Bucket.name])
            .returning(Bucket.name)
        )
        return created is not None

    async def get(self, name: str) -> Bucket | None:
        return await self._session.scalar(select(Bucket).where(Bucket.name == name))

    async def exists(self, name: str) -> bool:
        found = await self._session.scalar(select(literal(1)).where(Bucket.name == name))
        return found is not None

    async def list(
        self, *, prefix: str = "", after: str | None = None, limit: int | None = None
    ) -> builtins.list[Bucket]:
        """Buckets whose name starts with `prefix`, after `after`, by name in
        byte order; at most `limit` of them (None: all)."""
        query = select(Bucket).where(*key_prefix_bounds(Bucket.name, prefix))
        if after is not None:
            query = query.where(Bucket.name > after)
        query = query.order_by(Bucket.name)
        if limit is not None:
            query = query.limit(limit)
        return builtins.list(await self._session.scalars(query))

    async def delete(self, name: str) -> bool:
        """Delete an empty bucket; False if there is none.

        Raises BucketNotEmpty while any object or multipart upload in
        progress is in it.
        The bucket row is locked for the check, so concurrent deletes queue;
        objects do not reference the row, so a put racing the delete is not
        stopped by it (on Postgres): callers check the bucket exists first.
        """
        await lock_database_for_write(self._session)
        found = await self._session.scalar(
            select(Bucket.name).where(Bucket.name == name).with_for_update()
        )
        if found is None:
            return False
        has_object = select(literal(1)).where(StoredObject.bucket == name).limit(1)
        # A completed upload is no upload of the bucket's: it only holds the
        # bytes of a pending object until their flush, and that object, if
        # still live here, holds the bucket itself. Deleted (in the trash,
        # or gone while a copy still needs its bytes), it must not.
        has_upload = (
            select(literal(1))
            .where(MultipartUpload.bucket == name, MultipartUpload.completed_at.is_(None))
            .limit(1)
        )
        if (
            await self._session.scalar(has_object) is not None
            or await self._session.scalar(has_upload) is not None
        ):
            raise BucketNotEmpty(name)
        await self._session.execute(
            delete(Bucket).where(Bucket.name == name).execution_options(synchronize_session="fetch")
        )
        return True
