"""A file or a folder removed, moved or copied whole in one transaction
(app.db.subtrees), on SQLite and Postgres: metadata only (the chunks stay
where they are, referenced by the copies), the folder rows and dead
properties following, the trash taking what goes."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import trash
from app.db.dav_properties import PropertyRepository
from app.db.folders import FolderRepository
from app.db.models import Chunk, GcEntry, Piece, StoredObject, TrashEntry
from app.db.repositories import ObjectRepository
from app.db.session import session_scope
from app.db.subtrees import ForeignObject, Place, SubtreeRepository
from app.db.types import utcnow
from tests.db.helpers import add_chunks, count, spec, whole_chunks

B = "_native"


async def _tree(sessionmaker: async_sessionmaker[AsyncSession]) -> list[int]:
    """named/src/ with a file in chunks, an inline one, an empty folder and
    properties; returns the chunk ids."""
    chunks = await add_chunks(sessionmaker, [100, 200])
    async with session_scope(sessionmaker) as session:
        objects = ObjectRepository(session)
        await objects.put(
            replace(spec("named/src/big.bin", whole_chunks(chunks), bucket=B), owner_key_id=7)
        )
        await objects.put(spec("named/src/sub/small.txt", bucket=B, inline_data=b"small"))
        await FolderRepository(session).add(B, "named/src/empty/", utcnow())
        properties = PropertyRepository(session)
        await properties.put(B, "named/src/big.bin", "urn:x", "p", "1")
        await properties.put(B, "named/src/", "urn:x", "q", "2")
    return [chunk.id for chunk in chunks]


async def _keys(session: AsyncSession) -> list[str]:
    return sorted(await session.scalars(select(StoredObject.key).where(StoredObject.bucket == B)))


async def test_a_folder_moves_whole_keeping_rows_chunks_and_properties(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    chunk_ids = await _tree(sessionmaker)
    async with session_scope(sessionmaker) as session:
        before = {
            row.key: (row.id, row.public_id)
            for row in await session.scalars(select(StoredObject).where(StoredObject.bucket == B))
        }
        subtree = SubtreeRepository(session)
        await subtree.lock(B, await subtree.keys(Place(B, "named/src/")))
        await subtree.move(Place(B, "named/src/"), Place(B, "named/dst/"), "ignored")
    async with session_scope(sessionmaker) as session:
        assert await _keys(session) == ["named/dst/big.bin", "named/dst/sub/small.txt"]
        after = {
            row.key: (row.id, row.public_id)
            for row in await session.scalars(select(StoredObject).where(StoredObject.bucket == B))
        }
        assert after["named/dst/big.bin"] == before["named/src/big.bin"]
        assert await FolderRepository(session).keys_under(B, "named/") == ["named/dst/empty/"]
        properties = await PropertyRepository(session).of(B, ["named/dst/big.bin", "named/dst/"])
        assert {(p.key, p.name) for p in properties} == {
            ("named/dst/big.bin", "p"),
            ("named/dst/", "q"),
        }
        assert sorted(await session.scalars(select(Piece.chunk_id))) == chunk_ids


async def test_a_folder_copy_points_at_the_same_chunks(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    chunk_ids = await _tree(sessionmaker)
    async with session_scope(sessionmaker) as session:
        subtree = SubtreeRepository(session)
        await subtree.copy(
            Place(B, "named/src/"),
            Place(B, "named/cp/"),
            name="cp",
            owner_key_id=9,
            members=True,
            now=utcnow(),
        )
    async with session_scope(sessionmaker) as session:
        assert await _keys(session) == [
            "named/cp/big.bin",
            "named/cp/sub/small.txt",
            "named/src/big.bin",
            "named/src/sub/small.txt",
        ]
        copy = await ObjectRepository(session).get(B, "named/cp/big.bin")
        original = await ObjectRepository(session).get(B, "named/src/big.bin")
        assert copy is not None and original is not None
        assert copy.public_id != original.public_id and copy.owner_key_id == 9
        assert copy.etag == original.etag
        pieces = sorted(await session.scalars(select(Piece.chunk_id)))
        assert pieces == sorted(chunk_ids * 2), "the copy's pieces are the original's chunks"
        assert await count(session, Chunk) == 2
        folders = await FolderRepository(session).keys_under(B, "named/")
        assert folders == ["named/cp/", "named/cp/empty/", "named/src/empty/"]


async def test_a_shallow_folder_copy_takes_no_member(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await _tree(sessionmaker)
    async with session_scope(sessionmaker) as session:
        await SubtreeRepository(session).copy(
            Place(B, "named/src/"),
            Place(B, "named/shallow/"),
            name="shallow",
            owner_key_id=None,
            members=False,
            now=utcnow(),
        )
    async with session_scope(sessionmaker) as session:
        assert not [key for key in await _keys(session) if key.startswith("named/shallow/")]
        assert "named/shallow/" in await FolderRepository(session).keys_under(B, "named/")


async def test_removing_a_folder_trashes_its_files_when_the_trash_is_on(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    trash.configure(sessionmaker, 3600)
    await _tree(sessionmaker)
    async with session_scope(sessionmaker) as session:
        removed = await SubtreeRepository(session).remove(Place(B, "named/src/"), "deleted")
        assert removed == 2
    async with session_scope(sessionmaker) as session:
        assert await _keys(session) == []
        entries = sorted(await session.scalars(select(TrashEntry.key)))
        assert entries == ["named/src/big.bin", "named/src/sub/small.txt"]
        assert await count(session, GcEntry) == 0, "trashed files keep their chunks"
        assert await FolderRepository(session).keys_under(B, "named/") == []
        assert await PropertyRepository(session).of(B, ["named/src/big.bin", "named/src/"]) == []


async def test_removing_a_folder_releases_its_chunks_when_deletes_are_final(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await _tree(sessionmaker)
    async with session_scope(sessionmaker) as session:
        subtree = SubtreeRepository(session)
        await subtree.remove(Place(B, "named/src/"), "deleted")
        assert subtree.chunks_released == 2
    async with session_scope(sessionmaker) as session:
        assert await _keys(session) == []
        assert await count(session, GcEntry) == 2 and await count(session, Chunk) == 0


async def test_the_owner_check_names_a_file_of_another_key(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await _tree(sessionmaker)
    async with session_scope(sessionmaker) as session:
        subtree = SubtreeRepository(session)
        try:
            await subtree.check_owner(Place(B, "named/src/"), 7)
        except ForeignObject as refused:
            assert refused.key.startswith("named/src/")
        else:
            raise AssertionError("a file of no owner lies under named/src/")
        await subtree.check_owner(Place(B, "named/src/"), None)
