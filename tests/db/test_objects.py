from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.models import Chunk, GcEntry, StoredObject
from app.db.object_rows import new_public_id
from app.db.repositories import (
    ChunkRepository,
    ChunksMissing,
    NotOwner,
    ObjectRepository,
    PieceSpec,
    prefix_upper_bound,
)
from app.db.session import session_scope
from tests.db.helpers import add_chunks, count, spec, statements, whole_chunks

Sessions = async_sessionmaker[AsyncSession]


async def test_put_then_get_by_key_and_public_id(sessionmaker: Sessions) -> None:
    chunks = await add_chunks(sessionmaker, [100, 50])
    async with session_scope(sessionmaker) as session:
        created = await ObjectRepository(session).put(spec("a/b.txt", whole_chunks(chunks)))

    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        by_key = await repo.get("bucket", "a/b.txt")
        by_public_id = await repo.get_by_public_id(created.public_id)
        live = (await session.scalars(select(Chunk.state))).all()
    assert by_key is not None and by_public_id is not None
    assert by_key.id == by_public_id.id == created.id
    assert by_key.size == 150
    assert by_key.user_metadata == {"origin": "test"}
    assert len(by_key.public_id) >= 20
    assert by_key.created_at.tzinfo is not None
    assert live == ["live", "live"]


async def test_get_of_a_missing_key_is_none(session: AsyncSession) -> None:
    repo = ObjectRepository(session)
    assert await repo.get("bucket", "nope") is None
    assert await repo.get_by_public_id("nope") is None


async def test_inline_object_keeps_its_bytes_and_has_no_pieces(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        created = await ObjectRepository(session).put(spec("small", inline_data=b"hello"))
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        loaded = await repo.get("bucket", "small")
        assert loaded is not None and loaded.inline_data == b"hello"
        assert await repo.pieces(created.id, 0, 5) == []


async def test_replacing_a_key_keeps_public_id_on_request_and_releases_old_chunks(
    sessionmaker: Sessions,
) -> None:
    old_chunks = await add_chunks(sessionmaker, [10, 20])
    new_chunks = await add_chunks(sessionmaker, [30])
    async with session_scope(sessionmaker) as session:
        first = await ObjectRepository(session).put(spec("k", whole_chunks(old_chunks)))
    async with session_scope(sessionmaker) as session:
        second = await ObjectRepository(session).put(
            spec("k", whole_chunks(new_chunks)), keep_public_id=True
        )

    assert second.public_id == first.public_id
    assert second.id != first.id  # a new version is a new row
    assert second.created_at == first.created_at
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        current = await repo.get("bucket", "k")
        assert current is not None and current.size == 30
        pieces = await repo.pieces(current.id, 0, 30)
        assert [chunk.id for _, chunk in pieces] == [new_chunks[0].id]
        assert await repo.pieces(first.id, 0, 30) == []  # the old version is gone whole
        remaining = set(await session.scalars(select(Chunk.id)))
        ledger = (await session.scalars(select(GcEntry).order_by(GcEntry.message_id))).all()
    assert remaining == {new_chunks[0].id}
    assert [(e.message_id, e.reason) for e in ledger] == [
        (c.message_id, "overwritten") for c in old_chunks
    ]
    assert all(e.bot_id == old_chunks[0].bot_id and e.attempts == 0 for e in ledger)


async def test_replacing_without_keep_gives_a_new_public_id(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        first = await ObjectRepository(session).put(spec("k", inline_data=b"1"))
    async with session_scope(sessionmaker) as session:
        second = await ObjectRepository(session).put(spec("k", inline_data=b"2"))
    assert second.public_id != first.public_id
    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).get_by_public_id(first.public_id) is None


async def test_shared_chunk_is_released_only_with_its_last_reference(
    sessionmaker: Sessions,
) -> None:
    shared, own = await add_chunks(sessionmaker, [100, 40])
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        await repo.put(spec("original", whole_chunks([shared, own])))
        # A metadata-only copy of bytes 10..60 of the shared chunk.
        await repo.put(spec("copy", [PieceSpec(chunk_id=shared.id, offset=10, length=50)]))

    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("bucket", "original")
    async with session_scope(sessionmaker) as session:
        assert set(await session.scalars(select(Chunk.id))) == {shared.id}
        assert [e.message_id for e in await session.scalars(select(GcEntry))] == [own.message_id]

    async with session_scope(sessionmaker) as session:
        assert await ObjectRepository(session).delete("bucket", "copy")
    async with session_scope(sessionmaker) as session:
        assert await count(session, Chunk) == 0
        reasons = {e.message_id: e.reason for e in await session.scalars(select(GcEntry))}
    assert reasons == {own.message_id: "deleted", shared.message_id: "deleted"}


async def test_chunk_shared_by_old_and_new_version_survives_the_replace(
    sessionmaker: Sessions,
) -> None:
    kept, dropped = await add_chunks(sessionmaker, [10, 10])
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("k", whole_chunks([kept, dropped])))
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("k", whole_chunks([kept])))
    async with session_scope(sessionmaker) as session:
        assert set(await session.scalars(select(Chunk.id))) == {kept.id}
        assert [e.message_id for e in await session.scalars(select(GcEntry))] == [
            dropped.message_id
        ]


