"""The SQL of metadata snapshots: every row a restored service needs, read
out as JSON-ready dicts and loaded back into an empty database; the
snapshots' own messages; the lease that lets one instance write at a time.

What is left out is what a restore has no use for: the GC ledger and send
intents (the old database's unfinished business), instances and leases,
spooled and half-done uploads (their bytes were on the lost machine), web
sessions (everyone signs in again), share links' download sessions and
wrong passwords (their shares are kept).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    LargeBinary,
    Table,
    TypeDecorator,
    and_,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.locking import batches, lock_database_for_write
from app.db.models import (
    ApiKey,
    Base,
    Bucket,
    ChatWatermark,
    Chunk,
    ChunkCopy,
    GcEntry,
    Instance,
    Piece,
    SnapshotLease,
    SnapshotMessage,
    StoredObject,
)
from app.db.pending_filter import pending_object
from app.db.types import utcnow

# In the order a load needs: every row after the rows it references.
SNAPSHOT_TABLES: tuple[str, ...] = (
    "buckets",
    "api_keys",
    "chunks",
    "chunk_copies",
    "objects",
    "pieces",
    "trash",
    "shares",
    # How far each chat is known reconciled: restored (and marked unclean),
    # reconciliation covers what the lost database knew and the snapshot
    # does not, from there to the chat's newest message.
    "chat_watermarks",
    "snapshot_messages",
)
# A restore refuses a database holding any of these rows.
_CONTENT = (StoredObject, Chunk, ApiKey, Bucket)
# Rows a snapshot reads at a time: each batch holds the event loop while the
# driver and the column types make its rows (2,000 made requests beside a
# snapshot wait up to 5x their usual p99; bench/snapshot_writers_bench.py).
_READ_BATCH = 500
_LEASE_NAME = "snapshot"


def table_of(name: str) -> Table:
    return Base.metadata.tables[name]


def _python_type(table: Table, column: str) -> type | None:
    """bytes or datetime for the columns whose JSON form differs; else None."""
    kind = table.c[column].type
    if isinstance(kind, TypeDecorator):
        kind = kind.impl_instance
    if isinstance(kind, LargeBinary):
        return bytes
    if isinstance(kind, DateTime):
        return datetime
    return None


def encode_rows(name: str, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the table `name` as JSON values (see `encode_row`)."""
    table = table_of(name)
    return [encode_row(table, row) for row in rows]


