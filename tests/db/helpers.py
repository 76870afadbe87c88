"""Building test data: stored documents, chunks and object specs."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import Base, Chunk
from app.db.repositories import ChunkRepository, ObjectSpec, PieceSpec
from app.db.session import session_scope
from app.telegram.types import StoredDocument


@dataclass(frozen=True)
class Database:
    """A test database reachable two ways: `url` for the app, `migration_url` for Alembic."""

    backend: str
    url: str
    migration_url: str


CHAT_ID = -1001234567890
_message_ids = itertools.count(1000)


def document(size: int = 100, bot_id: int = 111) -> StoredDocument:
    message_id = next(_message_ids)
    return StoredDocument(
        bot_id=bot_id,
        file_id=f"file-{message_id}",
        file_unique_id=f"unique-{message_id}",
        chat_id=CHAT_ID,
        message_id=message_id,
        size=size,
    )


async def add_chunks(
    sessionmaker: async_sessionmaker[AsyncSession], sizes: Sequence[int]
) -> list[Chunk]:
    """Pending chunks, committed (as the uploader commits each one)."""
    async with session_scope(sessionmaker) as session:
        repo = ChunkRepository(session)
        return [
            await repo.add_pending(document(size), hashlib.sha256(b"%d" % size).hexdigest())
            for size in sizes
        ]


def whole_chunks(chunks: Sequence[Chunk]) -> list[PieceSpec]:
    return [PieceSpec(chunk_id=c.id, offset=0, length=c.size) for c in chunks]


def spec(
    key: str,
    pieces: Sequence[PieceSpec] = (),
    *,
    bucket: str = "bucket",
    inline_data: bytes | None = None,
    etag: str = '"d41d8cd98f00b204e9800998ecf8427e"',
) -> ObjectSpec:
    size = len(inline_data) if inline_data is not None else sum(p.length for p in pieces)
    return ObjectSpec(
        bucket=bucket,
        key=key,
        name=key.rsplit("/", 1)[-1],
        content_type="application/octet-stream",
        size=size,
        etag=etag,
        md5=etag.strip('"'),
        user_metadata={"origin": "test"},
        inline_data=inline_data,
        pieces=tuple(pieces),
    )


async def count(session: AsyncSession, model: type[Base]) -> int:
    return await session.scalar(select(func.count()).select_from(model)) or 0
