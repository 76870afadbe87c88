"""Buckets (S3's namespaces for keys) and what is in them. The native API's
bucket has no row.

Whether a bucket exists is asked on every S3 request, so the answer "it
exists" is remembered, per process: this process forgets it when it deletes
the bucket, and another process's delete is noticed within
BUCKET_CACHE_SECONDS. "It does not exist" is never remembered, so a bucket
created anywhere is usable at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.buckets import BucketNotEmpty, BucketRepository
from app.db.session import session_scope
from app.db.single_statements import AsyncStatements, SingleStatements
from app.store import listing
from app.store.listing import Listing, UploadListing

__all__ = [
    "BUCKETS_REMEMBERED",
    "BUCKET_CACHE_SECONDS",
    "BucketInfo",
    "BucketNotEmpty",
    "BucketStore",
]

# How long a process trusts that a bucket it saw still exists; bounds how
# long another process's DeleteBucket can go unnoticed here.
BUCKET_CACHE_SECONDS = 10.0
# Buckets remembered at most, the least recently seen forgotten first: one
# process may serve any number of buckets (issue 55: every cache is bounded).
BUCKETS_REMEMBERED = 1000


@dataclass(frozen=True, slots=True)
class BucketInfo:
    name: str
    created_at: datetime


class BucketStore:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        clock: Callable[[], float] = time.monotonic,
        remembered: int = BUCKETS_REMEMBERED,
        statements: SingleStatements | None = None,
    ) -> None:
        self._sessionmaker = sessionmaker
        # Listings run on these: the object store's, which it closes, or
        # (tests, tools) Core statements on the sessions' engine, closed by `close`.
        self._owned: AsyncStatements | None = None
        if statements is None:
            engine = sessionmaker.kw["bind"]
            statements = self._owned = AsyncStatements(engine, engine)
        self._statements: SingleStatements = statements
        self._clock = clock
        # Bucket name -> when this process last saw it exist, least recent
        # first; at most `remembered` of them.
        self._seen: dict[str, float] = {}
        self._remembered = remembered

    async def close(self) -> None:
        if self._owned is not None:
            await self._owned.close()

    async def list(
        self, *, prefix: str = "", after: str | None = None, limit: int | None = None
    ) -> list[BucketInfo]:
        async with session_scope(self._sessionmaker) as session:
            rows = await BucketRepository(session).list(prefix=prefix, after=after, limit=limit)
            return [BucketInfo(row.name, row.created_at) for row in rows]

    async def create(self, name: str) -> bool:
        """True if created, False if it existed."""
        async with session_scope(self._sessionmaker) as session:
            return await BucketRepository(session).create(name)

    async def exists(self, name: str) -> bool:
        seen = self._seen.get(name)
        if seen is not None and self._clock() - seen < BUCKET_CACHE_SECONDS:
            self._seen[name] = self._seen.pop(name)  # the most recently used now
            return True
        async with session_scope(self._sessionmaker) as session:
            found = await BucketRepository(session).exists(name)
        if found:
            self._seen.pop(name, None)  # to the end: the most recent
            self._seen[name] = self._clock()
            while len(self._seen) > self._remembered:
                del self._seen[next(iter(self._seen))]
        else:
            self._seen.pop(name, None)
        return found

    async def delete(self, name: str) -> bool:
        """False if there was no such bucket; raises BucketNotEmpty."""
        # Forgotten before and after: a request that looked it up while the
        # delete ran must not put it back.
        self._seen.pop(name, None)
        try:
            async with session_scope(self._sessionmaker) as session:
                return await BucketRepository(session).delete(name)
        finally:
            self._seen.pop(name, None)

    async def list_objects(
        self,
        bucket: str,
        *,
        prefix: str,
        delimiter: str | None,
        after: str | None,
        max_keys: int,
    ) -> Listing:
        """A page of ListObjects; raises UnsupportedDelimiter."""
        return await listing.list_objects(
            self._statements,
            bucket,
            prefix=prefix,
            delimiter=delimiter,
            after=after,
            max_keys=max_keys,
        )

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
        """A page of ListMultipartUploads; raises UnsupportedDelimiter."""
        return await listing.list_uploads(
            self._statements,
            bucket,
            prefix=prefix,
            delimiter=delimiter,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            max_uploads=max_uploads,
        )
