"""The trash's repository on SQLite and Postgres: deletes and replacements
keep the old row and its chunks, restores refuse a taken key or a deleted
bucket, expiry releases only the chunks no live object uses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import trash
from app.db.models import Chunk, GcEntry
from app.db.objects import ObjectRepository
from app.db.session import session_scope
from app.db.trash import BucketGone, KeyTaken, TrashRepository
from app.db.types import utcnow
from tests.db.helpers import add_chunks, count, spec, whole_chunks

Sessions = async_sessionmaker[AsyncSession]
NATIVE = "_native"


async def test_replaced_and_deleted_versions_wait_in_the_trash_and_come_back(
    sessionmaker: Sessions,
) -> None:
    trash.configure(sessionmaker, 3600)
    old_chunks, new_chunks = (
        await add_chunks(sessionmaker, [100]),
        await add_chunks(sessionmaker, [70]),
    )
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        first = await repo.put(spec("k", whole_chunks(old_chunks), bucket=NATIVE))
        second = await repo.put(
            spec("k", whole_chunks(new_chunks), bucket=NATIVE), keep_public_id=True
        )
    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete(NATIVE, "k")

    async with session_scope(sessionmaker) as session:
        listed = await TrashRepository(session).list()
        assert await ObjectRepository(session).get(NATIVE, "k") is None
        # Nothing was released: both versions keep their chunks.
        assert await count(session, GcEntry) == 0
    deleted, replaced = listed
    assert (deleted.reason, deleted.row.id, deleted.row.public_id) == (
        "deleted",
        second.id,
        first.public_id,
    )
    # The link went on with the new version; the old one has an id of its own.
    assert replaced.reason == "replaced" and replaced.row.id == first.id
    assert replaced.row.public_id != first.public_id
    assert (replaced.bucket, replaced.key) == (NATIVE, "k")
    assert replaced.expires_at - replaced.trashed_at == timedelta(hours=1)

    async with session_scope(sessionmaker) as session:
        back = await TrashRepository(session).restore(replaced.row.public_id)
    assert back is not None and back.size == 100
    with pytest.raises(KeyTaken):
        async with session_scope(sessionmaker) as session:
            await TrashRepository(session).restore(deleted.row.public_id)
    async with session_scope(sessionmaker) as session:
        renamed = await TrashRepository(session).restore(
            deleted.row.public_id, key="k2", name="k2.txt"
        )
    assert renamed is not None and (renamed.key, renamed.name) == ("k2", "k2.txt")
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        assert (await repo.get(NATIVE, "k")).id == first.id  # type: ignore[union-attr]
        assert (await repo.get(NATIVE, "k2")).id == second.id  # type: ignore[union-attr]
        assert await TrashRepository(session).list() == []
        # Restored twice? Nothing left to restore.
        assert await TrashRepository(session).restore(deleted.row.public_id) is None


async def test_an_object_of_a_deleted_bucket_is_not_restored(sessionmaker: Sessions) -> None:
    trash.configure(sessionmaker, 3600)
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        await repo.put(spec("k", inline_data=b"x", bucket="no-such-bucket"))
        await repo.delete("no-such-bucket", "k")
    async with session_scope(sessionmaker) as session:
        [item] = await TrashRepository(session).list()
    with pytest.raises(BucketGone):
        async with session_scope(sessionmaker) as session:
            await TrashRepository(session).restore(item.row.public_id)


async def test_expiry_releases_only_the_chunks_no_live_object_uses(sessionmaker: Sessions) -> None:
    trash.configure(sessionmaker, 60)
    shared, alone = await add_chunks(sessionmaker, [100, 50])
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        await repo.put(spec("a", whole_chunks([shared, alone]), bucket=NATIVE))
        # A metadata-only copy of the first chunk.
        await repo.put(spec("b", whole_chunks([shared]), bucket=NATIVE))
        await repo.delete(NATIVE, "a")

    later = utcnow() + timedelta(minutes=2)
    async with session_scope(sessionmaker) as session:
        # Not yet due.
        assert not await TrashRepository(session).any_expired()
        assert await TrashRepository(session).expire(10) == (0, 0)
    async with session_scope(sessionmaker) as session:
        assert await TrashRepository(session).any_expired(now=later)
    async with session_scope(sessionmaker) as session:
        expired = await TrashRepository(session).expire(10, now=later)

    assert expired == (1, 1)
    async with session_scope(sessionmaker) as session:
        left = set(await session.scalars(select(Chunk.id)))
        ledger = list(await session.scalars(select(GcEntry.message_id)))
        assert await TrashRepository(session).list() == []
        assert await ObjectRepository(session).get(NATIVE, "b") is not None
    assert left == {shared.id}
    assert ledger == [alone.message_id]


async def test_expiry_beside_a_writer_that_commits_as_it_begins(
    sessionmaker: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another upload commits just as the GC's expiry begins. On SQLite the
    expiry read before it took the write lock, and then could not take it
    ("database is locked"): it takes it first now."""
    trash.configure(sessionmaker, 60)
    [chunk] = await add_chunks(sessionmaker, [10])
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("gone", whole_chunks([chunk]), bucket=NATIVE))
        await ObjectRepository(session).delete(NATIVE, "gone")
    take_lock = trash.lock_database_for_write

    async def lock_after_another_commit(session: AsyncSession) -> None:
        async with session_scope(sessionmaker) as other:
            await ObjectRepository(other).put(spec("beside", [], bucket=NATIVE))
        await take_lock(session)

    monkeypatch.setattr(trash, "lock_database_for_write", lock_after_another_commit)
    async with session_scope(sessionmaker) as session:
        expired = await TrashRepository(session).expire(10, now=utcnow() + timedelta(minutes=2))

    assert expired == (1, 1)
