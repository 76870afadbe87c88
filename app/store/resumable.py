"""Resumable (tus) uploads on the staging spool, the flusher and the object store.

A PATCH body is cut into segments of at most SEGMENT_BYTES. Each segment is
written to the spool and fsynced (or, with the spool off or full, stored in
Telegram while the client waits), then recorded as the upload's next
multipart part in the transaction that advances its offset. So the offset
only counts durable bytes, a body cut off midway keeps every segment it
completed plus the part of the last one that arrived (the caller ends the
stream cleanly on a disconnect), and after a crash the spooled parts are
adopted and flushed like any S3 part.

With an Upload-Checksum the segments are made durable as they come but
recorded together only once the whole body matched; on a mismatch none of
them is kept.

Completion turns the parts into the object in one transaction (metadata
only), as S3's CompleteMultipartUpload does: at once, the object pending
while parts are still spooled (app.db.pending), or, with
COMPLETE_WAITS_FOR=telegram, once the flusher has stored every part. A final
upload (concatenation) is made from its partial uploads' parts once they are
all in Telegram.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.multipart_errors import PartsNotStored
from app.db.resumable import Segment, TusRepository, TusUploadMissing
from app.db.session import session_scope
from app.db.types import utcnow
from app.kit.periodic import Periodic
from app.store.flusher import Flusher
from app.store.resumable_protocol import BodyTooLong, Checksum, ChecksumMismatch, UploadState
from app.store.service import ObjectStore
from app.store.spool import Spool, SpoolFull
from app.store.writer import WrittenContent

log = structlog.get_logger("app.store.resumable")

MiB = 1024 * 1024
# The most a PATCH appends in one step: the offset advances (and a crash
# loses) at most this much at a time.
SEGMENT_BYTES = 16 * MiB
# Expired uploads removed per transaction by the cleanup.
EXPIRED_BATCH = 100
KEY_PREFIX = "tus/"

HASHES = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "md5": hashlib.md5}


@dataclass(frozen=True, slots=True)
class _Landed:
    """A durable segment not recorded yet; `content` when it is in Telegram."""

    segment: Segment
    content: WrittenContent | None


class _Body:
    """A request body handed out in segments, hashed as it goes."""

    def __init__(self, stream: AsyncIterator[bytes], hasher: Any | None) -> None:
        self._stream = stream.__aiter__()
        self._left = b""
        self._ended = False
        self._hasher = hasher

    async def _next(self) -> bytes:
        if self._left:
            data, self._left = self._left, b""
            return data
        while not self._ended:
            try:
                data = await anext(self._stream)
            except StopAsyncIteration:
                self._ended = True
                break
            if data:
                return bytes(data)
        return b""

    async def segment(self, size: int) -> AsyncIterator[bytes]:
        while size > 0:
            data = await self._next()
            if not data:
                return
            if len(data) > size:
                data, self._left = data[:size], data[size:]
            size -= len(data)
            if self._hasher is not None:
                self._hasher.update(data)
            yield data

    async def has_more(self) -> bool:
        data = await self._next()
        self._left = data
        return bool(data)


class ResumableStore:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        objects: ObjectStore,
        *,
        spool: Spool,
        flusher: Flusher | None,
        expiration: float,
        cleanup_interval: float,
        wait_for_telegram: bool = False,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._objects = objects
        self._spool = spool
        self._flusher = flusher
        # As MultipartStore's: completion answers at spool durability unless told.
        self._wait_for_telegram = wait_for_telegram
        self._expiration = timedelta(seconds=expiration)
        self.cleanup = Periodic("tus_cleanup", self._cleanup_round, interval=cleanup_interval)

    # --- creating and reading ---------------------------------------------------

    async def create(
        self,
        *,
        api_key_id: int,
        kind: str,
        length: int | None,
        metadata: str,
        bucket: str,
        content_type: str,
    ) -> UploadState:
        async with session_scope(self._sessionmaker) as session:
            row = await TusRepository(session).create(
                api_key_id=api_key_id,
                kind=kind,
                length=length,
                metadata=metadata,
                bucket=bucket,
                key=_new_key(),
                content_type=content_type,
                expires_at=utcnow() + self._expiration,
            )
            return UploadState.from_row(row)

    async def get(self, upload_id: str) -> UploadState | None:
        async with session_scope(self._sessionmaker) as session:
            row = await TusRepository(session).get(upload_id)
            return UploadState.from_row(row) if row is not None else None

    async def declare_length(self, upload_id: str, length: int) -> UploadState:
        async with session_scope(self._sessionmaker) as session:
            row = await TusRepository(session).declare_length(upload_id, length)
            return UploadState.from_row(row)

    # --- appending --------------------------------------------------------------

    async def append(
        self,
        upload_id: str,
        at_offset: int,
        body: AsyncIterator[bytes],
        *,
        room: int,
        checksum: Checksum | None,
    ) -> UploadState:
        self._objects.require_room()  # before the spool acknowledges a byte
        hasher = HASHES[checksum.algorithm]() if checksum is not None else None
        reader = _Body(body, hasher)
        offset = at_offset
        held: list[_Landed] = []  # waiting for the checksum
        state: UploadState | None = None
        try:
            while offset - at_offset < room:
                size = min(SEGMENT_BYTES, room - (offset - at_offset))
                landed = await self._land(upload_id, reader.segment(size), size)
                if landed is None:
                    break
                if checksum is None:
                    state = await self._record(upload_id, offset, [landed])
                else:
                    held.append(landed)
                offset += landed.segment.size
                if landed.segment.size < size:
                    break  # the body ended
            too_long = await reader.has_more()
            if checksum is not None:
                assert hasher is not None
                if too_long or hasher.digest() != checksum.digest:
                    await self._discard(held)
                    held = []
                    if too_long:
                        raise BodyTooLong(at_offset)
                    raise ChecksumMismatch(
                        f"the body's {checksum.algorithm} does not match Upload-Checksum"
                    )
                if held:
                    state = await self._record(upload_id, at_offset, held)
                held = []
            if too_long:
                raise BodyTooLong(offset)
        except BaseException:
            await self._discard(held)
            raise
        if state is None:
            found = await self.get(upload_id)
            if found is None:
                raise TusUploadMissing(upload_id)
            state = found
        return state

    async def _land(
        self, upload_id: str, stream: AsyncIterator[bytes], size: int
    ) -> _Landed | None:
        """Make one segment durable; None if the body had no more bytes."""
        spool = self._spool
        if spool.enabled and spool.reserve(size):
            try:
                written = await spool.write(
                    stream,
                    reserved=size,
                    max_size=None,
                    on_bytes=self._objects.count_uploaded_bytes,
                )
            except SpoolFull as full:
                stream = full.received  # the disk filled: the rest goes straight on
            else:
                if not written.size:
                    await spool.delete([written.path])
                    return None
                segment = Segment(written.size, f'"{written.md5_hex}"', path=written.path)
                return _Landed(segment, None)
        content = await self._objects.write_content(
            stream, label=f"tus {upload_id[:8]}", allow_inline=False
        )
        if not content.size:
            await self._objects.discard(content)
            return None
        segment = Segment(content.size, f'"{content.md5_hex}"', pieces=content.pieces)
        return _Landed(segment, content)

    async def _record(self, upload_id: str, at_offset: int, landed: list[_Landed]) -> UploadState:
        try:
            async with session_scope(self._sessionmaker) as session:
                row = await TusRepository(session).append(
                    upload_id,
                    at_offset,
                    [item.segment for item in landed],
                    owner=self._spool.instance_id,
                    expires_at=utcnow() + self._expiration,
                )
                state = UploadState.from_row(row)
        except BaseException:
            await self._discard(landed)
            raise
        landed.clear()
        if self._flusher is not None:
            self._flusher.notify(upload_id)
        return state

    async def _discard(self, landed: list[_Landed]) -> None:
        paths = [item.segment.path for item in landed if item.segment.path is not None]
        # Shielded: this often runs while the request is being cancelled.
        with contextlib.suppress(Exception):
            await asyncio.shield(self._spool.delete(paths))
        for item in landed:
            if item.content is not None:
                await self._objects.discard(item.content)

    # --- completing -------------------------------------------------------------

    async def complete(self, upload_id: str, *, name: str) -> UploadState:
        """Raises TusUploadMissing, and FlushFailed when spooled parts cannot
        reach Telegram now (waiting for Telegram).

        Parts still in the spool make the object pending (app.db.pending)
        unless COMPLETE_WAITS_FOR=telegram, as S3's Complete."""
        pending = self._flusher is not None and not self._wait_for_telegram
        while True:
            state = await self.get(upload_id)
            if state is None:
                raise TusUploadMissing(upload_id)
            if state.public_id is not None:
                return state
            if not pending:
                await self._flushed(upload_id)
            try:
                async with session_scope(self._sessionmaker) as session:
                    row, _ = await TusRepository(session).complete(
                        upload_id, name=name, allow_spooled=pending
                    )
                    state = UploadState.from_row(row)
            except PartsNotStored:
                if self._flusher is None:
                    raise
                continue
            if pending and self._flusher is not None:
                self._flusher.seal(upload_id)
            self._objects.wake_gc()
            log.info("tus_upload_completed", upload_id=upload_id, size=state.length)
            return state

    async def concatenate(
        self,
        *,
        api_key_id: int,
        partial_ids: Sequence[str],
        metadata: str,
        bucket: str,
        name: str,
        content_type: str,
    ) -> UploadState:
        """Raises ConcatenationRefused and FlushFailed."""
        while True:
            for partial_id in partial_ids:
                await self._flushed(partial_id)
            try:
                async with session_scope(self._sessionmaker) as session:
                    row, _ = await TusRepository(session).concatenate(
                        api_key_id=api_key_id,
                        partial_ids=partial_ids,
                        metadata=metadata,
                        bucket=bucket,
                        key=_new_key(),
                        name=name,
                        content_type=content_type,
                        expires_at=utcnow() + self._expiration,
                    )
                    state = UploadState.from_row(row)
            except PartsNotStored:
                if self._flusher is None:
                    raise
                continue
            log.info("tus_upload_concatenated", partials=len(partial_ids), size=state.length)
            return state

    async def _flushed(self, upload_id: str) -> None:
        if self._flusher is None:
            return
        async with session_scope(self._sessionmaker) as session:
            row = await TusRepository(session).get(upload_id)
            parts = row.parts if row is not None else 0
        await self._flusher.flushed(upload_id, list(range(1, parts + 1)))

    # --- removing ---------------------------------------------------------------

    async def terminate(self, upload_id: str) -> None:
        """Raises TusUploadMissing."""
        async with session_scope(self._sessionmaker) as session:
            paths = await TusRepository(session).terminate(upload_id)
        await self._spool.delete(paths)
        self._objects.wake_gc()

    async def remove_expired(self) -> int:
        """Delete uploads past their expiry (rows, parts, spool files; their
        chunks go to the GC ledger); returns how many."""
        removed = 0
        while True:
            async with session_scope(self._sessionmaker) as session:
                expired = await TusRepository(session).expired(utcnow(), EXPIRED_BATCH)
            for upload_id in expired:
                with contextlib.suppress(TusUploadMissing):
                    await self.terminate(upload_id)
                    removed += 1
            if len(expired) < EXPIRED_BATCH:
                break
        if removed:
            log.info("tus_uploads_expired", removed=removed)
        return removed

    def start(self) -> None:
        self.cleanup.start()

    async def stop(self) -> None:
        await self.cleanup.stop()

    async def _cleanup_round(self) -> None:
        await self.remove_expired()


def _new_key() -> str:
    return f"{KEY_PREFIX}{secrets.token_urlsafe(18)}"
