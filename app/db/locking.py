"""Making read-then-write transactions safe on both backends.

Postgres: row locks (SELECT ... FOR UPDATE / FOR SHARE) and, per object key
and per part number of a multipart upload, an advisory lock; all
transaction-scoped, so they work through pgbouncer's transaction pooling
(session-level locks would not).

SQLite ignores FOR UPDATE: it has one lock for the whole database. A
transaction that reads first and writes later is refused (SQLITE_BUSY, without
waiting) if another connection wrote in between, because its snapshot is
stale. Taking the write lock before reading makes concurrent writers queue on
`busy_timeout` instead, which is what FOR UPDATE gives on Postgres.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

T = TypeVar("T")

# Bind parameters per IN (...) list. SQLite and asyncpg both cap a statement's
# parameters at about 32k; a 50 GB object has some 2,700 chunks.
BATCH_SIZE = 1000


def dialect_name(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


async def lock_database_for_write(session: AsyncSession) -> None:
    """On SQLite, make this transaction the writer now (no-op on Postgres).

    Call it before the reads a write depends on. A no-op UPDATE is enough:
    SQLite takes the write lock when an UPDATE statement starts, whether or
    not it matches rows. Raises OperationalError ("database is locked") if
    this transaction already read and another connection wrote since.
    """
    if dialect_name(session) == "sqlite":
        await session.execute(text("UPDATE gc_ledger SET id = id WHERE 0 = 1"))


async def lock_object_key(session: AsyncSession, bucket: str, key: str) -> None:
    """Serialise writers of one (bucket, key) until this transaction ends.

    Postgres: a transaction-scoped advisory lock (pgbouncer-safe, unlike the
    session kind) on a 64-bit hash of the key. A row lock cannot do this job:
    a writer waiting on the row of a version that the lock holder deletes
    wakes up to find nothing, and would then race the successor's insert.
    Two keys sharing a hash merely queue behind each other.
    SQLite: the database write lock.
    """
    if dialect_name(session) == "sqlite":
        await lock_database_for_write(session)
        return
    await session.execute(select(func.pg_advisory_xact_lock(_lock_id(bucket, key))))


async def lock_object_key_on(connection: AsyncConnection, bucket: str, key: str) -> None:
    """`lock_object_key` for a Core connection's transaction (the same lock)."""
    if connection.dialect.name == "sqlite":
        await connection.execute(text("UPDATE gc_ledger SET id = id WHERE 0 = 1"))
        return
    await connection.execute(select(func.pg_advisory_xact_lock(_lock_id(bucket, key))))


async def lock_object_keys(session: AsyncSession, bucket: str, keys: Iterable[str]) -> None:
    """`lock_object_key` for many keys at once (a folder moved whole): one
    statement per batch, taking the locks in id order, so that two such
    transactions queue rather than deadlock."""
    if dialect_name(session) == "sqlite":
        await lock_database_for_write(session)
        return
    ids = sorted({_lock_id(bucket, key) for key in keys})
    for batch in batches(ids):
        await session.execute(
            text(
                "SELECT pg_advisory_xact_lock(id)"
                " FROM (SELECT unnest(CAST(:ids AS bigint[])) AS id ORDER BY id) AS ordered"
            ),
            {"ids": list(batch)},
        )


def _lock_id(bucket: str, key: str) -> int:
    return _advisory_id(f"teleuploader:object:{bucket}\0{key}")


async def lock_upload_part(session: AsyncSession, upload_id: str, part_number: int) -> None:
    """Serialise writers of one part of a multipart upload until this transaction ends.

    Like `lock_object_key`, and for the same reason: the first two uploads of
    a part number find no row to lock. Other part numbers proceed in parallel
    on Postgres; SQLite has only the database write lock.
    """
    if dialect_name(session) == "sqlite":
        await lock_database_for_write(session)
        return
    lock_id = _advisory_id(f"teleuploader:part:{upload_id}\0{part_number}")
    await session.execute(select(func.pg_advisory_xact_lock(lock_id)))


async def lock_named(session: AsyncSession, name: str, *, shared: bool = False) -> None:
    """Hold the lock `name` until this transaction ends: exclusive, or
    `shared` with every other shared holder. SQLite: the database write lock
    (one writer at a time: shared or not)."""
    if dialect_name(session) == "sqlite":
        await lock_database_for_write(session)
        return
    take = func.pg_advisory_xact_lock_shared if shared else func.pg_advisory_xact_lock
    await session.execute(select(take(_advisory_id(f"teleuploader:{name}"))))


def _advisory_id(name: str) -> int:
    """A 64-bit advisory lock id for `name`; a shared hash merely makes two names queue."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def batches(items: Iterable[T], size: int = BATCH_SIZE) -> Iterator[Sequence[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
