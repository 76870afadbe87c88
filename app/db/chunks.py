"""Chunks and their copies (Telegram documents), from upload to release into
the GC ledger. What happens to a copy after it was stored (found missing or
corrupt, repaired) is app.db.copies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

from sqlalchemy import ColumnElement, and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.locking import batches, lock_database_for_write
from app.db.models import Chunk, ChunkCopy, GcEntry, GcReason, Instance, PartPiece, Piece
from app.db.types import utcnow


class PostedDocument(Protocol):
    """What the database keeps of a document Telegram stored: the Telegram
    layer's StoredDocument has this shape (the database does not import it)."""

    @property
    def bot_id(self) -> int: ...
    @property
    def file_id(self) -> str: ...
    @property
    def file_unique_id(self) -> str: ...
    @property
    def chat_id(self) -> int: ...
    @property
    def message_id(self) -> int: ...
    @property
    def size(self) -> int: ...


def copy_values(
    chunk_id: int, document: PostedDocument, now: datetime, salt: bytes | None = None
) -> dict[str, object]:
    """The chunk_copies row of a document Telegram stored (`salt`: a sealed
    chunk's copy)."""
    return {
        "chunk_id": chunk_id,
        "bot_id": document.bot_id,
        "file_id": document.file_id,
        "file_unique_id": document.file_unique_id,
        "chat_id": document.chat_id,
        "message_id": document.message_id,
        "state": "ok",
        "created_at": now,
        "seal_salt": salt,
    }


def ledger_values(
    bot_id: int,
    chat_id: int,
    message_id: int,
    file_unique_id: str,
    posted_at: datetime | None,
    reason: GcReason,
    now: datetime,
) -> dict[str, object]:
    """The gc_ledger row of a message to delete, posted at `posted_at` at
    the latest (a copy's `created_at`: its row is written after Telegram
    answered the post)."""
    return {
        "bot_id": bot_id,
        "chat_id": chat_id,
        "message_id": message_id,
        "file_unique_id": file_unique_id,
        "reason": reason,
        "enqueued_at": now,
        "attempts": 0,
        "next_attempt_at": now,
        "posted_at": posted_at,
    }


@dataclass(frozen=True, slots=True)
class SealRecord:
    """What the database keeps of a sealed chunk (docs/encryption.md)."""

    size: int  # plaintext bytes
    key_id: str  # the master key that wrapped the data key
    wrapped_key: bytes
    salts: Sequence[bytes]  # one per copy, in the order of its documents


class InstanceGone(Exception):
    """The chunk's owner has no instance row: another instance took it for
    dead (a stall past the heartbeat) and claimed what it left. Its sends'
    intents are gone, so reconciliation may have ledgered their messages:
    the chunk must not be recorded."""

    def __init__(self, owner: str) -> None:
        super().__init__(f"instance {owner} was taken for dead by another instance")
        self.owner = owner


class ChunksMissing(Exception):
    """Chunks an object was to reference no longer exist (released or collected)."""

    def __init__(self, chunk_ids: Iterable[int]) -> None:
        self.chunk_ids = sorted(chunk_ids)
        super().__init__(f"chunks no longer exist: {self.chunk_ids}")


class ChunkRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def add_pending(
        self,
        copies: PostedDocument | Sequence[PostedDocument],
        sha256: str,
        owner: str | None = None,
        *,
        block_hashes: bytes | None = None,
        block_digest: str | None = None,
        seal: SealRecord | None = None,
        owner_registered: bool = False,
    ) -> Chunk:
        """Record a freshly uploaded chunk: its copies, one document each (or
        its one document). It stays 'pending' until `mark_live`; `owner` is
        the instance whose upload it belongs to. A sealed chunk's `seal`
        gives its plaintext size, its wrapped data key and each copy's salt
        (the documents hold the sealed size)."""
        documents: list[PostedDocument] = (
            list(copies) if isinstance(copies, list | tuple) else [cast(PostedDocument, copies)]
        )
        if not documents:
            raise ValueError("a chunk has at least one copy")
        if owner is not None and owner_registered:
            # FOR KEY SHARE: a claim's DELETE of the row waits for this commit
            # (the chunk is then a row reconciliation sees), the owner's own
            # heartbeat does not. Raises InstanceGone if the row went.
            await lock_database_for_write(self._session)
            alive = await self._session.scalar(
                select(Instance.id)
                .where(Instance.id == owner)
                .with_for_update(read=True, key_share=True)
            )
            if alive is None:
                raise InstanceGone(owner)
        now = utcnow()
        chunk = Chunk(
            owner=owner,
            size=documents[0].size if seal is None else seal.size,
            sha256=sha256,
            block_hashes=block_hashes,
            block_digest=block_digest,
            state="pending",
            created_at=now,
            copies_ok=len(documents),
            seal_key_id=None if seal is None else seal.key_id,
            sealed_data_key=None if seal is None else seal.wrapped_key,
        )
        salts: Sequence[bytes | None] = [None] * len(documents) if seal is None else seal.salts
        self._session.add(chunk)
        await self._session.flush()
        await self._session.execute(
            insert(ChunkCopy),
            [
                copy_values(chunk.id, document, now, salt)
                for document, salt in zip(documents, salts, strict=True)
            ],
        )
        return chunk

    async def get(self, chunk_id: int) -> Chunk | None:
        return await self._session.get(Chunk, chunk_id)

    async def count_larger(self, size: int, sealed_size: int) -> int:
        """Chunks whose stored documents are larger than a download limit:
        plaintext ones above `size` bytes, sealed ones (their documents
        carry the frames' tags) above `sealed_size` bytes of plaintext."""
        return int(
            await self._session.scalar(
                select(func.count())
                .select_from(Chunk)
                .where(
                    or_(
                        and_(Chunk.seal_key_id.is_(None), Chunk.size > size),
                        and_(Chunk.seal_key_id.is_not(None), Chunk.size > sealed_size),
                    )
                )
            )
            or 0
        )

    async def mark_live(self, chunk_ids: Iterable[int]) -> None:
        """Mark chunks as referenced, locking them against a concurrent release.

        Raises ChunksMissing if any is gone; the caller must then not insert
        pieces pointing at it (the foreign key would refuse them anyway).
        """
        ids = sorted(set(chunk_ids))
        if not ids:
            return
        await lock_database_for_write(self._session)
        found: set[int] = set()
        for batch in batches(ids):
            # FOR SHARE: blocks `release` (FOR UPDATE) of these rows until we
            # commit, while other copies referencing the same chunk proceed.
            locked = await self._session.scalars(
                select(Chunk.id).where(Chunk.id.in_(batch)).with_for_update(read=True)
            )
            found.update(locked)
            await self._session.execute(
                update(Chunk)
                .where(Chunk.id.in_(batch), Chunk.state == "pending")
                .values(state="live")
                .execution_options(synchronize_session=False)
            )
        if missing := set(ids) - found:
            raise ChunksMissing(missing)

    async def release(self, chunk_ids: Iterable[int], reason: GcReason) -> int:
        """Retire the chunks that no piece references any more; return how many.

        Each retired chunk's message goes to the GC ledger and its row is
        deleted; a chunk an object or an upload part still references is kept.
        """
        ids = sorted(set(chunk_ids))
        if not ids:
            return 0
        await lock_database_for_write(self._session)
        released = 0
        for batch in batches(ids):
            # Locked in id order, so two releases cannot deadlock each other;
            # a concurrent `mark_live` of one of them waits for our commit and
            # then finds it gone.
            chunks = (
                await self._session.scalars(
                    select(Chunk).where(Chunk.id.in_(batch)).order_by(Chunk.id).with_for_update()
                )
            ).all()
            referenced = set(
                await self._session.scalars(
                    select(Piece.chunk_id)
                    .where(Piece.chunk_id.in_(batch))
                    .union(select(PartPiece.chunk_id).where(PartPiece.chunk_id.in_(batch)))
                )
            )
            released += await self._retire([c for c in chunks if c.id not in referenced], reason)
        return released

    async def collect_pending_orphans(
        self, before: datetime, live_owners: Iterable[str] = ()
    ) -> int:
        """Retire the pending chunks of uploads that died; return how many.

        An upload that was running when its process died left its chunks
        pending forever. A chunk is taken for such when its owner is not one
        of `live_owners`, or, having no owner, when it is older than `before`.
        The chunks of live instances' uploads are never touched.
        """
        dead = or_(
            and_(Chunk.owner.is_(None), Chunk.created_at < before),
            # (Explicitly not NULL: an empty NOT IN list is true for NULL too.)
            and_(
                Chunk.owner.is_not(None),
                Chunk.owner.not_in(list(live_owners)),
                # `live_owners` was read before this statement: an instance
                # that registered since is missing from it but has its row.
                # A dead one's row is deleted (claimed) before its chunks
                # are swept, so a row means alive or not yet claimed.
                ~exists().where(Instance.id == Chunk.owner),
            ),
        )
        return await self._retire_unreferenced_pending(dead)

    async def collect_stale_pending(self, owner: str, before: datetime) -> int:
        """Retire `owner`'s pending chunks created before `before`; return how many.

        For a live instance: `before` is when its oldest running upload began,
        so these belong to request tasks that died without releasing them.
        """
        return await self._retire_unreferenced_pending(
            and_(Chunk.owner == owner, Chunk.created_at < before)
        )

    async def _retire_unreferenced_pending(self, which: ColumnElement[bool]) -> int:
        await lock_database_for_write(self._session)
        unreferenced = ~exists().where(Piece.chunk_id == Chunk.id) & ~exists().where(
            PartPiece.chunk_id == Chunk.id
        )
        chunks = (
            await self._session.scalars(
                select(Chunk)
                .where(Chunk.state == "pending", which, unreferenced)
                .order_by(Chunk.id)
                .with_for_update(skip_locked=True)
            )
        ).all()
        return await self._retire(chunks, "orphaned")

    async def _retire(self, chunks: Sequence[Chunk], reason: GcReason) -> int:
        """A ledger entry for every copy's message, and the rows deleted (the
        copies with their chunk), in the caller's transaction."""
        if not chunks:
            return 0
        now = utcnow()
        for batch in batches([c.id for c in chunks]):
            copies = (
                await self._session.execute(
                    select(
                        ChunkCopy.bot_id,
                        ChunkCopy.chat_id,
                        ChunkCopy.message_id,
                        ChunkCopy.file_unique_id,
                        ChunkCopy.created_at,
                    )
                    .where(ChunkCopy.chunk_id.in_(batch))
                    .order_by(ChunkCopy.id)
                )
            ).all()
            if copies:
                await self._session.execute(
                    insert(GcEntry), [ledger_values(*copy, reason, now) for copy in copies]
                )
        for batch in batches([c.id for c in chunks]):
            await self._session.execute(
                delete(Chunk)
                .where(Chunk.id.in_(batch))
                .execution_options(synchronize_session=False)
            )
        for chunk in chunks:
            self._session.expunge(chunk)
        return len(chunks)