def encode_row(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON values: bytes as base64, times as ISO 8601 text."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, bytes | bytearray | memoryview):
            value = base64.b64encode(bytes(value)).decode("ascii")
        elif isinstance(value, datetime):
            value = value.isoformat()
        out[name] = value
    return out


def decode_row(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `encode_row`, guided by the columns' types."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name not in table.c:
            continue  # a column a later schema dropped
        kind = _python_type(table, name)
        if value is not None and kind is bytes:
            value = base64.b64decode(value)
        elif value is not None and kind is datetime:
            value = datetime.fromisoformat(value)
        out[name] = value
    return out


async def dump_rows(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Every snapshot table's rows, in batches of (table name, rows; for
    `encode_rows`),
    all read in one transaction: one consistent view (SQLite's BEGIN gives
    it; Postgres needs REPEATABLE READ)."""
    async with sessionmaker() as session:
        if session.get_bind().dialect.name == "postgresql":
            await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        for name in SNAPSHOT_TABLES:
            table = table_of(name)
            order = list(table.primary_key.columns)
            query = select(table)
            if (left_out := settled_only(table)) is not None:
                query = query.where(left_out)
            result = await session.stream(query.order_by(*order))
            async for partition in result.mappings().partitions(_READ_BATCH):
                yield name, [dict(row) for row in partition]


def settled_only(table: Table) -> ColumnElement[bool] | None:
    """The condition that leaves pending objects (app.db.pending) out of a
    copy of the table's rows: their bytes are in one instance's spool, not
    in Telegram, so restored they could not be read. None: the table holds
    no object rows. For snapshots and the journal alike."""
    if table.name == "objects":
        return ~pending_object(table.c.id)
    if table.name == "trash":
        return ~pending_object(table.c.object_id)
    return None


async def is_empty(session: AsyncSession) -> bool:
    """Whether the database holds no object, chunk, key or bucket."""
    for model in _CONTENT:
        if await session.scalar(select(func.count()).select_from(model)):
            return False
    return True


async def load_rows(session: AsyncSession, name: str, rows: Sequence[dict[str, Any]]) -> int:
    """Insert encoded rows of the table `name`, ids kept; how many."""
    if name not in SNAPSHOT_TABLES:
        raise ValueError(f"a snapshot holds no table {name!r}")
    table = table_of(name)
    decoded = [decode_row(table, row) for row in rows]
    for batch in batches(decoded, _READ_BATCH):
        await session.execute(insert(table), list(batch))
    return len(decoded)


async def unreferenced_chunks(session: AsyncSession) -> list[int]:
    """The ids of chunks no piece references: in a restored database, those
    of objects that were pending (left out of snapshots and the journal) and
    of unfinished uploads (not restored). Nothing else will ever release them."""
    found = await session.scalars(
        select(Chunk.id).where(~exists().where(Piece.chunk_id == Chunk.id)).order_by(Chunk.id)
    )
    return list(found)


async def restored_chats(session: AsyncSession) -> list[int]:
    """The chats whose watermarks a restore loaded."""
    return list(await session.scalars(select(ChatWatermark.chat_id)))


async def reset_id_sequences(session: AsyncSession) -> None:
    """After ids were inserted as they were: new rows take ids above them
    (Postgres sequences do not follow explicit ids; SQLite's AUTOINCREMENT does)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for name in SNAPSHOT_TABLES:
        if "id" not in table_of(name).c:
            continue
        await session.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                f"COALESCE((SELECT MAX(id) FROM {name}), 0) + 1, false)"
            )
        )


@dataclass(frozen=True, slots=True)
class SnapshotMessageSpec:
    kind: str  # "piece", "manifest" or "journal"
    bot_id: int
    chat_id: int
    message_id: int
    file_unique_id: str
    detail: str | None = None  # a journal batch's (app/db/journal.py)
    pinned_at: datetime | None = None  # a manifest's, once pinned (a restore's are)


def manifest_detail(sealing: dict[str, Any] | None) -> str:
    """A manifest row's detail: the master key its snapshot is sealed under
    (null: plaintext), which a restore needs (`seal_use`)."""
    return json.dumps({"key_id": sealing["key_id"] if sealing else None})


@dataclass(frozen=True, slots=True)
class SealUse:
    """The master keys a restore needs now: the pinned snapshot's and its
    journal batches'. A key id None is plaintext."""

    taken_at: datetime
    snapshot_key: str | None
    snapshot_key_known: bool  # False: recorded before the key was (it may be any)
    batch_keys: dict[str | None, int]

    def needs(self, key_id: str) -> bool:
        return (
            not self.snapshot_key_known or self.snapshot_key == key_id or key_id in self.batch_keys
        )


async def seal_use(session: AsyncSession) -> SealUse | None:
    """What the newest pinned snapshot and its journal batches are sealed
    under; None: no snapshot is pinned."""
    taken_at = await session.scalar(
        select(func.max(SnapshotMessage.taken_at)).where(
            SnapshotMessage.kind == "manifest", SnapshotMessage.pinned_at.is_not(None)
        )
    )
    if taken_at is None:
        return None
    rows = await session.execute(
        select(SnapshotMessage.kind, SnapshotMessage.detail).where(
            SnapshotMessage.taken_at == taken_at,
            SnapshotMessage.kind.in_(("manifest", "journal")),
        )
    )
    snapshot_key: str | None = None
    known = False
    batches_seen: dict[int, str | None] = {}
    for kind, detail in rows.all():
        found = json.loads(detail) if detail else None
        if kind == "manifest":
            if isinstance(found, dict) and "key_id" in found:
                snapshot_key, known = found["key_id"], True
        elif isinstance(found, dict):
            sealing = found.get("sealing") or {}
            batches_seen[int(found["seq"])] = sealing.get("key_id")
    batch_keys: dict[str | None, int] = {}
    for key_id in batches_seen.values():
        batch_keys[key_id] = batch_keys.get(key_id, 0) + 1
    return SealUse(taken_at, snapshot_key, known, batch_keys)


async def sample_copies(session: AsyncSession, count: int) -> list[tuple[int, str]]:
    """(bot id, file id) of up to `count` chunk copies picked at random by
    the database (both backends have random()), not by reading them all."""
    rows = await session.execute(
        select(ChunkCopy.bot_id, ChunkCopy.file_id).order_by(func.random()).limit(count)
    )
    return [(bot_id, file_id) for bot_id, file_id in rows.all()]


async def record_messages(
    session: AsyncSession, taken_at: datetime, messages: Iterable[SnapshotMessageSpec]
) -> None:
    rows = [
        {
            "taken_at": taken_at,
            "kind": m.kind,
            "bot_id": m.bot_id,
            "chat_id": m.chat_id,
            "message_id": m.message_id,
            "file_unique_id": m.file_unique_id,
            "detail": m.detail,
            "pinned_at": m.pinned_at,
            # Recorded once Telegram answered its post: posted by now.
            "posted_at": utcnow(),
        }
        for m in messages
    ]
    if rows:
        await session.execute(insert(SnapshotMessage), rows)


async def mark_pinned(session: AsyncSession, taken_at: datetime) -> None:
    """The snapshot taken at `taken_at` is pinned in every chat it went to."""
    await session.execute(
        update(SnapshotMessage)
        .where(SnapshotMessage.taken_at == taken_at, SnapshotMessage.kind == "manifest")
        .values(pinned_at=utcnow())
    )


async def prune(session: AsyncSession, keep: int) -> int:
    """Ledger the messages of every snapshot older than the newest `keep`
    pinned ones (a snapshot cut off before its pin among them) and forget
    them; how many messages went to the GC ledger."""
    # It reads, then writes: on SQLite, an upload committing in between
    # would make the writes fail at once (a stale view), and the snapshot
    # with them.
    await lock_database_for_write(session)
    kept = (
        select(SnapshotMessage.taken_at)
        .where(SnapshotMessage.kind == "manifest", SnapshotMessage.pinned_at.is_not(None))
        .distinct()
        .order_by(SnapshotMessage.taken_at.desc())
        .limit(keep)
    )
    newest = [t for t in await session.scalars(kept)]
    if len(newest) < keep:
        return 0
    cutoff = min(newest)
    old = list(
        await session.scalars(select(SnapshotMessage).where(SnapshotMessage.taken_at < cutoff))
    )
    now = utcnow()
    for message in old:
        session.add(
            GcEntry(
                bot_id=message.bot_id,
                chat_id=message.chat_id,
                message_id=message.message_id,
                file_unique_id=message.file_unique_id,
                reason="deleted",
                enqueued_at=now,
                attempts=0,
                next_attempt_at=now,
                posted_at=message.posted_at,
            )
        )
    await session.execute(delete(SnapshotMessage).where(SnapshotMessage.taken_at < cutoff))
    return len(old)


async def take_lease(session: AsyncSession, holder: str, until: datetime) -> bool:
    """Whether `holder` now writes snapshots until `until`: the lease was
    free, expired, its own, or held by an instance that has no row (it
    stopped, or died and was claimed: its 30 minutes would stop the journal
    for nothing). One conditional UPDATE, so two instances cannot both win."""
    now = utcnow()
    result = await session.execute(
        update(SnapshotLease)
        .where(
            SnapshotLease.name == _LEASE_NAME,
            or_(
                SnapshotLease.holder.is_(None),
                SnapshotLease.holder == holder,
                and_(SnapshotLease.until.is_not(None), SnapshotLease.until < now),
                ~exists().where(Instance.id == SnapshotLease.holder),
            ),
        )
        .values(holder=holder, until=until)
    )
    if getattr(result, "rowcount", 0):
        return True
    if await session.get(SnapshotLease, _LEASE_NAME) is not None:
        return False
    # The row the migration seeds is gone (tables emptied by hand): put it
    # back. Two instances doing so at once: one insert fails, its round too.
    session.add(SnapshotLease(name=_LEASE_NAME, holder=holder, until=until))
    await session.flush()
    return True


async def release_lease(session: AsyncSession, holder: str) -> None:
    await session.execute(
        update(SnapshotLease)
        .where(SnapshotLease.name == _LEASE_NAME, SnapshotLease.holder == holder)
        .values(holder=None, until=None)
    )


async def forget_messages(session: AsyncSession, taken_at: datetime) -> None:
    """Drop the rows of a snapshot that failed (its messages are ledgered)."""
    await session.execute(delete(SnapshotMessage).where(SnapshotMessage.taken_at == taken_at))
