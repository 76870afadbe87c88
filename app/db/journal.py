"""The SQL of the journal: the rows the triggers of migration 0019 write (which
row of which table changed), read in batches and deleted once shipped; the
current state of the rows they name, encoded as a snapshot encodes rows
(one rule decides what a snapshot and a batch hold); a batch applied to a
restored database; the journal batches of the pinned snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, delete, func, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.locking import batches
from app.db.models import JournalEntry, SnapshotMessage
from app.db.snapshots import SNAPSHOT_TABLES, decode_row, encode_row, settled_only, table_of

# Every table a snapshot carries but its own messages (a restore records
# those itself) and the chats' watermarks (no trigger: a restore wants the
# snapshot's, older, so that reconciliation covers the lost window), in the
# order inserts need: parents first.
JOURNAL_TABLES: tuple[str, ...] = tuple(
    t for t in SNAPSHOT_TABLES if t not in ("snapshot_messages", "chat_watermarks")
)
_IN_BATCH = 500  # keys in one IN (...) list
KIND = "journal"  # snapshot_messages.kind of a journal batch

Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Pending:
    """Journal rows read for one batch: their ids (deleted once shipped) and
    the keys they name, per table."""

    ids: list[int]
    keys: dict[str, set[Key]]


@dataclass(frozen=True, slots=True)
class TableChanges:
    """One table's part of a batch: rows as they are now (encoded), and the
    keys of rows that are gone."""

    table: str
    rows: list[dict[str, Any]]
    deleted: list[Key]


@dataclass(frozen=True, slots=True)
class Manifest:
    """A pinned snapshot manifest's message, in one chat."""

    bot_id: int
    chat_id: int
    message_id: int


def _key_columns(table: Table) -> list[Any]:
    return list(table.primary_key.columns)


def _key_of(table: Table, row: dict[str, Any]) -> Key:
    return tuple(row[column.name] for column in _key_columns(table))


def _matching(table: Table, keys: Sequence[Key]) -> Any:
    columns = _key_columns(table)
    if len(columns) == 1:
        return columns[0].in_([key[0] for key in keys])
    return tuple_(*columns).in_([tuple(key) for key in keys])


async def pending(session: AsyncSession, limit: int) -> Pending:
    """The oldest `limit` journal rows. A row that commits late (a Postgres
    id taken before an earlier-numbered one committed) is read next time:
    shipped rows are deleted by id, never by a high-water mark."""
    rows = await session.execute(
        select(JournalEntry.id, JournalEntry.table_name, JournalEntry.row_key)
        .order_by(JournalEntry.id)
        .limit(limit)
    )
    ids: list[int] = []
    keys: dict[str, set[Key]] = {}
    for entry_id, table_name, row_key in rows.all():
        ids.append(entry_id)
        keys.setdefault(table_name, set()).add(tuple(json.loads(row_key)))
    return Pending(ids, keys)


async def count_pending(session: AsyncSession) -> int:
    return int(await session.scalar(select(func.count()).select_from(JournalEntry)) or 0)


async def newest_id(session: AsyncSession) -> int:
    """The id of the newest journal row (0: none)."""
    return int(await session.scalar(select(func.max(JournalEntry.id))) or 0)


async def forget_through(session: AsyncSession, last_id: int) -> int:
    """Delete the journal rows up to id `last_id`; how many."""
    result = await session.execute(delete(JournalEntry).where(JournalEntry.id <= last_id))
    return int(getattr(result, "rowcount", 0) or 0)


async def forget(session: AsyncSession, ids: Iterable[int]) -> None:
    """Delete shipped journal rows, by id."""
    for batch in batches(list(ids), _IN_BATCH):
        await session.execute(delete(JournalEntry).where(JournalEntry.id.in_(batch)))


async def current_state(
    sessionmaker: async_sessionmaker[AsyncSession], keys: dict[str, set[Key]]
) -> list[TableChanges]:
    """Each named row as it is now (absent: deleted), in JOURNAL_TABLES
    order, all read in one transaction: one consistent view of them."""
    out: list[TableChanges] = []
    async with sessionmaker() as session:
        if session.get_bind().dialect.name == "postgresql":
            await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        for name in JOURNAL_TABLES:
            wanted = keys.get(name)
            if not wanted:
                continue
            table = table_of(name)
            found: dict[Key, dict[str, Any]] = {}
            for batch in batches(sorted(wanted, key=repr), _IN_BATCH):
                query = select(table).where(_matching(table, batch))
                if (settled := settled_only(table)) is not None:
                    query = query.where(settled)  # a pending object ships when it settles
                result = await session.execute(query)
                for row in result.mappings():
                    found[_key_of(table, dict(row))] = dict(row)
            rows = [encode_row(table, found[key]) for key in sorted(found, key=repr)]
            gone = sorted((key for key in wanted if key not in found), key=repr)
            out.append(TableChanges(name, rows, gone))
    return out


