"""What the object store's operations share: the parts they work through
(the database, the chunk writer and reader, the GC, the pending reads) and
the two writes that reads, copies and deletes all take: a small object in
one statement, and a move to the trash.

`ObjectStore` (app/store/service.py) is these parts with its operations,
which live one concept to a module: writes (store_writes), reads
(store_reads), deletes (store_deletes).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.object_rows import ObjectSpec, new_public_id, row_values
from app.db.single_statement_sql import TrashMove, inserted_row
from app.db.single_statements import AsyncStatements, SingleStatements
from app.db.types import utcnow
from app.store.gc import GarbageCollector
from app.store.object_info import ObjectInfo
from app.store.pending import PendingReads
from app.store.reader import RangeReader
from app.store.spool import Spool
from app.store.writer import ChunkWriter


class StoreParts:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        writer: ChunkWriter,
        reader: RangeReader,
        gc: GarbageCollector,
        *,
        statements: SingleStatements | None = None,
        trash_retention: timedelta | None = None,
        spool: Spool | None = None,
        pending_copies: bool = True,
    ) -> None:
        self._sessionmaker = sessionmaker
        # A copy of a pending object is pending too (metadata only, resolved
        # at the source's flush: app.db.pending); COMPLETE_WAITS_FOR=telegram
        # makes it wait for that flush instead.
        self._pending_copies = pending_copies
        # Objects completed with parts still spooled are read from there.
        self._pending = PendingReads(sessionmaker, reader, writer.encryption, spool)
        # Deletes and replacements go to the trash for this long (the
        # sessions keep it too: app.db.trash.configure); small objects then
        # take the single statements that trash them instead of those that
        # overwrite or delete them in place.
        self._trash_retention = trash_retention
        # Default: Core statements on the sessions' engine (tests, tools).
        engine = sessionmaker.kw["bind"]
        self._statements = statements or AsyncStatements(engine, engine)
        self._writer = writer
        self._reader = reader
        self._gc = gc

    async def _store_small(self, spec: ObjectSpec, *, over_chunkless: bool) -> ObjectInfo | None:
        """`spec`, which references no chunk, stored in one statement under a
        new key or, if `over_chunkless`, over an object without chunks; None
        if the key is taken otherwise (the session's path)."""
        spec.check()
        now = utcnow()
        values = row_values(spec, new_public_id(), now, now)
        if over_chunkless and self._trash_retention:
            # A new key (the common case) is one statement; over an object,
            # that object goes to the trash in the same transaction as the
            # new row is written.
            new_id = await self._statements.insert_object_unless_exists(values)
            if new_id is not None:
                row_id = new_id
            else:
                outcome = await self._statements.trash_chunkless_object(
                    self._trash_move(spec.bucket, spec.key, "replaced", now), values
                )
                if outcome is None or outcome.stored is None:
                    return None
                row_id, values["created_at"] = outcome.stored
        elif over_chunkless:
            stored = await self._statements.put_chunkless_object(values)
            if stored is None:
                return None
            row_id, values["created_at"] = stored
        else:
            new_id = await self._statements.insert_object_unless_exists(values)
            if new_id is None:
                return None
            row_id = new_id
        # With its content, which is in hand anyway: whoever asks what the
        # object is sealed with (S3's PUT answer) then needs no query.
        return ObjectInfo.from_row(inserted_row(row_id, values))

    def _trash_move(self, bucket: str, key: str, reason: str, now: datetime) -> TrashMove:
        assert self._trash_retention is not None
        return TrashMove(bucket, key, reason, now, now + self._trash_retention)
