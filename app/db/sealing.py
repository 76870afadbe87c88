"""What encryption at rest keeps in the database: counts per master key,
and the batches `teleuploader encryption rotate` re-wraps."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, delete, distinct, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.chunks import PostedDocument, SealRecord, copy_values, ledger_values
from app.db.locking import lock_database_for_write
from app.db.models import Chunk, ChunkCopy, GcEntry, PartPiece, Piece, StoredObject
from app.db.types import utcnow
from app.sealing import CUSTOMER_KEY_ID

# (seal key id, wrapped data key) of each distinct chunk of an object:
# plaintext, master-sealed, or wrapped under a customer key. Asked on every
# GET and HEAD of an object in chunks, so one statement built once, for the
# single-statement reader (app.db.single_statements), not a session.
_CHUNKS = Chunk.__table__.c
_PIECES = Piece.__table__.c
OBJECT_SEALS: Select[Any] = (
    select(_CHUNKS.seal_key_id, _CHUNKS.sealed_data_key)
    .join(Piece.__table__, _PIECES.chunk_id == _CHUNKS.id)
    .where(_PIECES.object_id == bindparam("object_id"))
    .distinct()
)


def seal_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[str | None, bytes | None]]:
    """OBJECT_SEALS' rows, or `SealingRepository.upload_seals`'."""
    return [(key_id, None if wrapped is None else bytes(wrapped)) for key_id, wrapped in rows]


@dataclass(frozen=True, slots=True)
class KeyCount:
    """Chunks and objects under one master key id (None: plaintext)."""

    key_id: str | None
    chunks: int
    objects: int


@dataclass(frozen=True, slots=True)
class WrappedKey:
    chunk_id: int
    key_id: str
    wrapped: bytes


class SealingRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def counts(self) -> list[KeyCount]:
        """Chunks and objects per master key id, plaintext (None) last. An
        object counts under every key one of its chunks uses; inline objects
        (in the database, never in Telegram) count as plaintext."""
        chunks = dict(
            (
                await self._session.execute(
                    select(Chunk.seal_key_id, func.count()).group_by(Chunk.seal_key_id)
                )
            ).all()
        )
        objects = dict(
            (
                await self._session.execute(
                    select(Chunk.seal_key_id, func.count(distinct(Piece.object_id)))
                    .join(Chunk, Chunk.id == Piece.chunk_id)
                    .group_by(Chunk.seal_key_id)
                )
            ).all()
        )
        inline = await self._session.scalar(
            select(func.count())
            .select_from(StoredObject)
            .where(StoredObject.inline_data.is_not(None))
        )
        objects[None] = objects.get(None, 0) + (inline or 0)
        ids = sorted(key for key in set(chunks) | set(objects) if key is not None)
        return [
            KeyCount(key, int(chunks.get(key, 0)), int(objects.get(key, 0))) for key in [*ids, None]
        ]

    async def wrapped_not_under(self, key_id: str, after: int, limit: int) -> list[WrappedKey]:
        """Sealed chunks whose data key another master key wrapped, in id
        order after `after` (a resumable pass). The caller rewrites them in
        this transaction: on SQLite it becomes the writer first (a read
        transaction cannot take the write lock once another has written)."""
        await lock_database_for_write(self._session)
        rows = await self._session.execute(
            select(Chunk.id, Chunk.seal_key_id, Chunk.sealed_data_key)
            .where(
                Chunk.seal_key_id.is_not(None),
                # Customer keys (SSE-C) are the customers': no master key wraps them.
                Chunk.seal_key_id.not_in((key_id, CUSTOMER_KEY_ID)),
                Chunk.id > after,
            )
            .order_by(Chunk.id)
            .limit(limit)
        )
        return [WrappedKey(int(i), str(k), bytes(w or b"")) for i, k, w in rows]

    async def rewrap(self, chunk_id: int, old: WrappedKey, key_id: str, wrapped: bytes) -> bool:
        """Store a data key wrapped anew, unless the row changed since it was
        read (then False: the next pass looks again)."""
        result = await self._session.execute(
            update(Chunk)
            .where(
                Chunk.id == chunk_id,
                Chunk.seal_key_id == old.key_id,
                Chunk.sealed_data_key == old.wrapped,
            )
            .values(seal_key_id=key_id, sealed_data_key=wrapped)
        )
        return bool(getattr(result, "rowcount", 0))

    async def upload_seals(
        self, upload_id: str, *, limit: int | None = None
    ) -> list[tuple[str | None, bytes | None]]:
        """As `object_seals`, for the parts of a multipart upload so far (at
        most `limit` chunks)."""
        query = (
            select(Chunk.seal_key_id, Chunk.sealed_data_key)
            .join(PartPiece, PartPiece.chunk_id == Chunk.id)
            .where(PartPiece.upload_id == upload_id)
        )
        if limit is not None:
            query = query.limit(limit)
        rows = await self._session.execute(query.distinct() if limit is None else query)
        return seal_rows(rows)

    async def plaintext_chunks(self, after: int, limit: int) -> list[int]:
        """Live plaintext chunks in id order after `after` (pending ones
        belong to uploads still running, and are sealed if keys are on)."""
        return list(
            await self._session.scalars(
                select(Chunk.id)
                .where(Chunk.state == "live", Chunk.seal_key_id.is_(None), Chunk.id > after)
                .order_by(Chunk.id)
                .limit(limit)
            )
        )

    async def replace_with_sealed(
        self, chunk_id: int, documents: list[PostedDocument], seal: SealRecord
    ) -> bool:
        """A plaintext chunk becomes sealed: its new copies in, its old
        copies' messages to the GC ledger, in this transaction. False (and
        nothing changed) if the chunk is gone or no longer plaintext: the
        caller ledgers `documents`."""
        await lock_database_for_write(self._session)
        still = await self._session.scalar(
            select(Chunk.id)
            .where(Chunk.id == chunk_id, Chunk.seal_key_id.is_(None))
            .with_for_update()
        )
        if still is None:
            return False
        old = (
            await self._session.execute(
                select(
                    ChunkCopy.bot_id,
                    ChunkCopy.chat_id,
                    ChunkCopy.message_id,
                    ChunkCopy.file_unique_id,
                    ChunkCopy.created_at,
                ).where(ChunkCopy.chunk_id == chunk_id)
            )
        ).all()
        now = utcnow()
        if old:
            await self._session.execute(
                insert(GcEntry),
                [
                    ledger_values(bot, chat, message, unique, posted, "overwritten", now)
                    for bot, chat, message, unique, posted in old
                ],
            )
        await self._session.execute(
            delete(ChunkCopy)
            .where(ChunkCopy.chunk_id == chunk_id)
            .execution_options(synchronize_session=False)
        )
        await self._session.execute(
            insert(ChunkCopy),
            [
                {**copy_values(chunk_id, document, now, salt), "verified_at": now}
                for document, salt in zip(documents, seal.salts, strict=True)
            ],
        )
        await self._session.execute(
            update(Chunk)
            .where(Chunk.id == chunk_id)
            .values(
                seal_key_id=seal.key_id,
                sealed_data_key=seal.wrapped_key,
                sha256="",
                block_hashes=None,
                block_digest=None,
                copies_ok=len(documents),
                lost_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        return True
