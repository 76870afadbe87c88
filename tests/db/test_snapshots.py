"""Snapshot rows (app/db/snapshots.py) from an earlier schema."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import Chunk, GcEntry
from app.db.session import session_scope
from app.db.snapshots import (
    SnapshotMessageSpec,
    encode_rows,
    load_rows,
    prune,
    record_messages,
)
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
            spec = SnapshotMessageSpec(kind, 7, -1001, 100 - age, f"u{age}")
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