async def test_delete_by_public_id_and_of_missing_objects(sessionmaker: Sessions) -> None:
    chunks = await add_chunks(sessionmaker, [5])
    async with session_scope(sessionmaker) as session:
        created = await ObjectRepository(session).put(spec("k", whole_chunks(chunks)))
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        # Another bucket's caller cannot reach it by its public id.
        assert not await repo.delete_by_public_id(created.public_id, bucket="_native")
        assert await repo.delete_by_public_id(created.public_id, bucket="bucket")
        assert not await repo.delete_by_public_id(created.public_id, bucket="bucket")
        assert not await repo.delete("bucket", "k")
    async with session_scope(sessionmaker) as session:
        assert await count(session, StoredObject) == 0
        assert [e.reason for e in await session.scalars(select(GcEntry))] == ["deleted"]


async def test_put_referencing_a_released_chunk_changes_nothing(sessionmaker: Sessions) -> None:
    (gone,) = await add_chunks(sessionmaker, [10])
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("k", inline_data=b"old"))
    async with session_scope(sessionmaker) as session:
        await ChunkRepository(session).release([gone.id], "aborted")

    with pytest.raises(ChunksMissing) as raised:
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("k", whole_chunks([gone])))
    assert raised.value.chunk_ids == [gone.id]
    async with session_scope(sessionmaker) as session:
        current = await ObjectRepository(session).get("bucket", "k")
    assert current is not None and current.inline_data == b"old"


@pytest.mark.parametrize(
    "bad",
    [
        {"size": 99},  # pieces add up to 100
        {"inline_data": b"x"},  # both inline and pieces
        {"pieces": (PieceSpec(chunk_id=1, offset=0, length=0),), "size": 0},
        {"key": ""},
        {"key": "k" * 1025},
    ],
)
async def test_put_refuses_inconsistent_specs(
    session: AsyncSession, bad: dict[str, object]
) -> None:
    import dataclasses

    good = spec("k", [PieceSpec(chunk_id=1, offset=0, length=100)])
    with pytest.raises(ValueError):
        await ObjectRepository(session).put(dataclasses.replace(good, **bad))  # type: ignore[arg-type]


