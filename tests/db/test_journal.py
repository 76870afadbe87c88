"""The journal's triggers and repository on SQLite and Postgres: every change
to a table a restore loads leaves a journal row naming it (from any code
path); the current state of the named rows is read as a snapshot encodes
rows; a batch applies to a database in place, ids kept."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import journal, trash
from app.db.api_keys import ApiKeyRepository
from app.db.buckets import BucketRepository
from app.db.copies import CopyRepository
from app.db.models import ChunkCopy, Piece, StoredObject
from app.db.objects import ObjectRepository
from app.db.session import session_scope
from tests.db.helpers import add_chunks, spec, whole_chunks

Sessions = async_sessionmaker[AsyncSession]


async def journaled(sessionmaker: Sessions) -> set[tuple[str, tuple[object, ...]]]:
    """(table, key) of every pending journal row, then none pending."""
    async with session_scope(sessionmaker) as session:
        pending = await journal.pending(session, 10_000)
        await journal.forget(session, pending.ids)
    return {(table, key) for table, keys in pending.keys.items() for key in keys}


async def test_every_insert_update_and_delete_leaves_a_row_naming_the_changed_row(
    sessionmaker: Sessions,
) -> None:
    trash.configure(sessionmaker, 3600)
    assert await journaled(sessionmaker) == set()
    async with session_scope(sessionmaker) as session:
        await BucketRepository(session).create("box")
        key, _secret = await ApiKeyRepository(session).create("ops", scope="admin")
    [chunk] = await add_chunks(sessionmaker, [100])
    copies = await journaled(sessionmaker)
    assert ("buckets", ("box",)) in copies and ("api_keys", (key.id,)) in copies
    assert ("chunks", (chunk.id,)) in copies
    assert {table for table, _key in copies} == {"buckets", "api_keys", "chunks", "chunk_copies"}

    async with session_scope(sessionmaker) as session:
        first = await ObjectRepository(session).put(spec("k", whole_chunks([chunk]), bucket="box"))
    created = await journaled(sessionmaker)
    assert ("objects", (first.id,)) in created and ("pieces", (first.id, 0)) in created

    async with session_scope(sessionmaker) as session:
        await session.execute(
            update(StoredObject).where(StoredObject.id == first.id).values(name="renamed")
        )
    assert await journaled(sessionmaker) == {("objects", (first.id,))}

    # A replacement moves the old version to the trash: a new object, a trash row.
    async with session_scope(sessionmaker) as session:
        second = await ObjectRepository(session).put(
            spec("k", inline_data=b"new", bucket="box"), keep_public_id=True
        )
    replaced = await journaled(sessionmaker)
    assert ("objects", (second.id,)) in replaced
    assert "trash" in {table for table, _key in replaced}

    async with session_scope(sessionmaker) as session:
        await session.execute(
            StoredObject.__table__.delete().where(StoredObject.id == first.id)  # type: ignore[attr-defined]
        )
    deleted = await journaled(sessionmaker)
    # Rows the database deletes by cascade are journaled too.
    assert ("objects", (first.id,)) in deleted and ("pieces", (first.id, 0)) in deleted


async def test_the_current_state_names_rows_as_they_are_or_as_deleted(
    sessionmaker: Sessions,
) -> None:
    [chunk] = await add_chunks(sessionmaker, [100])
    async with session_scope(sessionmaker) as session:
        kept = await ObjectRepository(session).put(spec("kept", whole_chunks([chunk])))
        gone = await ObjectRepository(session).put(spec("gone", inline_data=b"x"))
    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("bucket", "gone")
    named: dict[str, set[tuple[object, ...]]] = {
        "objects": {(kept.id,), (gone.id,)},
        "pieces": {(kept.id, 0)},
    }

    changes = {c.table: c for c in await journal.current_state(sessionmaker, named)}

    assert [row["key"] for row in changes["objects"].rows] == ["kept"]
    assert changes["objects"].deleted == [(gone.id,)]
    assert changes["pieces"].rows[0]["chunk_id"] == chunk.id
    # Encoded as a snapshot encodes rows: times as ISO text.
    assert isinstance(changes["objects"].rows[0]["created_at"], str)


async def test_an_applied_batch_updates_rows_in_place_and_keeps_their_children(
    sessionmaker: Sessions,
) -> None:
    """An upsert of an object must not delete and insert it: ON DELETE
    CASCADE would take its pieces, which the batch does not hold."""
    [chunk] = await add_chunks(sessionmaker, [100])
    async with session_scope(sessionmaker) as session:
        stored = await ObjectRepository(session).put(spec("k", whole_chunks([chunk])))
        other = await ObjectRepository(session).put(spec("other", inline_data=b"o"))
    before = await journal.current_state(sessionmaker, {"objects": {(stored.id,)}})
    async with session_scope(sessionmaker) as session:
        await session.execute(
            update(StoredObject).where(StoredObject.id == stored.id).values(name="changed")
        )
    [state] = before
    batch = [journal.TableChanges("objects", state.rows, [(other.id,)])]
    # A new object, as a later batch brings it, with its id.
    new_rows = await journal.current_state(sessionmaker, {"objects": {(other.id,)}})
    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("bucket", "other")

    async with session_scope(sessionmaker) as session:
        assert await journal.apply(session, batch) == (1, 1)
        assert await journal.apply(session, new_rows) == (1, 0)

    async with session_scope(sessionmaker) as session:
        names = dict((await session.execute(select(StoredObject.id, StoredObject.name))).all())
        pieces = (await session.scalars(select(Piece.chunk_id))).all()
    assert names == {stored.id: "k", other.id: "other"}
    assert list(pieces) == [chunk.id]


async def test_bookkeeping_updates_are_not_journaled_but_a_changed_state_is(
    sessionmaker: Sessions,
) -> None:
    """The scrub checks copies around the clock and keys record their use:
    a journal row for each would ship a batch every round on an idle service."""
    [chunk] = await add_chunks(sessionmaker, [100])
    async with session_scope(sessionmaker) as session:
        _key, secret = await ApiKeyRepository(session).create("ops", scope="admin")
        copy_id = await session.scalar(select(ChunkCopy.id).where(ChunkCopy.chunk_id == chunk.id))
        assert copy_id is not None
    await journaled(sessionmaker)

    async with session_scope(sessionmaker) as session:
        assert await ApiKeyRepository(session).verify(secret) is not None  # records its use
        await CopyRepository(session).mark_checked(copy_id, verified=True)
    assert await journaled(sessionmaker) == set()

    async with session_scope(sessionmaker) as session:
        assert await CopyRepository(session).mark_bad(copy_id, "missing")
    assert ("chunk_copies", (copy_id,)) in await journaled(sessionmaker)
    async with session_scope(sessionmaker) as session:
        await CopyRepository(session).mark_checked(copy_id)  # present again: "ok"
    assert ("chunk_copies", (copy_id,)) in await journaled(sessionmaker)


@pytest.mark.postgres_only
async def test_a_change_that_commits_after_a_later_numbered_one_is_still_shipped(
    sessionmaker: Sessions,
) -> None:
    """Postgres numbers journal rows when they are written, not when they
    commit: shipping by id (not above a high-water mark) keeps the late one."""
    await journaled(sessionmaker)
    async with sessionmaker() as slow:
        await BucketRepository(slow).create("slow")  # takes the lower id, commits last
        async with session_scope(sessionmaker) as quick:
            await BucketRepository(quick).create("quick")
        assert await journaled(sessionmaker) == {("buckets", ("quick",))}
        await slow.commit()

    assert await journaled(sessionmaker) == {("buckets", ("slow",))}


async def test_a_batch_that_hands_a_key_from_one_row_to_another_applies(
    sessionmaker: Sessions,
) -> None:
    """docs/trash.md's flow, delete the live version and restore the old one,
    in one batch: the old row takes the key the live row gives up. Applied
    row by row in key order, the first update hit UNIQUE(bucket, key) and the
    whole restore rolled back."""
    trash.configure(sessionmaker, 3600)
    async with session_scope(sessionmaker) as session:
        await BucketRepository(session).create("bucket")
        await ObjectRepository(session).put(spec("k", inline_data=b"old"))
    async with session_scope(sessionmaker) as session:
        live = await ObjectRepository(session).put(spec("k", inline_data=b"new"))
    async with session_scope(sessionmaker) as session:
        [old] = await trash.TrashRepository(session).list()
    await journaled(sessionmaker)
    named = {"objects": {(live.id,), (old.row.id,)}}
    before = await journal.current_state(sessionmaker, named)

    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("bucket", "k")
    async with session_scope(sessionmaker) as session:
        assert await trash.TrashRepository(session).restore(old.row.public_id) is not None
    after = await journal.current_state(sessionmaker, named)

    async def holder_of_k() -> bytes | None:
        async with session_scope(sessionmaker) as session:
            return await session.scalar(
                select(StoredObject.inline_data).where(
                    StoredObject.bucket == "bucket", StoredObject.key == "k"
                )
            )

    assert await holder_of_k() == b"old"
    # Back to the state before (the key moves from the old row to the live
    # one), then forward again as a restore applies the batch.
    async with session_scope(sessionmaker) as session:
        assert await journal.apply(session, before) == (2, 0)
    assert await holder_of_k() == b"new"
    async with session_scope(sessionmaker) as session:
        assert await journal.apply(session, after) == (2, 0)
    assert await holder_of_k() == b"old"
