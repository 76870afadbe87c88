"""The bucket store's memory of which buckets exist (per process)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store.buckets import BUCKET_CACHE_SECONDS, BucketStore
from tests.db.helpers import statements

Sessions = async_sessionmaker[AsyncSession]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_an_existing_bucket_is_remembered_and_forgotten_on_delete(
    sessionmaker: Sessions,
) -> None:
    clock = Clock()
    here = BucketStore(sessionmaker, clock=clock)
    elsewhere = BucketStore(sessionmaker)  # another process
    assert await here.create("box")
    assert await here.exists("box")
    with statements() as seen:
        assert await here.exists("box")
    assert seen == []

    # This process deleting it: forgotten at once.
    assert await here.delete("box")
    assert not await here.exists("box")

    # Never remembered as missing: a bucket made elsewhere is usable at once.
    assert await elsewhere.create("box")
    assert await here.exists("box")

    # Deleted elsewhere: noticed once the memory is older than the bound.
    assert await elsewhere.delete("box")
    clock.now += BUCKET_CACHE_SECONDS - 1
    assert await here.exists("box")
    clock.now += 1
    assert not await here.exists("box")

    # Listings on Postgres keep driver connections of their own.
    await here.close()
    await elsewhere.close()
