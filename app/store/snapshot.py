"""Snapshots: the metadata written into the storage chats, so that a restore
(app/store/restore.py) can rebuild a lost database with the Bot API alone.

A snapshot is every row `app.db.snapshots` reads out, as gzip-compressed JSON
lines, written through a temporary file (never whole in memory), cut into
pieces of at most CHUNK_SIZE bytes, each sent as a document through the
dispatcher (its pacing, one call per token at a time). With encryption keys
configured, the pieces are sealed like chunks: one data key per snapshot,
wrapped by the current master key, a salt per piece.

A small JSON manifest (what the pieces are, where, their sha256) then goes
to every storage chat and is pinned there: `getChat` answers it as
`pinned_message`. Each message is recorded (`snapshot_messages`) before the
pin, so reconciliation never takes it for an orphan; once the pin stands,
snapshots older than the last two are pruned through the GC ledger. A
snapshot that fails half-way ledgers what it sent and pins nothing: the
previous manifest stays pinned, and usable. Pinning in a channel takes the
right can_edit_messages: a snapshot first finds a bot holding it in every
chat, and without one sends nothing.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import snapshots
from app.db.intents import IntentRepository, WatermarkRepository
from app.db.migrations import head_revision
from app.db.session import session_scope
from app.db.types import utcnow
from app.kit.periodic import Periodic
from app.store.encryption import Encryption
from app.store.gc import GarbageCollector
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import PermanentError, TelegramError
from app.telegram.types import ChatMemberInfo, StoredDocument

log = structlog.get_logger("app.store.snapshot")

MANIFEST_FORMAT = "teleuploader-snapshot"
MANIFEST_VERSION = 1
KEEP = 2  # snapshots kept; older ones are deleted while bots still may
# How long one snapshot may hold the writers' lease; a dead writer's lapses.
LEASE = timedelta(minutes=30)
# The journal (app/store/journal.py) shares the lease for a round of a
# second or so: a snapshot waits that long rather than skip its turn.
LEASE_WAIT = 60.0
LEASE_POLL = 1.0


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    taken_at: datetime | None  # None: another instance holds the lease
    counts: dict[str, int]
    pieces: int
    compressed_bytes: int
    pruned: int


class Snapshots:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        encryption: Encryption,
        *,
        owner: str,
        piece_size: int,
        interval: float,
        on_round: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self._gc = gc
        self._encryption = encryption
        self._owner = owner
        self._piece_size = piece_size
        # Held while this process writes a snapshot or ships the journal.
        self.lock = asyncio.Lock()
        self.last: SnapshotResult | None = None
        self.last_error: str | None = None
        self.loop = Periodic("snapshot", self._round, interval=interval, jitter=0.1)
        self.loop.on_round = on_round
        self.enabled = interval > 0

    def start(self) -> None:
        if self.enabled:
            self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    async def _round(self) -> None:
        await self.take()

    async def take(self, *, paced: bool = True) -> SnapshotResult:
        """Write a snapshot now (one at a time per process; across instances,
        whoever holds the lease). Raises if a send fails; nothing is pinned then.
        Not `paced`: it reads flat out (at a stop, when no request waits)."""
        async with self.lock:
            try:
                result = await self._take(paced)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                raise
            self.last_error = None
            if result.taken_at is not None:
                self.last = result
            return result

    async def _take(self, paced: bool) -> SnapshotResult:
        won = await self._wait_for_lease()
        # After the wait: journal batches already shipped are older than it.
        taken_at = utcnow()
        if not won:
            log.info("snapshot_skipped", reason="another instance writes snapshots")
            return SnapshotResult(None, {}, 0, 0, 0)
        sent: list[StoredDocument] = []
        try:
            # Before anything is sent: the chats that take it (not full), and
            # a bot that may pin in each, or the snapshot is not written.
            chats = self._dispatcher.require_open_chats()
            pinners = await self._pinners(chats)
            with tempfile.TemporaryFile() as spill:
                counts = await self._write_rows(spill, paced)
                size = spill.tell()
                manifest = await self._send_pieces(spill, size, taken_at, chats, sent)
            manifest.update(
                format=MANIFEST_FORMAT,
                version=MANIFEST_VERSION,
                taken_at=taken_at.isoformat(),
                schema=head_revision(),
                counts=counts,
            )
            body = json.dumps(manifest, separators=(",", ":")).encode()
            # The master key a restore needs for it, where `encryption status` reads it.
            seal = snapshots.manifest_detail(manifest["sealing"])
            manifests = [
                await self._send(
                    body, f"manifest-{_stamp(taken_at)}.json", taken_at, chat, sent, detail=seal
                )
                for chat in chats
            ]
            for document in manifests:
                await self._pin(document, pinners[document.chat_id])
            async with session_scope(self._sessionmaker) as session:
                await snapshots.mark_pinned(session, taken_at)
        except BaseException:
            # Deleting a pinned manifest unpins it: every chat falls back to
            # the previous snapshot's.
            for document in sent:
                self._gc.enqueue_document(document, reason="failed_upload")
            async with session_scope(self._sessionmaker) as session:
                await snapshots.forget_messages(session, taken_at)
                await snapshots.release_lease(session, self._owner)
            raise
        async with session_scope(self._sessionmaker) as session:
            pruned = await snapshots.prune(session, KEEP)
            await snapshots.release_lease(session, self._owner)
        log.info(
            "snapshot_taken",
            taken_at=taken_at.isoformat(),
            pieces=len(manifest["pieces"]),
            compressed_bytes=size,
            pruned=pruned,
            **{f"{name}_rows": count for name, count in counts.items()},
        )
        return SnapshotResult(taken_at, counts, len(manifest["pieces"]), size, pruned)

    async def _wait_for_lease(self) -> bool:
        """Take the writers' lease; wait out a journal round of another
        instance, not another instance's whole snapshot."""
        deadline = time.monotonic() + LEASE_WAIT
        while True:
            async with session_scope(self._sessionmaker) as session:
                if await snapshots.take_lease(session, self._owner, utcnow() + LEASE):
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(LEASE_POLL)

    async def _pinners(self, chat_ids: list[int]) -> dict[int, int]:
        """A bot that may pin in each chat, asked now (getChatMember): in a
        channel a pin takes the administrator right can_edit_messages (td's
        DialogManager.cpp, can_pin_messages), which may have been taken since
        the bot was checked. Raises, naming the right, when a chat has none:
        its snapshot would be sent and then fail at the pin."""
        pinners: dict[int, int] = {}
        refused: list[str] = []
        for chat_id in chat_ids:
            pinner = None
            for bot_id in self._dispatcher.serving_bots(chat_id):
                try:
                    member = await self._dispatcher.call(
                        bot_id, "getChatMember", _member_of(chat_id, bot_id)
                    )
                except TelegramError:
                    continue  # another bot may answer for the chat
                if member.can_edit_messages:
                    pinner = bot_id
                    break
            if pinner is None:
                refused.append(str(chat_id))
            else:
                pinners[chat_id] = pinner
        if refused:
            raise PermanentError(
                "no bot may pin the snapshot's manifest in chat "
                + ", ".join(refused)
                + ": give a bot there the administrator right to edit messages "
                "(can_edit_messages), which pinning in a channel takes; "
                "nothing of this snapshot was sent",
                status=400,
            )
        return pinners

    async def _pin(self, document: StoredDocument, pinner: int) -> None:
        """Pin a manifest through `pinner`. The pin posts a service message
        with the chat's next id, which no reply names and no bot can read:
        it is the service's, of an id unknown but above every message known
        posted before the pin began. Its send intent, as a document's, keeps
        the channel audit and reconciliation from taking it for a foreign
        post while it runs."""
        async with session_scope(self._sessionmaker) as session:
            intent = await IntentRepository(session).open(self._owner, document.chat_id)
            above = await WatermarkRepository(session).newest_known(document.chat_id)
        try:
            await self._dispatcher.call(
                pinner,
                "pinChatMessage",
                lambda client: client.pin_chat_message(document.chat_id, document.message_id),
            )
        except BaseException:
            async with session_scope(self._sessionmaker) as session:
                await IntentRepository(session).resolve(intent)
            raise
        async with session_scope(self._sessionmaker) as session:
            await WatermarkRepository(session).note_unseen_post(document.chat_id, above)
            await IntentRepository(session).resolve(intent)

    async def _write_rows(self, spill: IO[bytes], paced: bool) -> dict[str, int]:
        counts = dict.fromkeys(snapshots.SNAPSHOT_TABLES, 0)
        loop = asyncio.get_running_loop()
        with gzip.GzipFile(fileobj=spill, mode="wb", compresslevel=6) as out:
            began = loop.time()
            async for table, rows in snapshots.dump_rows(self._sessionmaker):
                counts[table] += len(rows)
                # Encoding and compressing 100k rows is seconds of CPU: in a
                # thread, a batch at a time, so that requests go on meanwhile.
                await asyncio.to_thread(_write_batch, out, table, rows)
                # Then a pause as long as the batch took. Reading rows (the
                # driver, the column types) and encoding them hold the GIL and
                # the loop: run flat out, a snapshot of 100,000 objects left
                # small PUTs beside it 0.23 of their rate and 4x their median
                # time on both backends; paced, 0.64-0.70 and 1.2-1.3x, for a
                # snapshot twice as long (bench/snapshot_writers_bench.py).
                busy = loop.time() - began
                if paced:
                    await asyncio.sleep(busy * _PAUSE_PER_BUSY)
                began = loop.time()
        return counts

    async def _send_pieces(
        self,
        spill: IO[bytes],
        size: int,
        taken_at: datetime,
        chats: list[int],
        sent: list[StoredDocument],
    ) -> dict[str, Any]:
        """Send the spilled snapshot in pieces; the manifest's part about them."""
        manifest: dict[str, Any] = {"compression": "gzip", "sealing": None, "pieces": []}
        keys = self._encryption.new_chunk() if self._encryption.enabled else None
        if keys is not None:
            manifest["sealing"] = {
                "key_id": keys.key_id,
                "wrapped_key": base64.b64encode(keys.wrapped).decode(),
            }
        # Sealed, a piece grows by a tag a frame, as a sealed chunk does (the
        # chunk size leaves Telegram's limit room for it).
        step = self._piece_size
        spill.seek(0)
        for index in range(0, max(1, -(-size // step))):
            plain = spill.read(step)
            entry: dict[str, Any] = {"plain_size": len(plain)}
            if keys is not None:
                salt, sealed = self._encryption.seal_copy(keys.data_key, plain)
                with sealed:
                    data = sealed.read() or b""
                entry["salt"] = base64.b64encode(salt).decode()
            else:
                data = plain
            document = await self._send(
                data,
                f"snapshot-{_stamp(taken_at)}-{index}.bin",
                taken_at,
                chats[index % len(chats)],
                sent,
            )
            entry.update(
                bot_id=document.bot_id,
                chat_id=document.chat_id,
                message_id=document.message_id,
                file_id=document.file_id,
                file_unique_id=document.file_unique_id,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
            manifest["pieces"].append(entry)
        return manifest

    async def _send(
        self,
        data: bytes,
        filename: str,
        taken_at: datetime,
        chat_id: int,
        sent: list[StoredDocument],
        *,
        detail: str | None = None,
    ) -> StoredDocument:
        kind = "manifest" if filename.startswith("manifest-") else "piece"
        document = await send_recorded(
            self._dispatcher,
            self._sessionmaker,
            self._owner,
            data,
            filename,
            chat_id,
            lambda document: snapshots.SnapshotMessageSpec(
                kind,
                document.bot_id,
                document.chat_id,
                document.message_id,
                document.file_unique_id,
                detail,
            ),
            taken_at,
            sent,
        )
        return document


async def send_recorded(
    dispatcher: Dispatcher,
    sessionmaker: async_sessionmaker[AsyncSession],
    owner: str,
    data: bytes,
    filename: str,
    chat_id: int,
    record: Callable[[StoredDocument], snapshots.SnapshotMessageSpec],
    taken_at: datetime,
    sent: list[StoredDocument],
) -> StoredDocument:
    """One message of a snapshot (or of its journal), recorded as the
    snapshot's with its send intent resolved in one transaction:
    reconciliation sees it held throughout."""
    async with session_scope(sessionmaker) as session:
        intent = await IntentRepository(session).open(owner, chat_id)
    try:
        document = await dispatcher.send_document(data, filename, chat_id=chat_id)
    except BaseException:
        async with session_scope(sessionmaker) as session:
            await IntentRepository(session).resolve(intent)
        raise
    sent.append(document)  # the caller's to ledger if what follows fails
    async with session_scope(sessionmaker) as session:
        await snapshots.record_messages(session, taken_at, [record(document)])
        await IntentRepository(session).resolve(intent)
    return document


def _member_of(chat_id: int, bot_id: int) -> Callable[[BotClient], Awaitable[ChatMemberInfo]]:
    def run(client: BotClient) -> Awaitable[ChatMemberInfo]:
        return client.get_chat_member(chat_id, bot_id)

    return run


# Seconds of pause per second of a snapshot's reading and encoding.
_PAUSE_PER_BUSY = 1.0


def _write_batch(out: gzip.GzipFile, table: str, rows: list[dict[str, Any]]) -> None:
    line = json.dumps(
        {"table": table, "rows": snapshots.encode_rows(table, rows)}, separators=(",", ":")
    )
    out.write(line.encode() + b"\n")


def _stamp(taken_at: datetime) -> str:
    return taken_at.strftime("%Y%m%dT%H%M%SZ")