async def apply(session: AsyncSession, changes: Sequence[TableChanges]) -> tuple[int, int]:
    """Apply a batch to a restored database: deletes children first, then
    upserts parents first, ids kept; (rows upserted, rows deleted).

    An upsert updates a row that is there rather than deleting and inserting
    it: deleting an object or a chunk would take its pieces, trash entries
    or copies with it (ON DELETE CASCADE), and the batch holds only the rows
    that changed."""
    by_table = {change.table: change for change in changes}
    unknown = set(by_table) - set(JOURNAL_TABLES)
    if unknown:
        raise ValueError(f"a journal batch holds no table {sorted(unknown)!r}")
    deleted = upserted = 0
    for name in reversed(JOURNAL_TABLES):
        change = by_table.get(name)
        if change is None or not change.deleted:
            continue
        table = table_of(name)
        for batch in batches([tuple(key) for key in change.deleted], _IN_BATCH):
            await session.execute(delete(table).where(_matching(table, batch)))
        deleted += len(change.deleted)
    for name in JOURNAL_TABLES:
        change = by_table.get(name)
        if change is None or not change.rows:
            continue
        upserted += await _upsert(session, table_of(name), change.rows)
    return upserted, deleted


async def _upsert(session: AsyncSession, table: Table, encoded: list[dict[str, Any]]) -> int:
    rows = [decode_row(table, row) for row in encoded]
    keys = [_key_of(table, row) for row in rows]
    present: set[Key] = set()
    for batch in batches(keys, _IN_BATCH):
        result = await session.execute(select(*_key_columns(table)).where(_matching(table, batch)))
        present.update(tuple(found) for found in result.all())
    updates = [row for row, key in zip(rows, keys, strict=True) if key in present]
    inserts = [row for row, key in zip(rows, keys, strict=True) if key not in present]
    connection = await session.connection()
    if table.name == "objects":
        await _park_objects(connection, table, rows, updates)
    if updates:
        # Keys as "_key_<column>" parameters: the other names set the columns.
        where = [column == bindparam(f"_key_{column.name}") for column in _key_columns(table)]
        statement = update(table).where(*where)
        params = [
            {**row, **{f"_key_{c.name}": row[c.name] for c in _key_columns(table)}}
            for row in updates
        ]
        for chunk in batches(params, _IN_BATCH):
            await connection.execute(statement, list(chunk))
    for chunk in batches(inserts, _IN_BATCH):
        await connection.execute(table.insert(), list(chunk))
    return len(rows)


# Where an object row waits while a batch moves names between rows: a bucket
# of the service's own ("_" first, no bucket row), its key and public id
# made of its id, so no two parked rows collide.
PARKED_BUCKET = "_parked"


async def _park_objects(
    connection: Any, table: Table, rows: list[dict[str, Any]], updates: list[dict[str, Any]]
) -> None:
    """Free every (bucket, key) and public id that the batch's object rows
    take, before any takes one: park, then place. A batch can move a key
    from one row to another (delete the live version, restore the old one
    from the trash: docs/trash.md), and row by row the first to take it would
    find the other still holding it. A row outside the batch that holds one
    (its own change shipped in a later batch) is parked too: the next batch
    places it."""
    ids = {row["id"] for row in updates}
    names = [(row["bucket"], row["key"]) for row in rows if "bucket" in row and "key" in row]
    public_ids = [row["public_id"] for row in rows if row.get("public_id") is not None]
    inserted = {row["id"] for row in rows} - ids
    for batch in batches(names, _IN_BATCH):
        found = await connection.execute(
            select(table.c.id).where(tuple_(table.c.bucket, table.c.key).in_(batch))
        )
        ids.update(found_id for (found_id,) in found.all() if found_id not in inserted)
    for batch in batches(public_ids, _IN_BATCH):
        found = await connection.execute(select(table.c.id).where(table.c.public_id.in_(batch)))
        ids.update(found_id for (found_id,) in found.all() if found_id not in inserted)
    if not ids:
        return
    statement = (
        update(table)
        .where(table.c.id == bindparam("_park_id"))
        .values(
            bucket=PARKED_BUCKET, key=bindparam("_park_key"), public_id=bindparam("_park_public")
        )
    )
    params = [
        {"_park_id": i, "_park_key": f"{i:020d}", "_park_public": f"{PARKED_BUCKET}{i}"}
        for i in sorted(ids)
    ]
    for chunk in batches(params, _IN_BATCH):
        await connection.execute(statement, list(chunk))


async def pinned_snapshot(session: AsyncSession) -> tuple[datetime, list[Manifest]] | None:
    """The newest snapshot whose pin stands (`pinned_at`), with its manifest
    message in each chat. Not merely the newest recorded: one cut off between
    recording its manifests and pinning them (a kill at a stop) is one a
    restore never finds, and batches chained onto it would be lost."""
    taken_at = await session.scalar(
        select(func.max(SnapshotMessage.taken_at)).where(
            SnapshotMessage.kind == "manifest", SnapshotMessage.pinned_at.is_not(None)
        )
    )
    if taken_at is None:
        return None
    rows = await session.execute(
        select(SnapshotMessage.bot_id, SnapshotMessage.chat_id, SnapshotMessage.message_id)
        .where(SnapshotMessage.kind == "manifest", SnapshotMessage.taken_at == taken_at)
        .order_by(SnapshotMessage.chat_id)
    )
    return taken_at, [Manifest(*row) for row in rows.all()]


async def batch_details(session: AsyncSession, taken_at: datetime) -> list[dict[str, Any]]:
    """The recorded details (JSON) of the snapshot's journal batches, one
    per message, oldest first."""
    details = await session.scalars(
        select(SnapshotMessage.detail)
        .where(SnapshotMessage.kind == KIND, SnapshotMessage.taken_at == taken_at)
        .order_by(SnapshotMessage.id)
    )
    return [json.loads(detail) for detail in details if detail]