async def test_pieces_returns_exactly_the_pieces_overlapping_the_range(
    sessionmaker: Sessions,
) -> None:
    # Object bytes: [0,10) [10,30) [30,35) [35,60), the second a slice of a chunk.
    chunks = await add_chunks(sessionmaker, [10, 100, 5, 25])
    pieces = [
        PieceSpec(chunk_id=chunks[0].id, offset=0, length=10),
        PieceSpec(chunk_id=chunks[1].id, offset=40, length=20),
        PieceSpec(chunk_id=chunks[2].id, offset=0, length=5),
        PieceSpec(chunk_id=chunks[3].id, offset=0, length=25),
    ]
    async with session_scope(sessionmaker) as session:
        obj = await ObjectRepository(session).put(spec("k", pieces))

    cases = {
        (0, 60): [0, 1, 2, 3],
        (0, 1): [0],
        (9, 10): [0],
        (10, 11): [1],
        (9, 11): [0, 1],
        (29, 31): [1, 2],
        (30, 35): [2],
        (34, 36): [2, 3],
        (59, 60): [3],
        (59, 1000): [3],
        (60, 70): [],
        (5, 5): [],
        (20, 10): [],
    }
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        for (start, end), expected in cases.items():
            found = await repo.pieces(obj.id, start, end)
            assert [piece.seq for piece, _ in found] == expected, (start, end)
            for piece, chunk in found:
                assert chunk.id == piece.chunk_id
        everything = await repo.pieces(obj.id, 0, 60)
    assert [(p.start, p.offset, p.length) for p, _ in everything] == [
        (0, 0, 10),
        (10, 40, 20),
        (30, 0, 5),
        (35, 0, 25),
    ]


# In byte (code point) order, the order S3 lists in. A linguistic collation
# (the Postgres test database uses ICU en-US) would put "B" after "a" and
# "a-c" after "a/2/x".
KEYS = ["B", "a", "a-c", "a/1", "a/2", "a/2/x", "a0", "ab", "a\u00e9", "b", "b/1"]


async def _put_keys(sessionmaker: Sessions, keys: list[str], bucket: str = "bucket") -> None:
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        for key in keys:
            await repo.put(spec(key, inline_data=key.encode(), bucket=bucket))


async def test_list_pages_by_prefix_and_after_key_in_byte_order(sessionmaker: Sessions) -> None:
    assert sorted(KEYS, key=str.encode) == KEYS
    await _put_keys(sessionmaker, list(reversed(KEYS)))
    await _put_keys(sessionmaker, ["a/other-bucket"], bucket="other")

    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)

        async def keys(prefix: str = "", after: str | None = None, limit: int = 100) -> list[str]:
            return [o.key for o in await repo.list("bucket", prefix, after, limit)]

        assert await keys() == KEYS
        assert await keys("a/") == ["a/1", "a/2", "a/2/x"]
        assert await keys("a/2") == ["a/2", "a/2/x"]
        assert await keys("a", limit=3) == ["a", "a-c", "a/1"]
        assert await keys("a", after="a/2", limit=3) == ["a/2/x", "a0", "ab"]
        assert await keys("a", after="ab") == ["a\u00e9"]
        assert await keys("a/", after="zzz") == []
        assert await keys("c") == []
        assert await keys(after="a0") == ["ab", "a\u00e9", "b", "b/1"]
        assert await keys(limit=0) == []

        pages: list[list[str]] = []
        after: str | None = None
        while page := await keys(after=after, limit=4):
            pages.append(page)
            after = page[-1]
        assert pages == [KEYS[0:4], KEYS[4:8], KEYS[8:]]


async def test_list_does_not_load_inline_content(sessionmaker: Sessions) -> None:
    await _put_keys(sessionmaker, ["k"])
    async with session_scope(sessionmaker) as session:
        (listed,) = await ObjectRepository(session).list("bucket")
        (got,) = [await ObjectRepository(session).get("bucket", "k")]
    assert got is not None and got.inline_data  # the object holds content inline...
    assert listed.inline_data is None  # ...which its listing did not read


def test_prefix_upper_bound() -> None:
    assert prefix_upper_bound("") is None
    assert prefix_upper_bound("abc") == "abd"
    assert prefix_upper_bound("a/") == "a0"
    assert prefix_upper_bound("a\U0010ffff") == "b"
    assert prefix_upper_bound("\U0010ffff") is None
    assert prefix_upper_bound("x\ud7ff") == "x\ue000"


# --- owners -----------------------------------------------------------------------


