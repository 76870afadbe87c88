"""`teleuploader encryption migrate`: the chunks stored before encryption was
turned on, sealed now, in the background of the running service (it owns
the bots: `POST /api/admin/encryption/migrate`).

One chunk at a time: its bytes read from an intact copy and checked, then
sent again as REPLICAS sealed copies (each under a salt of its own), and in
one transaction the new copies replace the old ones, whose messages go to
the GC ledger. Its sends go through the dispatcher like any other, so they
keep to its pacing, and the pass pauses while users' uploads wait. A chunk
deleted or sealed meanwhile is skipped (its new copies are ledgered). A
download that began before its chunk was replaced may fail once the old
messages are deleted; asked again, it reads the sealed copies.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import SealRecord
from app.db.copies import ChunkRow, CopyRepository
from app.db.intents import IntentRepository
from app.db.sealing import SealingRepository
from app.db.session import session_scope
from app.store.encryption import Encryption
from app.store.errors import pass_failure
from app.store.gc import GarbageCollector
from app.store.locator import ChunkLocator
from app.store.send_intents import SendIntents
from app.store.upload_buffers import UploadBuffers
from app.store.whole_copy import CopyBad, read_whole
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import TelegramError
from app.telegram.types import StoredDocument
from app.telegram.worker import ReplicaGroup

log = structlog.get_logger("app.store.sealing_migration")

BATCH = 100
# How long the pass waits while users' work is queued at the bots.
YIELD_SECONDS = 1.0


@dataclass
class MigrationPass:
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    sealed: int = 0
    skipped: int = 0  # no intact copy could be read, or a send failed
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "running": self.finished_at is None}


class SealingMigration:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        locator: ChunkLocator,
        buffers: UploadBuffers,
        encryption: Encryption,
        *,
        replicas: int,
        owner: str | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self._gc = gc
        self._locator = locator
        self._buffers = buffers
        self._encryption = encryption
        self._replicas = max(1, replicas)
        self._intents = SendIntents(sessionmaker, owner)
        self.current: MigrationPass | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> MigrationPass:
        """Start a pass in the background (or return the one running)."""
        if self.current is not None and self.current.finished_at is None:
            return self.current
        current = MigrationPass()
        self.current = current

        async def run() -> None:
            try:
                await self.run_pass(current)
            except Exception as exc:
                current.error = pass_failure(exc, "sealing_migration_failed")
                log.warning("sealing_migration_failed", exc_info=exc)
            finally:
                current.finished_at = datetime.now(UTC)

        self._task = asyncio.create_task(run(), name="sealing-migration")
        return current

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def left(self) -> int:
        """Live plaintext chunks (at most BATCH counted past the first)."""
        async with session_scope(self._sessionmaker) as session:
            return len(await SealingRepository(session).plaintext_chunks(0, 10 * BATCH))

    async def run_pass(self, into: MigrationPass) -> None:
        after = 0
        while True:
            async with session_scope(self._sessionmaker) as session:
                chunk_ids = await SealingRepository(session).plaintext_chunks(after, BATCH)
            if not chunk_ids:
                break
            for chunk_id in chunk_ids:
                await self._after_users()
                if await self._seal(chunk_id):
                    into.sealed += 1
                else:
                    into.skipped += 1
            after = chunk_ids[-1]
        self._gc.wake()
        log.info("sealing_migration_done", sealed=into.sealed, skipped=into.skipped)

    async def _after_users(self) -> None:
        """Users' uploads first: wait while work is queued at the bots."""
        for _ in itertools.count():
            if self._dispatcher.backlog() == 0:
                return
            await asyncio.sleep(YIELD_SECONDS)

    async def _seal(self, chunk_id: int) -> bool:
        async with session_scope(self._sessionmaker) as session:
            chunk = (await CopyRepository(session).chunks([chunk_id])).get(chunk_id)
        if chunk is None or chunk.seal_key_id is not None:
            return False
        await self._buffers.acquire()
        try:
            data = await self._read(chunk)
            if data is None:
                log.warning("sealing_migration_unreadable", chunk_id=chunk_id)
                return False
            return await self._replace(chunk, data)
        finally:
            data = None
            self._buffers.release()

    async def _read(self, chunk: ChunkRow) -> bytes | None:
        for copy in [c for c in chunk.copies if c.ok]:
            try:
                return await read_whole(self._locator, chunk, copy, self._encryption)
            except (CopyBad, TelegramError) as exc:
                log.warning("sealing_migration_copy_unread", copy_id=copy.id, error=str(exc))
        return None

    async def _replace(self, chunk: ChunkRow, data: bytes) -> bool:
        keys = self._encryption.new_chunk()
        group = ReplicaGroup() if self._replicas > 1 else None
        sent: list[tuple[StoredDocument, bytes]] = []
        intents: list[int | None] = []
        try:
            for chat in self._dispatcher.replica_chats(self._replicas):
                salt, body = self._encryption.seal_copy(keys.data_key, data)
                intents.append(await self._intents.open())
                try:
                    document = await self._dispatcher.send_document(
                        body, f"sealed-{chunk.id}.bin", chat_id=chat, replicas=group
                    )
                finally:
                    body.close()
                sent.append((document, salt))
            seal = SealRecord(chunk.size, keys.key_id, keys.wrapped, [s for _, s in sent])
            async with session_scope(self._sessionmaker) as session:
                replaced = await SealingRepository(session).replace_with_sealed(
                    chunk.id, [document for document, _ in sent], seal
                )
                for intent in intents:
                    if intent is not None:
                        await IntentRepository(session).resolve(intent)
        except TelegramError as exc:
            log.warning("sealing_migration_send_failed", chunk_id=chunk.id, error=str(exc))
            replaced = False
            await self._intents.resolve(intents)
        if not replaced:
            for document, _ in sent:
                self._gc.enqueue_document(document, reason="orphaned")
        return replaced
