"""Snapshot rows (app/db/snapshots.py) from an earlier schema."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import Chunk
from app.db.session import session_scope
from app.db.snapshots import encode_rows, load_rows
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