async def test_a_put_limited_to_its_owner_leaves_another_keys_object_alone(
    sessionmaker: Sessions,
) -> None:
    theirs, mine = await add_chunks(sessionmaker, [100, 50])
    async with session_scope(sessionmaker) as session:
        created = await ObjectRepository(session).put(
            replace(spec("k", whole_chunks([theirs])), owner_key_id=1)
        )

    with pytest.raises(NotOwner):
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(
                replace(spec("k", whole_chunks([mine])), owner_key_id=2),
                keep_public_id=True,
                only_if_owned_by=2,
            )

    async with session_scope(sessionmaker) as session:
        found = await ObjectRepository(session).get("bucket", "k")
        states = {row.id: row.state for row in await session.execute(select(Chunk.id, Chunk.state))}
        ledger = await count(session, GcEntry)
    assert found is not None and (found.id, found.owner_key_id) == (created.id, 1)
    # The refused content is still the uploader's to discard; nothing was released.
    assert states == {theirs.id: "live", mine.id: "pending"}
    assert ledger == 0


async def test_a_delete_limited_to_its_owner_refuses_other_and_ownerless_objects(
    sessionmaker: Sessions,
) -> None:
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        owned = await repo.put(replace(spec("owned", inline_data=b"x"), owner_key_id=1))
        ownerless = await repo.put(spec("from-s3-or-before-owners", inline_data=b"y"))

    for public_id in (owned.public_id, ownerless.public_id):
        with pytest.raises(NotOwner):
            async with session_scope(sessionmaker) as session:
                await ObjectRepository(session).delete_by_public_id(
                    public_id, bucket="bucket", only_if_owned_by=2
                )
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        assert await count(session, StoredObject) == 2
        assert await repo.delete_by_public_id(owned.public_id, bucket="bucket", only_if_owned_by=1)
        assert await repo.delete_by_public_id(ownerless.public_id, bucket="bucket")  # admin
        assert await count(session, StoredObject) == 0


async def test_a_new_small_key_is_written_with_one_statement(sessionmaker: Sessions) -> None:
    async with session_scope(sessionmaker) as session:
        with statements() as seen:
            created = await ObjectRepository(session).put(spec("new", inline_data=b"small"))
    # No read first and no ORM flush; on SQLite not even a locking no-op (the
    # INSERT takes the write lock), on Postgres the key's advisory lock.
    writes = [sql.split()[0] for sql in seen if sql not in ("BEGIN", "COMMIT")]
    expected = (
        ["INSERT"] if sessionmaker.kw["bind"].dialect.name == "sqlite" else ["SELECT", "INSERT"]
    )
    assert writes == expected, seen
    async with session_scope(sessionmaker) as session:
        stored = await ObjectRepository(session).get("bucket", "new")
    assert stored is not None and stored.id == created.id and stored.inline_data == b"small"


# The plan SQLite makes from the schema; Postgres plans by table statistics.
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_listing_newest_or_oldest_first_reads_its_page_not_the_whole_bucket(
    engine: AsyncEngine, sessionmaker: Sessions
) -> None:
    ran: list[tuple[str, Any]] = []

    def listing(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if statement.lstrip().startswith("SELECT") and "ORDER BY objects.id" in statement:
            ran.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", listing)
    try:
        async with session_scope(sessionmaker) as session:
            repo = ObjectRepository(session)
            await repo.list("bucket", limit=50, order="newest")
            await repo.list("bucket", limit=50, order="oldest", after_id=7)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", listing)

    assert len(ran) == 2
    async with engine.connect() as connection:
        for statement, parameters in ran:
            plan = await connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            steps = [str(row[-1]) for row in plan]
            # Read in id order through the (bucket, id) index, so a page
            # costs its rows: no sort of every object of the bucket first.
            assert any("ix_objects_bucket_id" in step for step in steps), steps
            assert not any("TEMP B-TREE" in step for step in steps), steps


def test_new_public_ids_never_start_with_a_dash() -> None:
    # One id in 64 did: 2,000 draws all but surely show one.
    assert not any(new_public_id().startswith("-") for _ in range(2000))
