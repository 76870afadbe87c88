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


async def test_the_memory_of_buckets_is_bounded_least_recent_first(
    sessionmaker: Sessions,
) -> None:
    here = BucketStore(sessionmaker, remembered=3)
    for name in ("b1", "b2", "b3", "b4"):
        assert await here.create(name)
        assert await here.exists(name)
    assert await here.exists("b2")  # used again: the most recent now
    assert await here.exists("b5") is False
    assert await here.create("b5")
    assert await here.exists("b5")
    # b1 went when b4 came, b3 when b5 came; b2 was used again and stays.
    with statements() as seen:
        for name in ("b2", "b4", "b5"):
            assert await here.exists(name)
    assert seen == []
    with statements() as seen:
        assert await here.exists("b3")
    assert any("FROM buckets" in statement for statement in seen)  # asked again
    await here.close()
