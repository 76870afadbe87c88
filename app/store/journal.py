"""The journal: what changed since the pinned snapshot, shipped to the
storage chats every JOURNAL_SECONDS, so that a restore loses at most that.

Database triggers (migration 0019) write a `journal` row for every change
to a table a restore loads, from every instance. A round reads the oldest
pending rows, reads the current state of the rows they name (absent:
deleted; `app.db.journal`), and sends it as ONE gzip JSON-lines document
(sealed when encryption keys are configured) to every storage chat that
takes writes (one at CHAT_MESSAGE_LIMIT keeps what it has). Then
it deletes the journal rows it shipped, by id: a row that commits late
(Postgres ids are taken before commit) is still there for the next round.
Nothing pending, nothing sent.

A restore finds the batches with the Bot API alone: after each batch, the
caption of the snapshot's pinned manifest in each chat is edited (an edit
posts no service message, unlike a pin) to a small JSON pointer to that
chat's newest batch. Each batch names its predecessor, and a few further
back (2, 4, 8 ... batches back: `back_refs`), never the whole chain: a
batch stays the size of its changes (it grew by every batch before it, to
57 KB within the hour). A restore walks the chain back from the newest; a
batch it cannot have is stepped over through the longer references, so
the batches before it are still found. A new snapshot starts a new chain.

Batch messages are recorded as the snapshot's (`snapshot_messages`, with
its taken_at), so the snapshot's pruning deletes them too. One writer at a
time: a round holds the snapshot writers' lease (and, in this process, the
snapshots' lock), so no round runs while a snapshot is written; what
commits meanwhile ships after the new snapshot is pinned (upserts are
idempotent).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import journal, snapshots
from app.db.session import session_scope
from app.db.types import utcnow
from app.kit.periodic import Periodic
from app.store.encryption import Encryption
from app.store.gc import GarbageCollector
from app.store.snapshot import Snapshots, send_recorded
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.types import CAPTION_LIMIT, StoredDocument

log = structlog.get_logger("app.store.journal")

FORMAT = "teleuploader-journal"
# 2: a batch names `previous` (back_refs), not every predecessor (1's
# `predecessors`, still read by restore).
VERSION = 2
# Journal rows one batch ships at most; more pending: another round at once.
BATCH_ROWS = 5000
# A round holds the writers' lease this long at most; a dead shipper's lapses.
LEASE = timedelta(minutes=5)
# What names one message of a batch (in its pointer, its successors' references).
COPY_KEYS = ("bot_id", "chat_id", "message_id", "file_id", "file_unique_id")
# What a batch's entry in its successors' references holds, besides its copies.
ENTRY_KEYS = ("seq", "sha256", "size", "sealing", "shipped_at")
# With the journal off here, its rows are still written (by triggers): a
# round this often deletes those older than STALE_AFTER. Not younger ones: an
# instance with the journal on (settings differ, or during a rolling change)
# ships rows within seconds, and deleting them would take changes out of its
# batches.
PURGE_SECONDS = 60.0
STALE_AFTER = 3600.0


@dataclass(frozen=True, slots=True)
class BatchResult:
    shipped_rows: int  # journal rows shipped (and deleted)
    messages: int  # Telegram messages sent
    seq: int | None  # the batch's number in its snapshot's chain
    full: bool  # as many rows as a batch takes: more may be pending


@dataclass(frozen=True, slots=True)
class JournalStatus:
    pending_rows: int  # journal rows not shipped, as of the last round
    last_batch_at: datetime | None
    batches: int  # shipped by this process
    failing: bool  # the last round failed


class Journal:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        encryption: Encryption,
        writer: Snapshots,
        gc: GarbageCollector,
        *,
        owner: str,
        interval: float,
        max_bytes: int,
        on_round: Callable[[str, str, float], None] | None = None,
        stale_after: float = STALE_AFTER,
    ) -> None:
        self._dispatcher = dispatcher
        self._stale_after = stale_after
        # (monotonic time, the newest journal row id then), one per purge round.
        self._seen: deque[tuple[float, int]] = deque()
        self._sessionmaker = sessionmaker
        self._encryption = encryption
        self._snapshots = writer
        self._gc = gc
        self._owner = owner
        self._max_bytes = max_bytes
        # Shipping needs snapshots to chain onto; without them, only purging.
        self.enabled = interval > 0 and writer.enabled
        self.last_batch_at: datetime | None = None
        self.last_error: str | None = None
        self.pending_rows = 0  # as counted at the end of the last round
        self.batches = 0
        self.loop = Periodic(
            "journal", self._round, interval=interval if self.enabled else PURGE_SECONDS, jitter=0.1
        )
        self.loop.on_round = on_round

    def start(self) -> None:
        self.loop.start()

    def status(self) -> JournalStatus:
        return JournalStatus(
            self.pending_rows, self.last_batch_at, self.batches, self.last_error is not None
        )

    async def stop(self) -> None:
        await self.loop.stop()

    async def _round(self) -> float | None:
        if not self.enabled:
            await self.purge()
            return None
        result = await self.ship()
        return 0.0 if result.full else None

    async def purge(self) -> int:
        """Delete the journal rows that were already there `stale_after`
        seconds ago (nobody shipped them); how many."""
        now = time.monotonic()
        async with session_scope(self._sessionmaker) as session:
            self._seen.append((now, await journal.newest_id(session)))
        through = 0
        while self._seen and now - self._seen[0][0] >= self._stale_after:
            through = self._seen.popleft()[1]
        if not through:
            return 0
        async with session_scope(self._sessionmaker) as session:
            forgotten = await journal.forget_through(session, through)
            self.pending_rows = await journal.count_pending(session)
        return forgotten

    async def ship(self) -> BatchResult:
        """Ship one batch of what is pending now. Raises if a send or an
        edit fails; the rows stay pending then, for the next round."""
        async with self._snapshots.lock:
            try:
                result = await self._ship()
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                raise
            self.last_error = None
            return result

    async def _ship(self) -> BatchResult:
        async with session_scope(self._sessionmaker) as session:
            if not await snapshots.take_lease(session, self._owner, utcnow() + LEASE):
                return BatchResult(0, 0, None, False)
        try:
            return await self._ship_leased()
        finally:
            async with session_scope(self._sessionmaker) as session:
                await snapshots.release_lease(session, self._owner)
                self.pending_rows = await journal.count_pending(session)

    async def _ship_leased(self) -> BatchResult:
        limit = BATCH_ROWS
        while True:
            async with session_scope(self._sessionmaker) as session:
                pending = await journal.pending(session, limit)
                pinned = await journal.pinned_snapshot(session)
                previous = await journal.batch_details(session, pinned[0]) if pinned else []
            if pending.ids and pinned is None:
                # No snapshot to chain onto: the first one holds all of it,
                # and is taken now rather than an interval after the start
                # (a new install would have no RPO until then). The rows go
                # in a transaction of their own: on SQLite one that has read
                # may not write once an upload has written since ("database
                # is locked" at once), and uploads write journal rows all
                # the time. The journal's lease keeps these rows ours.
                async with session_scope(self._sessionmaker) as session:
                    await journal.forget(session, pending.ids)
                self._snapshots.loop.wake()
                return BatchResult(len(pending.ids), 0, None, len(pending.ids) == limit)
            if not pending.ids or pinned is None:
                return BatchResult(0, 0, None, False)
            taken_at, manifests = pinned
            shipped_at = utcnow()
            chain = _chain(previous)
            seq = (chain[-1]["seq"] if chain else 0) + 1
            changes = await journal.current_state(self._sessionmaker, pending.keys)
            plain = _document(taken_at, seq, shipped_at, back_refs(chain, seq), changes)
            if len(plain) <= self._max_bytes or limit == 1:
                break
            # Documents go up to the chunk size (Telegram's limit leaves
            # room above it): fewer rows now, the rest in the next rounds.
            limit = max(1, limit // 2)
        data, sealing = self._seal(plain)
        entry = {
            "seq": seq,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "sealing": sealing,
            "shipped_at": shipped_at.isoformat(),
        }
        sent: list[StoredDocument] = []
        recorded = 0
        name = f"journal-{taken_at.strftime('%Y%m%dT%H%M%SZ')}-{seq}.bin"
        try:
            # Every chat that takes writes (one that is full keeps its older copies).
            for chat_id in self._dispatcher.require_open_chats():
                await send_recorded(
                    self._dispatcher,
                    self._sessionmaker,
                    self._owner,
                    data,
                    name,
                    chat_id,
                    lambda document: _record(document, entry),
                    taken_at,
                    sent,
                )
                recorded += 1
        except BaseException:
            # A message posted and then cut off before its row committed (a
            # stop's round runs out of its share of the grace; the database
            # fails) is held by no row, and its send succeeded, so nothing
            # marks the chat for reconciliation either: without the ledger it
            # would stay in the channel. (Should its row have committed after
            # all, the GC drops the entry: it deletes nothing a row holds.)
            for document in sent[recorded:]:
                self._gc.enqueue_document(document, reason="failed_upload")
            raise
        await self._point_captions(taken_at, manifests, sent, entry)
        async with session_scope(self._sessionmaker) as session:
            await journal.forget(session, pending.ids)
        self.last_batch_at = shipped_at
        self.batches += 1
        log.info(
            "journal_shipped",
            seq=seq,
            journal_rows=len(pending.ids),
            bytes=len(data),
            messages=len(sent),
            snapshot=taken_at.isoformat(),
        )
        return BatchResult(len(pending.ids), len(sent), seq, len(pending.ids) == limit)

    def _seal(self, plain: bytes) -> tuple[bytes, dict[str, Any] | None]:
        if not self._encryption.enabled:
            return plain, None
        keys = self._encryption.new_chunk()
        salt, sealed = self._encryption.seal_copy(keys.data_key, plain)
        with sealed:
            data = sealed.read() or b""
        return data, {
            "key_id": keys.key_id,
            "wrapped_key": base64.b64encode(keys.wrapped).decode(),
            "salt": base64.b64encode(salt).decode(),
            "plain_size": len(plain),
        }

    async def _point_captions(
        self,
        taken_at: datetime,
        manifests: list[journal.Manifest],
        sent: list[StoredDocument],
        entry: dict[str, Any],
    ) -> None:
        in_chat = {document.chat_id: document for document in sent}
        for manifest in manifests:
            document = in_chat.get(manifest.chat_id)
            if document is None:
                continue  # a chat added since the snapshot: its next one covers it
            caption = json.dumps(
                {
                    "format": FORMAT,
                    "taken_at": taken_at.isoformat(),
                    **entry,
                    **_copy(document),
                },
                separators=(",", ":"),
            )
            if len(caption) > CAPTION_LIMIT:
                raise ValueError(f"a journal pointer of {len(caption)} characters")
            await self._dispatcher.call(
                manifest.bot_id, "editMessageCaption", _edit(manifest, caption)
            )


def _edit(manifest: journal.Manifest, caption: str) -> Callable[[BotClient], Awaitable[None]]:
    def run(client: BotClient) -> Awaitable[None]:
        return client.edit_message_caption(manifest.chat_id, manifest.message_id, caption)

    return run


def _copy(document: StoredDocument) -> dict[str, Any]:
    return {key: getattr(document, key) for key in COPY_KEYS}


def _record(document: StoredDocument, entry: dict[str, Any]) -> snapshots.SnapshotMessageSpec:
    detail = json.dumps({**entry, **_copy(document)}, separators=(",", ":"))
    return snapshots.SnapshotMessageSpec(
        journal.KIND,
        document.bot_id,
        document.chat_id,
        document.message_id,
        document.file_unique_id,
        detail,
    )


def _chain(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Recorded batch messages (one per chat) as batches, each with its copies."""
    by_seq: dict[int, dict[str, Any]] = {}
    for detail in details:
        seq = int(detail["seq"])
        batch = by_seq.setdefault(
            seq,
            {key: detail[key] for key in ENTRY_KEYS} | {"copies": []},
        )
        batch["copies"].append({key: detail[key] for key in COPY_KEYS})
    return [by_seq[seq] for seq in sorted(by_seq)]


