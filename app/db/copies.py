"""A chunk's copies after they were stored: found missing or corrupt, checked,
repaired, counted.

Every change to a copy's state keeps `chunks.copies_ok` (the intact copies)
and `chunks.lost_at` (none left) in step, in the same transaction. A bad
copy keeps its row until a repair has stored another: the last evidence of
a chunk is never dropped, and a copy Telegram only had "temporarily
unavailable" may turn out intact at the next check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    delete,
    distinct,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.chunks import PostedDocument, copy_values, ledger_values
from app.db.locking import batches, lock_database_for_write
from app.db.models import Chunk, ChunkCopy, GcEntry, Piece
from app.db.types import utcnow

BadState = Literal["missing", "corrupt"]


@dataclass(frozen=True, slots=True)
class CopyRow:
    """Where one copy of a chunk lives."""

    id: int
    bot_id: int
    file_id: str
    chat_id: int
    message_id: int
    state: str
    # A sealed chunk's copy: the salt of its copy key.
    salt: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk as a read needs it: what its bytes must hash to, and its copies
    (intact ones first, oldest first)."""

    id: int
    size: int
    sha256: str
    block_hashes: bytes | None
    lost: bool
    copies: tuple[CopyRow, ...]
    # Which digest `block_hashes` are (None: SHA-256; app/store/blocks.py).
    block_digest: str | None = None
    # Sealed: the master key id and the wrapped data key (None: plaintext).
    seal_key_id: str | None = None
    sealed_data_key: bytes | None = None


@dataclass(frozen=True, slots=True)
class ShortChunk:
    """A chunk short of intact copies, where the repairs' order has it."""

    copies_ok: int
    id: int
    # Since when it has had no intact copy (None: it has some).
    lost_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Health:
    """How the stored chunks and the objects made of them stand."""

    copies: int
    chunks_degraded: int  # fewer intact copies than wanted, at least one
    chunks_lost: int  # no intact copy
    objects_degraded: int
    objects_lost: int
    # When the copy (of a live chunk) checked longest ago was last checked,
    # or stored if never; None: no copy.
    oldest_check: datetime | None = None


_COPY_COLUMNS = (
    ChunkCopy.id,
    ChunkCopy.bot_id,
    ChunkCopy.file_id,
    ChunkCopy.chat_id,
    ChunkCopy.message_id,
    ChunkCopy.state,
    ChunkCopy.seal_salt,
)
_LEDGER_COLUMNS = (
    ChunkCopy.bot_id,
    ChunkCopy.chat_id,
    ChunkCopy.message_id,
    ChunkCopy.file_unique_id,
)
# Intact copies first, then the oldest.
_PREFERRED = (case((ChunkCopy.state == "ok", 0), else_=1), ChunkCopy.id)


def _copy_row(row: Sequence[Any]) -> CopyRow:
    copy_id, bot_id, file_id, chat_id, message_id, state, salt = row
    return CopyRow(
        int(copy_id), int(bot_id), str(file_id), int(chat_id), int(message_id), str(state), salt
    )


class CopyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    # --- reading ------------------------------------------------------------------

    async def chunks(self, chunk_ids: Iterable[int]) -> dict[int, ChunkRow]:
        """The chunks `chunk_ids` (those that exist) with their copies."""
        ids = sorted(set(chunk_ids))
        found: dict[int, ChunkRow] = {}
        for batch in batches(ids):
            copies: dict[int, list[CopyRow]] = {}
            rows = await self._session.execute(
                select(ChunkCopy.chunk_id, *_COPY_COLUMNS)
                .where(ChunkCopy.chunk_id.in_(batch))
                .order_by(ChunkCopy.chunk_id, *_PREFERRED)
            )
            for chunk_id, *copy in rows:
                copies.setdefault(chunk_id, []).append(_copy_row(copy))
            chunks = await self._session.execute(
                select(
                    Chunk.id,
                    Chunk.size,
                    Chunk.sha256,
                    Chunk.block_hashes,
                    Chunk.block_digest,
                    Chunk.lost_at,
                    Chunk.seal_key_id,
                    Chunk.sealed_data_key,
                ).where(Chunk.id.in_(batch))
            )
            for chunk_id, size, sha256, block_hashes, digest, lost_at, key_id, wrapped in chunks:
                found[chunk_id] = ChunkRow(
                    id=chunk_id,
                    size=size,
                    sha256=sha256,
                    block_hashes=block_hashes,
                    block_digest=digest,
                    lost=lost_at is not None,
                    copies=tuple(copies.get(chunk_id, ())),
                    seal_key_id=key_id,
                    sealed_data_key=wrapped,
                )
        return found

    async def due_for_check(self, limit: int, *, not_by: Iterable[int] = ()) -> list[int]:
        """The copies of live chunks checked longest ago (never checked
        first), but those uploaded by the bots `not_by`."""
        query = (
            select(ChunkCopy.id)
            .join(Chunk, Chunk.id == ChunkCopy.chunk_id)
            .where(Chunk.state == "live")
            .order_by(ChunkCopy.checked_at.is_not(None), ChunkCopy.checked_at, ChunkCopy.id)
            .limit(limit)
        )
        if skipped := list(not_by):
            query = query.where(ChunkCopy.bot_id.not_in(skipped))
        return list(await self._session.scalars(query))

    async def copy_ids(self, after: int, limit: int, *, not_by: Iterable[int] = ()) -> list[int]:
        """Copies of live chunks in id order, after `after` (a full pass)."""
        query = (
            select(ChunkCopy.id)
            .join(Chunk, Chunk.id == ChunkCopy.chunk_id)
            .where(Chunk.state == "live", ChunkCopy.id > after)
            .order_by(ChunkCopy.id)
            .limit(limit)
        )
        if skipped := list(not_by):
            query = query.where(ChunkCopy.bot_id.not_in(skipped))
        return list(await self._session.scalars(query))

    async def needing_repair(
        self,
        replicas: int,
        limit: int,
        *,
        after: ShortChunk | None = None,
        key_ids: Iterable[str] = (),
    ) -> list[ShortChunk]:
        """Live chunks with fewer intact copies than `replicas`, fewest first,
        past `after` (the last of the page before): a cursor, so that those
        whose repair fails do not hold the others back. Lost ones too (a
        copy taken for bad may be read after all). Not the sealed ones whose
        data key cannot be opened here: under a customer key (SSE-C: never
        kept) or a master key not among `key_ids`."""
        query = select(Chunk.copies_ok, Chunk.id, Chunk.lost_at).where(
            Chunk.state == "live",
            Chunk.copies_ok < replicas,
            or_(Chunk.seal_key_id.is_(None), Chunk.seal_key_id.in_(sorted(set(key_ids)))),
        )
        if after is not None:
            query = query.where(
                or_(
                    Chunk.copies_ok > after.copies_ok,
                    and_(Chunk.copies_ok == after.copies_ok, Chunk.id > after.id),
                )
            )
        rows = await self._session.execute(query.order_by(Chunk.copies_ok, Chunk.id).limit(limit))
        return [ShortChunk(int(ok), int(chunk_id), lost_at) for ok, chunk_id, lost_at in rows]

    async def lost_since(self, chunk_id: int) -> datetime | None:
        """Since when the chunk has had no intact copy (None: it has one, or
        it is gone)."""
        lost_at: datetime | None = await self._session.scalar(
            select(Chunk.lost_at).where(Chunk.id == chunk_id)
        )
        return lost_at

    async def copy(self, copy_id: int) -> tuple[int, CopyRow] | None:
        """A copy and its chunk's id; None if it is gone."""
        row = (
            await self._session.execute(
                select(ChunkCopy.chunk_id, *_COPY_COLUMNS).where(ChunkCopy.id == copy_id)
            )
        ).first()
        if row is None:
            return None
        chunk_id, *copy = row
        return int(chunk_id), _copy_row(copy)

    async def health(self, replicas: int) -> Health:
        copies = await self._session.scalar(select(func.count()).select_from(ChunkCopy))
        lost = Chunk.copies_ok == 0
        degraded = and_(Chunk.copies_ok > 0, Chunk.copies_ok < replicas)
        live = Chunk.state == "live"
        chunks_lost = await self._session.scalar(
            select(func.count()).select_from(Chunk).where(live, lost)
        )
        chunks_degraded = await self._session.scalar(
            select(func.count()).select_from(Chunk).where(live, degraded)
        )
        objects_lost = await self._session.scalar(
            select(func.count(distinct(Piece.object_id)))
            .join(Chunk, Chunk.id == Piece.chunk_id)
            .where(lost)
        )
        # An object with a lost chunk counts as lost only.
        lost_objects = select(Piece.object_id).join(Chunk, Chunk.id == Piece.chunk_id).where(lost)
        objects_degraded = await self._session.scalar(
            select(func.count(distinct(Piece.object_id)))
            .join(Chunk, Chunk.id == Piece.chunk_id)
            .where(degraded, Piece.object_id.not_in(lost_objects))
        )
        oldest_check = await self._session.scalar(
            select(func.min(func.coalesce(ChunkCopy.checked_at, ChunkCopy.created_at)))
            .join(Chunk, Chunk.id == ChunkCopy.chunk_id)
            .where(live)
        )
        return Health(
            copies=int(copies or 0),
            chunks_degraded=int(chunks_degraded or 0),
            chunks_lost=int(chunks_lost or 0),
            objects_degraded=int(objects_degraded or 0),
            objects_lost=int(objects_lost or 0),
            oldest_check=oldest_check,
        )

    async def object_damage(self, object_id: int, replicas: int) -> str | None:
        """'lost' when a chunk of the object has no intact copy, 'degraded'
        when one has fewer than `replicas`, None when every chunk is whole."""
        fewest = await self._session.scalar(
            select(func.min(Chunk.copies_ok))
            .join(Piece, Piece.chunk_id == Chunk.id)
            .where(Piece.object_id == object_id)
        )
        if fewest is None or fewest >= replicas:
            return None
        return "lost" if fewest == 0 else "degraded"

    # --- writing ------------------------------------------------------------------

    async def mark_bad(self, copy_id: int, state: BadState) -> bool:
        """The copy is missing or corrupt; True if it was counted intact until
        now (the chunk lost one). A chunk left with no intact copy is lost.

        Each state change is conditional on the state it changes, and only
        the one that matched counts: two sessions reporting one copy at once
        (two pieces of one read) count it once. On Postgres the second waits
        for the first's row lock, then finds the copy bad already."""
        await lock_database_for_write(self._session)
        now = utcnow()
        while True:
            chunk_id = await self._set_state(copy_id, ChunkCopy.state == "ok", state, now)
            if chunk_id is not None:
                await self._count(chunk_id, -1)
                return True
            if await self._set_state(copy_id, ChunkCopy.state != "ok", state, now) is not None:
                return False  # bad already (now corrupt, maybe): no second count
            # Neither: gone, or found intact again between the two statements.
            if await self.copy(copy_id) is None:
                return False

    async def mark_checked(self, copy_id: int, *, verified: bool = False) -> None:
        """Telegram holds the copy (and, `verified`, its bytes are right): an
        intact copy again if it had been taken for a bad one.

        Conditional as `mark_bad`: two repairs finding one copy whole again
        count it once, not as two intact copies."""
        await lock_database_for_write(self._session)
        now = utcnow()
        values: dict[str, object] = {"checked_at": now}
        if verified:
            values["verified_at"] = now
        # Present is not enough for a copy known to hold wrong bytes.
        revivable = ChunkCopy.state != "ok" if verified else ChunkCopy.state == "missing"
        chunk_id = await self._session.scalar(
            update(ChunkCopy)
            .where(ChunkCopy.id == copy_id, revivable)
            .values(state="ok", **values)
            .returning(ChunkCopy.chunk_id)
            .execution_options(synchronize_session=False)
        )
        if chunk_id is not None:
            await self._count(chunk_id, +1)
            return
        # The state is set only when it changes: a check that changes
        # nothing else keeps the journal's triggers quiet (migration 0019).
        await self._session.execute(
            update(ChunkCopy)
            .where(ChunkCopy.id == copy_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )

    async def add_copy(
        self, chunk_id: int, document: PostedDocument, *, at_most: int, salt: bytes | None = None
    ) -> int | None:
        """A new intact copy of the chunk (a repair, or a replica more); its
        id, or None if the chunk is gone or has `at_most` intact copies
        already (another repair was quicker): the caller ledgers the
        document."""
        await lock_database_for_write(self._session)
        copies_ok = await self._session.scalar(
            select(Chunk.copies_ok).where(Chunk.id == chunk_id).with_for_update()
        )
        if copies_ok is None or copies_ok >= at_most:
            return None
        now = utcnow()
        values = copy_values(chunk_id, document, now, salt)
        values["checked_at"] = values["verified_at"] = now
        copy_id = await self._session.scalar(
            insert(ChunkCopy).values(**values).returning(ChunkCopy.id)
        )
        await self._count(chunk_id, +1)
        assert copy_id is not None
        return int(copy_id)

    async def retire_bad(self, chunk_id: int, keep: int) -> int:
        """Ledger and forget the chunk's bad copies once it has `keep` intact
        ones ('damaged'); returns how many went."""
        await lock_database_for_write(self._session)
        copies_ok = await self._session.scalar(
            select(Chunk.copies_ok).where(Chunk.id == chunk_id).with_for_update()
        )
        if copies_ok is None or copies_ok < keep:
            return 0
        bad = (
            await self._session.execute(
                select(
                    ChunkCopy.id,
                    ChunkCopy.bot_id,
                    ChunkCopy.chat_id,
                    ChunkCopy.message_id,
                    ChunkCopy.file_unique_id,
                    ChunkCopy.created_at,
                ).where(ChunkCopy.chunk_id == chunk_id, ChunkCopy.state != "ok")
            )
        ).all()
        if not bad:
            return 0
        now = utcnow()
        await self._session.execute(
            insert(GcEntry),
            [
                ledger_values(bot, chat, message, unique, posted, "damaged", now)
                for _, bot, chat, message, unique, posted in bad
            ],
        )
        await self._session.execute(
            delete(ChunkCopy)
            .where(ChunkCopy.id.in_([row[0] for row in bad]))
            .execution_options(synchronize_session=False)
        )
        return len(bad)

    async def set_block_hashes(self, chunk_id: int, block_hashes: bytes, sha256: str) -> None:
        """A chunk stored before verified reads, read whole and found right:
        its block hashes from now on (and the hash of them, as new chunks have)."""
        await self._session.execute(
            update(Chunk)
            .where(Chunk.id == chunk_id, Chunk.block_hashes.is_(None))
            .values(block_hashes=block_hashes, sha256=sha256, block_digest=None)
            .execution_options(synchronize_session=False)
        )

    async def _set_state(
        self, copy_id: int, condition: ColumnElement[bool], state: BadState, now: datetime
    ) -> int | None:
        """Set the copy's state if `condition` holds; its chunk's id if it did."""
        chunk_id = await self._session.scalar(
            update(ChunkCopy)
            .where(ChunkCopy.id == copy_id, condition)
            .values(state=state, checked_at=now)
            .returning(ChunkCopy.chunk_id)
            .execution_options(synchronize_session=False)
        )
        return None if chunk_id is None else int(chunk_id)

    async def _count(self, chunk_id: int, change: int) -> None:
        """copies_ok += change; lost_at set when it reaches 0, cleared above."""
        copies_ok = Chunk.copies_ok + change
        await self._session.execute(
            update(Chunk)
            .where(Chunk.id == chunk_id)
            .values(
                copies_ok=copies_ok,
                lost_at=case((copies_ok <= 0, func.coalesce(Chunk.lost_at, utcnow())), else_=None),
            )
            .execution_options(synchronize_session=False)
        )
