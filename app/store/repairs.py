"""Repairs: a chunk short of REPLICAS intact copies is read whole from an
intact copy, checked, and stored again as a new, independent copy, in a chat
(and by a bot) none of its intact copies uses where there is one (the scrub,
app/store/scrub.py, says which chunks and when).

The new copy is recorded, and only then the bad ones' messages go to the GC
ledger. A crash in between loses nothing: the good copies were never
touched, and a copy sent but not recorded is an orphan reconciliation
deletes (its send intent says so). A repair holds one upload buffer (of the
process-wide budget) for the chunk's bytes. A copy found bad on the way is
reported as a read's would be (`mark_bad`, `count_failure`: the scrub's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copies import BadState, ChunkRow, CopyRepository, CopyRow
from app.db.intents import IntentRepository
from app.db.session import session_scope
from app.store.copy_failures import is_gone, is_unavailable
from app.store.encryption import Encryption
from app.store.gc import GarbageCollector
from app.store.locator import ChunkLocator
from app.store.repair_queue import RepairQueue
from app.store.send_intents import SendIntents
from app.store.upload_buffers import UploadBuffers
from app.store.whole_copy import CopyBad, read_whole
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import TelegramError
from app.telegram.types import StoredDocument
from app.telegram.worker import ReplicaGroup

log = structlog.get_logger("app.store.scrub")


class Repairs:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        locator: ChunkLocator,
        buffers: UploadBuffers,
        queue: RepairQueue,
        encryption: Encryption,
        *,
        replicas: int,
        owner: str | None,
        mark_bad: Callable[[int, BadState], Awaitable[None]],
        count_failure: Callable[[int], Awaitable[bool]],
    ) -> None:
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self._gc = gc
        self._locator = locator
        self._buffers = buffers
        self._queue = queue
        self._encryption = encryption
        self.replicas = replicas
        self._intents = SendIntents(sessionmaker, owner)
        self._report_bad = mark_bad
        self._count_failure = count_failure
        self.repaired = 0  # copies added since the start (a metric)

    async def repair(self, chunk_id: int) -> int:
        """Bring the chunk back to REPLICAS intact copies; how many copies
        were added. A chunk with no intact copy left is lost (counted)."""
        async with session_scope(self._sessionmaker) as session:
            chunk = (await CopyRepository(session).chunks([chunk_id])).get(chunk_id)
        if chunk is None:
            return 0
        good = [copy for copy in chunk.copies if copy.ok]
        await self._buffers.acquire()
        try:
            data = await self._read_intact(chunk, good)
            if data is None:
                # None intact: ask about the others again (they may be back).
                data = await self._read_intact(chunk, [c for c in chunk.copies if not c.ok])
                if data is None:
                    log.error("chunk_lost", chunk_id=chunk_id, copies=len(chunk.copies))
                    await self._queue.found_unreadable(chunk_id)
                    return 0
                good = [c for c in chunk.copies if c.ok]
            added = await self._store_copies(chunk, good, data, self.replicas - len(good))
        finally:
            data = None
            self._buffers.release()
        async with session_scope(self._sessionmaker) as session:
            retired = await CopyRepository(session).retire_bad(chunk_id, keep=self.replicas)
        if retired:
            self._gc.wake()
        if added:
            self.repaired += added
            log.info("chunk_repaired", chunk_id=chunk_id, copies_added=added, bad_retired=retired)
        return added

    async def _read_intact(self, chunk: ChunkRow, copies: list[CopyRow]) -> bytes | None:
        """The chunk's bytes from the first of `copies` that gives them whole
        and right (the others found bad on the way are marked so)."""
        for copy in copies:
            try:
                data = await read_whole(self._locator, chunk, copy, self._encryption)
            except CopyBad:
                await self._report_bad(copy.id, "corrupt")
                continue
            except TelegramError as exc:
                if is_gone(exc):
                    await self._report_bad(copy.id, "missing")
                elif is_unavailable(exc):
                    await self._count_failure(copy.id)
                else:
                    log.warning("copy_read_failed", copy_id=copy.id, error=str(exc))
                continue
            worker = self._dispatcher.workers.get(copy.bot_id)
            if not copy.ok and worker is not None and worker.usable:
                # Taken for a bad copy, but whole and right: intact again
                # (not one whose bot is gone: it is read, and replaced).
                async with session_scope(self._sessionmaker) as session:
                    await CopyRepository(session).mark_checked(copy.id, verified=True)
            return data
        return None

    async def _store_copies(
        self, chunk: ChunkRow, good: list[CopyRow], data: bytes, wanted: int
    ) -> int:
        """Up to `wanted` new copies, in chats and by bots the intact ones do
        not use where possible; how many were recorded."""
        if wanted <= 0:
            return 0
        taken = {copy.chat_id for copy in good}
        chats = [
            chat
            for chat in self._dispatcher.replica_chats(len(taken) + wanted)
            if chat not in taken
        ]
        chats = (chats + [None] * wanted)[:wanted]
        group = ReplicaGroup({-(index + 1): copy.bot_id for index, copy in enumerate(good)})
        added = 0
        data_key = None
        if chunk.seal_key_id is not None and chunk.sealed_data_key is not None:
            data_key = self._encryption.data_key(chunk.id, chunk.seal_key_id, chunk.sealed_data_key)
        for chat in chats:
            # A sealed chunk's new copy: a salt (so a copy key) of its own.
            salt, body = (
                (None, None) if data_key is None else self._encryption.seal_copy(data_key, data)
            )
            intent = await self._intents.open()
            try:
                document = await self._dispatcher.send_document(
                    data if body is None else body,
                    f"repair-{chunk.id}.bin",
                    chat_id=chat,
                    replicas=group,
                )
            except TelegramError as exc:
                await self._intents.resolve([intent])
                log.warning("chunk_repair_send_failed", chunk_id=chunk.id, error=str(exc))
                continue
            finally:
                if body is not None:
                    body.close()
            if not await self._record_copy(chunk.id, document, intent, salt):
                self._gc.enqueue_document(document, reason="orphaned")
                continue
            added += 1
        return added

    async def _record_copy(
        self, chunk_id: int, document: StoredDocument, intent: int | None, salt: bytes | None
    ) -> bool:
        async with session_scope(self._sessionmaker) as session:
            copy_id = await CopyRepository(session).add_copy(
                chunk_id, document, at_most=self.replicas, salt=salt
            )
            if intent is not None:
                await IntentRepository(session).resolve(intent)
        return copy_id is not None