def back_refs(chain: list[dict[str, Any]], seq: int) -> list[dict[str, Any]]:
    """The batches batch `seq` names: 1, 2, 4, 8 ... back (log2 of the
    chain's length of them). The first is its predecessor, what a restore
    walks; the others step over a batch that cannot be had."""
    by_seq = {int(batch["seq"]): batch for batch in chain}
    refs: list[dict[str, Any]] = []
    distance = 1
    while seq - distance >= 1:
        if (found := by_seq.get(seq - distance)) is not None:
            refs.append(found)
        distance *= 2
    return refs


def _document(
    taken_at: datetime,
    seq: int,
    shipped_at: datetime,
    previous: list[dict[str, Any]],
    changes: list[journal.TableChanges],
) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as lines:
        header = {
            "format": FORMAT,
            "version": VERSION,
            "taken_at": taken_at.isoformat(),
            "seq": seq,
            "shipped_at": shipped_at.isoformat(),
            "previous": previous,
        }
        lines.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        for change in changes:
            line = {"table": change.table, "rows": change.rows, "deleted": change.deleted}
            lines.write(json.dumps(line, separators=(",", ":")).encode() + b"\n")
    return out.getvalue()


def read_batch(plain: bytes) -> tuple[dict[str, Any], list[journal.TableChanges]]:
    """A batch document's header and changes; ValueError if it is not one."""
    try:
        lines = gzip.decompress(plain).splitlines()
        header = json.loads(lines[0])
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError("not a journal batch")
        changes = []
        for line in lines[1:]:
            part = json.loads(line)
            changes.append(
                journal.TableChanges(
                    str(part["table"]), part["rows"], [tuple(key) for key in part["deleted"]]
                )
            )
    except (OSError, EOFError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not a journal batch ({exc})") from None
    return header, changes


def pointer(caption: str | None) -> dict[str, Any] | None:
    """A manifest caption's pointer to the newest journal batch, if it is one."""
    if not caption:
        return None
    try:
        found = json.loads(caption)
    except ValueError:
        return None
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        return None
    return found
