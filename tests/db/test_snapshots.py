"""Snapshot rows (app/db/snapshots.py): from an earlier schema, pinned or
not, and the writers' lease."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db import journal
from app.db.models import Chunk, GcEntry, SnapshotLease
from app.db.session import session_scope
from app.db.snapshots import (
    SnapshotMessageSpec,
    encode_rows,
    load_rows,
    manifest_detail,
    mark_pinned,
    prune,
    record_messages,
    seal_use,
    take_lease,
)
from app.db.spool import InstanceRepository
from app.db.types import utcnow
from app.store.blocks import SHA256, block_hashes, digest_of


async def test_a_chunk_from_a_snapshot_before_blake3_is_checked_with_sha256(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """A snapshot taken before migration 0022 has no `block_digest`: its
    chunks' block hashes are SHA-256 ones, and restored they must read so."""
    hashes = block_hashes(b"x" * 1000, SHA256)
    before_0022 = {
        "id": 7,
        "size": 1000,
        "sha256": "0" * 64,
        "block_hashes": hashes,
        "state": "live",
        "created_at": utcnow(),
        "owner": None,
        "copies_ok": 1,
        "lost_at": None,
        "seal_key_id": None,
        "sealed_data_key": None,
    }
    async with session_scope(sessionmaker) as session:
        assert await load_rows(session, "chunks", encode_rows("chunks", [before_0022])) == 1

    async with session_scope(sessionmaker) as session:
        row = (await session.execute(select(Chunk.block_hashes, Chunk.block_digest))).one()
    assert row.block_hashes == hashes
    assert digest_of(row.block_digest) == SHA256


async def test_pruned_snapshot_messages_reach_the_ledger_with_their_posting_time(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """The GC counts Telegram's 48 hours from each message's posting: a
    snapshot's pieces and journal batches keep theirs into the ledger."""
    hour = timedelta(hours=1)
    start = utcnow()
    for age, kind in ((3, "piece"), (2, "journal"), (1, "manifest"), (0, "manifest")):
        async with session_scope(sessionmaker) as session:
            pinned = start if kind == "manifest" else None
            spec = SnapshotMessageSpec(kind, 7, -1001, 100 - age, f"u{age}", pinned_at=pinned)
            await record_messages(session, start - age * hour, [spec])

    async with session_scope(sessionmaker) as session:
        assert await prune(session, keep=2) == 2  # the two oldest snapshots' messages

    async with session_scope(sessionmaker) as session:
        ledgered = list(await session.scalars(select(GcEntry).order_by(GcEntry.message_id)))
    assert [e.message_id for e in ledgered] == [97, 98]
    for entry in ledgered:
        # Recorded just now, as they were sent: posted by then.
        assert entry.posted_at is not None
        assert start <= entry.posted_at <= utcnow()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_pruning_is_not_refused_by_a_write_that_lands_between_its_reads_and_its_writes(
    engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """SQLite refuses at once ("database is locked", no busy wait) a
    transaction that read and then writes after another connection wrote:
    its view is stale. A snapshot's prune read the old messages, then
    ledgered them, so an upload committing in between failed the whole
    snapshot with a 503 (bench/snapshot_writers_bench.py, 4 writers: one
    run in three). Pruning takes the write lock before it reads."""
    start = utcnow()
    for age in (2, 1, 0):
        async with session_scope(sessionmaker) as session:
            spec = SnapshotMessageSpec("manifest", 7, -1001, 100 - age, f"u{age}", pinned_at=start)
            await record_messages(session, start - age * timedelta(hours=1), [spec])

    path = engine.url.database
    assert path is not None
    landed: list[bool] = []

    def another_writer(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # Once, just before prune's first write: an upload's commit.
        if landed or not statement.lstrip().upper().startswith(("INSERT", "DELETE")):
            return
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute(
                "INSERT INTO api_keys (name, prefix, key_hash, scope, created_at)"
                " VALUES ('upload', 'tu_x', 'h', 'write', '2026-01-01 00:00:00')"
            )
            landed.append(True)
        except sqlite3.OperationalError:  # this transaction holds the write lock
            landed.append(False)
        finally:
            other.close()

    event.listen(engine.sync_engine, "before_cursor_execute", another_writer)
    try:
        async with session_scope(sessionmaker) as session:
            assert await prune(session, keep=1) == 2
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", another_writer)
    assert landed == [False]  # the other writer waited for this one


async def test_the_journal_chains_onto_the_newest_pinned_snapshot_not_one_cut_off_before_its_pin(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """A snapshot killed between recording its manifest and pinning it is
    one a restore never finds (the chat still pins the previous one): the
    journal's batches must keep going to the previous one's chain."""
    start = utcnow()
    older, cut_off = start - timedelta(hours=1), start
    async with session_scope(sessionmaker) as session:
        await record_messages(session, older, [SnapshotMessageSpec("manifest", 7, -1001, 10, "a")])
        await mark_pinned(session, older)
        await record_messages(
            session, cut_off, [SnapshotMessageSpec("manifest", 7, -1001, 20, "b")]
        )

    async with session_scope(sessionmaker) as session:
        pinned = await journal.pinned_snapshot(session)
    assert pinned is not None
    taken_at, [manifest] = pinned
    assert (taken_at, manifest.message_id) == (older, 10)

    # Nor does the cut-off one count among the snapshots pruning keeps.
    async with session_scope(sessionmaker) as session:
        await record_messages(session, start + timedelta(hours=1), [])
        assert await prune(session, keep=1) == 0


async def test_a_lease_whose_holder_has_no_instance_row_is_free(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """A holder killed mid-snapshot leaves a lease of 30 minutes; once its
    instance row is gone (claimed, or stopped), nobody writes snapshots or
    ships the journal for it, and the lease is free at once."""
    later = utcnow() + timedelta(minutes=30)
    async with session_scope(sessionmaker) as session:
        await InstanceRepository(session).register("alive", "host", 1, block_digests="sha256")
        await InstanceRepository(session).register("dead", "host", 2, block_digests="sha256")
        assert await take_lease(session, "dead", later)
        assert not await take_lease(session, "alive", later)
        await InstanceRepository(session).remove("dead")

    async with session_scope(sessionmaker) as session:
        assert await take_lease(session, "alive", later)
        assert (await session.get(SnapshotLease, "snapshot")) is not None
        # A live holder's lease still holds.
        assert not await take_lease(session, "another", later)


async def test_the_keys_a_restore_needs_are_the_pinned_snapshots_and_its_batches(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    taken = utcnow()
    batch = '{"seq":%d,"sealing":{"key_id":"%s"}}'
    async with session_scope(sessionmaker) as session:
        manifest = SnapshotMessageSpec(
            "manifest", 7, -1001, 10, "m", manifest_detail({"key_id": "new"})
        )
        batches = [
            SnapshotMessageSpec("journal", 7, -1001, 11 + n, f"j{n}", batch % (n, key))
            for n, key in enumerate(("old", "new", "new"))
        ]
        await record_messages(session, taken, [manifest, *batches])
        await mark_pinned(session, taken)
        use = await seal_use(session)

    assert use is not None and use.snapshot_key == "new"
    assert use.batch_keys == {"old": 1, "new": 2}
    assert use.needs("old") and use.needs("new") and not use.needs("older")
