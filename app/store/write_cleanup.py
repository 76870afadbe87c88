"""What a failed or cancelled write leaves behind, handed to the GC.

A chunk's copies Telegram stored but no row will hold go to the GC ledger
with their send intents resolved; chunks recorded as pending for a stream
that failed are released. This work often runs while its caller is being
cancelled (a client gone, a stop), so it is detached: shielded, run to its
end, and waited for at shutdown (`settle`) before the engine goes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from typing import Any, Final, TypeVar

import structlog

from app.db.object_rows import PieceSpec
from app.store.gc import GarbageCollector
from app.store.send_intents import SendIntents
from app.telegram.types import StoredDocument

# The writer's logger: its events keep the name they always had.
log = structlog.get_logger("app.store.writer")
T = TypeVar("T")

REASON: Final = "failed_upload"


class WriteCleanup:
    def __init__(self, gc: GarbageCollector, intents: SendIntents) -> None:
        self._gc = gc
        self._intents = intents
        self._detached: set[asyncio.Future[Any]] = set()

    def detach(self, work: Awaitable[T]) -> asyncio.Future[T]:
        """Run `work` to its end even if its caller is cancelled (shield the
        result), and let `settle` wait for it."""
        future = asyncio.ensure_future(work)
        self._detached.add(future)
        future.add_done_callback(self._detached.discard)
        return future

    async def settle(self) -> None:
        """Wait for the clean-up that outlived cancelled writes."""
        while self._detached:
            await asyncio.gather(*list(self._detached), return_exceptions=True)

    async def resolve_intent(self, intent: int | None) -> None:
        """After a failed send; run to its end should the caller be cancelled."""
        if intent is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.detach(self._intents.resolve([intent])))

    async def ledger(
        self, documents: Sequence[StoredDocument], intents: Sequence[int | None]
    ) -> None:
        """Copies Telegram has but the database will not: they must not stay."""
        for document, intent in zip(documents, intents, strict=True):
            self._gc.enqueue_document(document, reason=REASON)
            await self.resolve_intent(intent)

    async def forget_copies(
        self, sends: Sequence[asyncio.Future[tuple[StoredDocument, int | None, bytes | None]]]
    ) -> None:
        """The chunk failed: the copies that were stored go to the GC."""
        await asyncio.gather(*sends, return_exceptions=True)
        for send in sends:
            if send.cancelled() or send.exception() is not None:
                continue
            document, intent, _ = send.result()
            await self.ledger([document], [intent])

    async def abandon_recording(
        self,
        recording: asyncio.Future[int],
        documents: list[StoredDocument],
        intents: list[int | None],
    ) -> None:
        """The upload was cancelled while its chunk was being recorded: let the
        recording end, then release the chunk (or ledger its copies' messages)."""
        with contextlib.suppress(BaseException):
            await asyncio.shield(recording)
        if recording.done() and not recording.cancelled() and recording.exception() is None:
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.detach(self._gc.release_chunks([recording.result()], reason=REASON))
                )
            return
        await self.ledger(documents, intents)

    async def abandon(self, tasks: list[asyncio.Task[PieceSpec]]) -> None:
        """Cancel chunks still in flight and release the stored ones to GC."""
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stored = [r.chunk_id for r in results if isinstance(r, PieceSpec)]
        if stored:
            # Shielded: this runs while the caller is being cancelled.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.detach(self._gc.release_chunks(stored, reason=REASON)))
            log.info("upload_abandoned", chunks_released=len(stored))
