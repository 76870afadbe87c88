from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import Bucket
from app.db.repositories import (
    BucketNotEmpty,
    BucketRepository,
    MultipartRepository,
    ObjectRepository,
)
from app.db.session import session_scope
from tests.db.helpers import count, spec

Sessions = async_sessionmaker[AsyncSession]


async def test_create_get_exists_and_create_again(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        assert await BucketRepository(session).create("photos") is True
    async with session_scope(sessionmaker) as session:
        repo = BucketRepository(session)
        assert await repo.create("photos") is False  # no error
        assert await repo.exists("photos")
        assert not await repo.exists("other")
        bucket = await repo.get("photos")
        assert await repo.get("other") is None
    assert bucket is not None and bucket.name == "photos"
    assert bucket.created_at.tzinfo is not None
    async with session_scope(sessionmaker) as session:
        assert await count(session, Bucket) == 1


async def test_list_is_in_byte_order(sessionmaker: Sessions) -> None:
    # A linguistic collation (the Postgres test database's ICU en-US) would
    # ignore the punctuation and put "ab" between "a-b" and "a.b".
    names = ["a-b", "a.b", "a0", "ab", "b", "b-1"]
    assert sorted(names, key=str.encode) == names
    async with session_scope(sessionmaker) as session:
        repo = BucketRepository(session)
        for name in reversed(names):
            assert await repo.create(name)
    async with session_scope(sessionmaker) as session:
        assert [b.name for b in await BucketRepository(session).list()] == names


async def test_delete_and_delete_of_a_missing_bucket(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        await BucketRepository(session).create("gone")
    async with session_scope(sessionmaker) as session:
        repo = BucketRepository(session)
        assert await repo.delete("gone") is True
        assert await repo.delete("gone") is False
        assert await repo.delete("never") is False
    async with session_scope(sessionmaker) as session:
        assert not await BucketRepository(session).exists("gone")
        assert await BucketRepository(session).list() == []


async def test_a_bucket_with_an_object_is_not_deleted(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        await BucketRepository(session).create("full")
        await BucketRepository(session).create("full2")
        await ObjectRepository(session).put(spec("k", inline_data=b"x", bucket="full"))
        # Only "full" itself counts, not a bucket whose name extends it.
        await ObjectRepository(session).put(spec("k", inline_data=b"x", bucket="full2"))

    with pytest.raises(BucketNotEmpty) as raised:
        async with session_scope(sessionmaker) as session:
            await BucketRepository(session).delete("full")
    assert raised.value.name == "full"
    async with session_scope(sessionmaker) as session:
        assert await BucketRepository(session).exists("full")
        assert await ObjectRepository(session).delete("full", "k")
    async with session_scope(sessionmaker) as session:
        assert await BucketRepository(session).delete("full")


async def test_a_bucket_with_a_multipart_upload_is_not_deleted(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        await BucketRepository(session).create("b")
        upload = await MultipartRepository(session).create(
            bucket="b", key="big", content_type="application/octet-stream", user_metadata={}
        )

    with pytest.raises(BucketNotEmpty):
        async with session_scope(sessionmaker) as session:
            await BucketRepository(session).delete("b")
    async with session_scope(sessionmaker) as session:
        assert await MultipartRepository(session).abort(upload.id)
    async with session_scope(sessionmaker) as session:
        assert await BucketRepository(session).delete("b")


async def test_concurrent_creates_of_one_name_all_succeed_and_one_creates(
    sessionmaker: Sessions,
) -> None:
    go = asyncio.Event()

    async def create() -> bool:
        await go.wait()
        async with session_scope(sessionmaker) as session:
            return await BucketRepository(session).create("same")

    tasks = [asyncio.create_task(create()) for _ in range(8)]
    go.set()
    assert sorted(await asyncio.gather(*tasks)) == [False] * 7 + [True]
    async with session_scope(sessionmaker) as session:
        assert [b.name for b in await BucketRepository(session).list()] == ["same"]


@pytest.mark.parametrize("name", ["", "x" * 64])
async def test_create_refuses_names_the_column_cannot_hold(
    session: AsyncSession, name: str
) -> None:
    with pytest.raises(ValueError):
        await BucketRepository(session).create(name)
