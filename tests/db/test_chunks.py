from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.locking import BATCH_SIZE
from app.db.models import Chunk, ChunkCopy, GcEntry
from app.db.repositories import ChunkRepository, ObjectRepository
from app.db.session import session_scope
from tests.db.helpers import add_chunks, count, document, spec, whole_chunks

Sessions = async_sessionmaker[AsyncSession]


async def test_add_pending_records_every_field_of_the_document(session: AsyncSession) -> None:
    doc = document(size=1234, bot_id=777)
    chunk = await ChunkRepository(session).add_pending(doc, "ab" * 32)
    await session.commit()
    session.expunge_all()

    loaded = await ChunkRepository(session).get(chunk.id)
    assert loaded is not None
    assert (loaded.size, loaded.sha256, loaded.state) == (1234, "ab" * 32, "pending")
    assert loaded.copies_ok == 1
    (copy,) = (await session.scalars(select(ChunkCopy))).all()
    assert (copy.chunk_id, copy.bot_id, copy.file_id, copy.file_unique_id) == (
        chunk.id,
        777,
        doc.file_id,
        doc.file_unique_id,
    )
    assert (copy.chat_id, copy.message_id, copy.state) == (doc.chat_id, doc.message_id, "ok")


async def test_a_chunk_of_several_copies_ledgers_every_copys_message_when_released(
    sessionmaker: Sessions,
) -> None:
    copies = [document(size=10, bot_id=bot) for bot in (1, 2, 3)]
    async with session_scope(sessionmaker) as session:
        chunk = await ChunkRepository(session).add_pending(copies, "ab" * 32)
        assert chunk.copies_ok == 3
    async with session_scope(sessionmaker) as session:
        assert await ChunkRepository(session).release([chunk.id], "deleted") == 1
    async with session_scope(sessionmaker) as session:
        ledgered = {(e.bot_id, e.message_id) for e in await session.scalars(select(GcEntry))}
        assert ledgered == {(d.bot_id, d.message_id) for d in copies}
        assert await count(session, ChunkCopy) == 0


async def test_mark_live(sessionmaker: Sessions) -> None:
    a, b = await add_chunks(sessionmaker, [1, 2])
    async with session_scope(sessionmaker) as session:
        await ChunkRepository(session).mark_live([a.id])
    async with session_scope(sessionmaker) as session:
        states = {i: s for i, s in await session.execute(select(Chunk.id, Chunk.state))}
    assert states == {a.id: "live", b.id: "pending"}


async def _age(sessionmaker: Sessions, chunk: Chunk, created_at: datetime) -> None:
    async with session_scope(sessionmaker) as session:
        await session.execute(
            update(Chunk).where(Chunk.id == chunk.id).values(created_at=created_at)
        )


async def test_collect_pending_orphans_takes_only_old_unreferenced_pending_chunks(
    sessionmaker: Sessions,
) -> None:
    startup = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    old_orphan, old_live, recent = await add_chunks(sessionmaker, [1, 2, 3])
    await _age(sessionmaker, old_orphan, startup - timedelta(hours=1))
    await _age(sessionmaker, old_live, startup - timedelta(hours=1))
    await _age(sessionmaker, recent, startup + timedelta(seconds=1))
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("k", whole_chunks([old_live])))

    async with session_scope(sessionmaker) as session:
        assert await ChunkRepository(session).collect_pending_orphans(startup) == 1
    async with session_scope(sessionmaker) as session:
        assert set(await session.scalars(select(Chunk.id))) == {old_live.id, recent.id}
        (entry,) = (await session.scalars(select(GcEntry))).all()
        assert (entry.message_id, entry.reason) == (old_orphan.message_id, "orphaned")
        assert (entry.bot_id, entry.chat_id) == (old_orphan.bot_id, old_orphan.chat_id)
        assert entry.file_unique_id == old_orphan.file_unique_id
        # Nothing left to collect: a second run is a no-op.
        assert await ChunkRepository(session).collect_pending_orphans(startup) == 0


async def test_collect_pending_orphans_spares_the_chunks_of_live_instances(
    sessionmaker: Sessions,
) -> None:
    async with session_scope(sessionmaker) as session:
        repo = ChunkRepository(session)
        mine = await repo.add_pending(document(), "ab" * 32, owner="alive")
        other = await repo.add_pending(document(), "ab" * 32, owner="also-alive")
        dead = await repo.add_pending(document(), "ab" * 32, owner="dead")
        fresh_unowned = await repo.add_pending(document(), "ab" * 32)
    long_ago = datetime.now(UTC) - timedelta(hours=1)

    async with session_scope(sessionmaker) as session:
        collected = await ChunkRepository(session).collect_pending_orphans(
            long_ago, ["alive", "also-alive"]
        )
    async with session_scope(sessionmaker) as session:
        left = set(await session.scalars(select(Chunk.id)))
    assert collected == 1
    assert left == {mine.id, other.id, fresh_unowned.id}
    assert dead.id not in left

    # With no instance alive at all, every owned pending chunk is an orphan.
    async with session_scope(sessionmaker) as session:
        assert await ChunkRepository(session).collect_pending_orphans(long_ago, []) == 2


async def test_release_keeps_referenced_chunks_and_ledgers_the_rest(
    sessionmaker: Sessions,
) -> None:
    used, unused = await add_chunks(sessionmaker, [1, 2])
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("k", whole_chunks([used])))
    async with session_scope(sessionmaker) as session:
        released = await ChunkRepository(session).release([used.id, unused.id, 999_999], "aborted")
    assert released == 1
    async with session_scope(sessionmaker) as session:
        assert set(await session.scalars(select(Chunk.id))) == {used.id}
        assert [(e.message_id, e.reason) for e in await session.scalars(select(GcEntry))] == [
            (unused.message_id, "aborted")
        ]
        assert await ChunkRepository(session).release([], "aborted") == 0


async def test_release_handles_more_chunks_than_one_statement_takes(
    sessionmaker: Sessions,
) -> None:
    many = BATCH_SIZE * 2 + 1
    now = datetime.now(UTC)
    async with session_scope(sessionmaker) as session:
        await session.execute(
            insert(Chunk),
            [
                {"size": 1, "sha256": "0" * 64, "state": "pending", "created_at": now}
                for _ in range(many)
            ],
        )
        ids = list(await session.scalars(select(Chunk.id)))
        await session.execute(
            insert(ChunkCopy),
            [
                {
                    "chunk_id": chunk_id,
                    "bot_id": 1,
                    "file_id": f"f{n}",
                    "file_unique_id": f"u{n}",
                    "chat_id": 1,
                    "message_id": n,
                    "state": "ok",
                    "created_at": now,
                }
                for n, chunk_id in enumerate(ids)
            ],
        )
    async with session_scope(sessionmaker) as session:
        ids = list(await session.scalars(select(Chunk.id)))
        assert await ChunkRepository(session).release(ids, "aborted") == many
    async with session_scope(sessionmaker) as session:
        assert await count(session, Chunk) == 0
        assert await count(session, GcEntry) == many
