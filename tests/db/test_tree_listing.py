"""A folder's children for WebDAV (app.db.tree_listing) and where folders
exist (app.db.folders), on SQLite and Postgres: files and the folders of
both their keys and the folder rows, merged, paged, each once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.folders import FolderReader, FolderRepository
from app.db.listing import CommonPrefix
from app.db.repositories import ObjectRepository
from app.db.session import session_scope
from app.db.single_statements import SingleStatements, single_statements_for
from app.db.tree_listing import TreeFile, TreeListing
from app.db.types import utcnow
from tests.db.helpers import spec

BUCKET = "_native"


@pytest.fixture
async def statements(engine: AsyncEngine) -> AsyncIterator[SingleStatements]:
    statements = single_statements_for(engine)
    try:
        yield statements
    finally:
        await statements.close()


async def _store(sessionmaker: async_sessionmaker[AsyncSession], *keys: str) -> None:
    async with session_scope(sessionmaker) as session:
        for key in keys:
            await ObjectRepository(session).put(spec(key, bucket=BUCKET, inline_data=key.encode()))


async def _keep(sessionmaker: async_sessionmaker[AsyncSession], *folders: str) -> None:
    async with session_scope(sessionmaker) as session:
        for folder in folders:
            await FolderRepository(session).add(BUCKET, folder, utcnow())


def _names(entries: list[TreeFile | CommonPrefix]) -> list[str]:
    return [e.key if isinstance(e, TreeFile) else e.prefix for e in entries]


async def test_children_merge_the_folders_of_files_and_of_rows(
    sessionmaker: async_sessionmaker[AsyncSession], statements: SingleStatements
) -> None:
    await _store(sessionmaker, "named/a.txt", "named/docs/x", "named/docs/y/z", "named/b/c")
    await _keep(sessionmaker, "named/docs/", "named/empty/", "named/empty/deeper/", "named/b/")
    listing = TreeListing(statements)

    root = await listing.children(BUCKET, "named/", after=None, limit=100)
    assert _names(root) == ["named/a.txt", "named/b/", "named/docs/", "named/empty/"]
    (file,) = [entry for entry in root if isinstance(entry, TreeFile)]
    assert file.size == len(b"named/a.txt") and file.etag and file.created_at

    docs = await listing.children(BUCKET, "named/docs/", after=None, limit=100)
    assert _names(docs) == ["named/docs/x", "named/docs/y/"]
    assert _names(await listing.children(BUCKET, "named/empty/", after=None, limit=100)) == [
        "named/empty/deeper/"
    ]


async def test_children_come_a_page_at_a_time_each_once(
    sessionmaker: async_sessionmaker[AsyncSession], statements: SingleStatements
) -> None:
    files = [f"named/f{n:02d}" for n in range(7)] + [f"named/d{n}/x" for n in range(4)]
    await _store(sessionmaker, *files)
    await _keep(sessionmaker, "named/d1/", "named/e0/", "named/e1/")
    listing = TreeListing(statements)
    seen: list[str] = []
    after = None
    while True:
        page = await listing.children(BUCKET, "named/", after=after, limit=3)
        seen += _names(page)
        if len(page) < 3:
            break
        after = seen[-1]
    expected = sorted(
        [f"named/f{n:02d}" for n in range(7)]
        + [f"named/d{n}/" for n in range(4)]
        + ["named/e0/", "named/e1/"]
    )
    assert seen == expected


async def test_a_folder_exists_while_a_file_or_a_row_lies_under_it(
    sessionmaker: async_sessionmaker[AsyncSession], statements: SingleStatements
) -> None:
    await _store(sessionmaker, "named/a/b/c.txt")
    await _keep(sessionmaker, "named/kept/")
    folders = FolderReader(statements)
    assert await folders.find(BUCKET, "named/a/") == (True, None)
    assert (await folders.find(BUCKET, "named/a/b/"))[0]
    found, created = await folders.find(BUCKET, "named/kept/")
    assert found and created is not None
    assert not (await folders.find(BUCKET, "named/a/b/c.txt/"))[0]
    assert not (await folders.find(BUCKET, "named/nothing/"))[0]


async def test_used_bytes_sum_a_folders_files(
    sessionmaker: async_sessionmaker[AsyncSession], statements: SingleStatements
) -> None:
    await _store(sessionmaker, "named/q/one", "named/q/sub/two", "named/other")
    listing = TreeListing(statements)
    assert await listing.used_bytes(BUCKET, "named/q/") == len(b"named/q/one") + len(
        b"named/q/sub/two"
    )
    assert await listing.used_bytes(BUCKET, "named/none/") == 0
