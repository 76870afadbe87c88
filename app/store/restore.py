"""Restore: an empty database rebuilt from the snapshot pinned in the
storage chats (app/store/snapshot.py), with the Bot API alone.

`getChat` on every storage chat names its pinned manifest; the newest wins.
Its pieces are downloaded by the bots that sent them (a file_id works for
its own bot only), checked against their sha256, opened if sealed, and
their rows loaded in batches in one transaction: a restore that fails
leaves the database as empty as it found it. A sample of chunk copies is
then asked of Telegram (getFile), so that the report says whether the
chunks the rows point at are still there.

The journal after the snapshot (app/store/journal.py) is found through the
pinned manifest's caption (the newest pointer across the chats): the chain
is walked back from the newest batch (each names its predecessor, and a few
further back), and the batches are checked and applied in order, in the
same transaction. A batch that cannot be had ends the
journal there (the later ones would apply over a gap), and the report says
so.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import journal as journal_rows
from app.db import snapshots
from app.db.chunks import ChunkRepository
from app.db.intents import WatermarkRepository
from app.db.session import session_scope
from app.db.types import utcnow
from app.store import journal
from app.store.encryption import Encryption
from app.store.snapshot import MANIFEST_FORMAT
from app.telegram.client import BotClient
from app.telegram.errors import TelegramError
from app.telegram.types import StoredDocument

SAMPLE = 20  # chunk copies checked with getFile after the load


class RestoreRefused(Exception):
    """The restore cannot run; the message says why (one line)."""


@dataclass
class RestoreReport:
    taken_at: datetime
    schema: str
    restored: dict[str, int]
    manifests_found: int
    sample_checked: int = 0
    sample_missing: int = 0
    problems: list[str] = field(default_factory=list)
    journal_batches: int = 0  # applied after the snapshot
    journal_upserted: int = 0
    journal_deleted: int = 0
    # The newest change the restore saw: its last batch's time, else the snapshot's.
    last_change_at: datetime | None = None
    # Chunks no restored object references (pending objects', unfinished
    # uploads'): released, their messages to the GC ledger.
    released: int = 0


@dataclass(frozen=True, slots=True)
class _Found:
    manifest: dict[str, Any]
    documents: list[StoredDocument]  # the manifest's message in each chat that pins it
    finder: int  # the bot that found them
    pointers: list[dict[str, Any]]  # the captions' journal pointers, as found


@dataclass(frozen=True, slots=True)
class _Batch:
    header: dict[str, Any]
    entry: dict[str, Any]  # its seq, sha256, sealing ..., and the copies it was had from
    changes: list[journal_rows.TableChanges]


async def restore(
    sessionmaker: async_sessionmaker[AsyncSession],
    clients: Sequence[BotClient],
    chat_ids: Sequence[int],
    encryption: Encryption,
) -> RestoreReport:
    async with session_scope(sessionmaker) as session:
        if not await snapshots.is_empty(session):
            raise RestoreRefused(
                "the database is not empty: restore needs a new, migrated, empty DATABASE_URL"
            )
    problems: list[str] = []
    found = await _newest_manifest(clients, chat_ids, problems)
    manifest = found.manifest
    by_bot = {client.bot_id: client for client in clients}
    restored = dict.fromkeys(snapshots.SNAPSHOT_TABLES, 0)
    taken_at = datetime.fromisoformat(manifest["taken_at"])
    report = RestoreReport(
        taken_at=taken_at,
        schema=str(manifest.get("schema", "")),
        restored=restored,
        manifests_found=len(found.documents),
        problems=problems,
        last_change_at=taken_at,
    )
    with tempfile.TemporaryFile() as spill:
        await _download_pieces(manifest, by_bot, encryption, spill)
        batches = await _download_journal(found, by_bot, encryption, problems)
        spill.seek(0)
        async with session_scope(sessionmaker) as session:
            with gzip.GzipFile(fileobj=spill, mode="rb") as lines:
                for line in lines:
                    batch = json.loads(line)
                    table = str(batch["table"])
                    restored[table] += await snapshots.load_rows(session, table, batch["rows"])
            for applied in batches:
                upserted, deleted = await journal_rows.apply(session, applied.changes)
                report.journal_batches += 1
                report.journal_upserted += upserted
                report.journal_deleted += deleted
                report.last_change_at = datetime.fromisoformat(applied.header["shipped_at"])
            report.released = await ChunkRepository(session).release(
                await snapshots.unreferenced_chunks(session), "orphaned"
            )
            # Whatever the lost database learnt after the snapshot (chunks
            # sent, then lost with it) is above the restored marks: the
            # next reconciliation ledgers what no restored row holds.
            await WatermarkRepository(session).mark_unclean(await snapshots.restored_chats(session))
            await snapshots.reset_id_sequences(session)
            await snapshots.record_messages(
                session, taken_at, _own_messages(found) + _batch_messages(batches)
            )
    expected = manifest.get("counts", {}) if not batches else {}
    for table, count in expected.items():
        if restored.get(table) != count:
            report.problems.append(f"{table}: {restored.get(table)} rows loaded of {count}")
    await _check_sample(sessionmaker, by_bot, report)
    return report


async def _newest_manifest(
    clients: Sequence[BotClient], chat_ids: Sequence[int], problems: list[str]
) -> _Found:
    best: _Found | None = None
    for chat_id in chat_ids:
        pinned = await _pinned(clients, chat_id, problems)
        if pinned is None:
            continue
        client, document, caption = pinned
        try:
            manifest = json.loads(await _download(client, document.file_id))
        except (TelegramError, ValueError) as exc:
            problems.append(f"chat {chat_id}: its pinned manifest cannot be read ({exc})")
            continue
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            problems.append(f"chat {chat_id}: its pinned message is not a snapshot manifest")
            continue
        found = journal.pointer(caption)
        if best is not None and manifest["taken_at"] == best.manifest["taken_at"]:
            best.documents.append(document)
            best.pointers.extend([found] if found else [])
        elif best is None or manifest["taken_at"] > best.manifest["taken_at"]:
            best = _Found(manifest, [document], client.bot_id, [found] if found else [])
    if best is None:
        raise RestoreRefused(
            "no snapshot manifest is pinned in the storage chats "
            f"({'; '.join(problems) or 'none pinned'})"
        )
    return best


async def _pinned(
    clients: Sequence[BotClient], chat_id: int, problems: list[str]
) -> tuple[BotClient, StoredDocument, str | None] | None:
    errors: list[str] = []
    for client in clients:
        try:
            pinned = await client.pinned_message(chat_id)
        except TelegramError as exc:
            errors.append(str(exc))
            continue
        if pinned is None:
            problems.append(f"chat {chat_id}: nothing is pinned")
            return None
        return client, pinned.document, pinned.caption
    problems.append(f"chat {chat_id}: no bot can read it ({'; '.join(errors)})")
    return None


async def _download(client: BotClient, file_id: str) -> bytes:
    location = await client.get_file(file_id)
    async with client.open_file(location.file_path) as body:
        return b"".join([part async for part in body])


async def _download_pieces(
    manifest: dict[str, Any],
    by_bot: dict[int, BotClient],
    encryption: Encryption,
    spill: IO[bytes],
) -> None:
    sealing = manifest.get("sealing")
    data_key = None
    if sealing:
        try:
            data_key = encryption.data_key(
                0, sealing["key_id"], base64.b64decode(sealing["wrapped_key"])
            )
        except Exception:
            raise RestoreRefused(
                f"the snapshot is sealed with master key {sealing['key_id']!r}, "
                "which ENCRYPTION_KEYS does not hold"
            ) from None
    for index, piece in enumerate(manifest["pieces"]):
        client = by_bot.get(int(piece["bot_id"]))
        if client is None:
            raise RestoreRefused(
                f"piece {index} of the snapshot was sent by bot {piece['bot_id']}, "
                "whose token is not in BOT_TOKENS"
            )
        try:
            data = await _download(client, str(piece["file_id"]))
        except TelegramError as exc:
            raise RestoreRefused(
                f"piece {index} of the snapshot cannot be downloaded: {exc}"
            ) from None
        if hashlib.sha256(data).hexdigest() != piece["sha256"]:
            raise RestoreRefused(f"piece {index} of the snapshot is damaged (sha256 differs)")
        if data_key is not None:
            from app.sealing.frames import open_all
            from app.sealing.keys import copy_cipher

            cipher = copy_cipher(data_key, base64.b64decode(piece["salt"]))
            data = open_all(cipher, int(piece["plain_size"]), data)
        spill.write(data)


def _open(encryption: Encryption, sealing: dict[str, Any] | None, data: bytes) -> bytes:
    if not sealing:
        return data
    from app.sealing.frames import open_all
    from app.sealing.keys import copy_cipher

    data_key = encryption.data_key(0, sealing["key_id"], base64.b64decode(sealing["wrapped_key"]))
    cipher = copy_cipher(data_key, base64.b64decode(sealing["salt"]))
    return open_all(cipher, int(sealing["plain_size"]), data)


async def _fetch_batch(
    entry: dict[str, Any],
    copies: Sequence[dict[str, Any]],
    by_bot: dict[int, BotClient],
    encryption: Encryption,
) -> _Batch:
    """A batch from the first of its copies that downloads, checks and opens."""
    errors: list[str] = []
    for copy in copies:
        client = by_bot.get(int(copy["bot_id"]))
        if client is None:
            errors.append(f"bot {copy['bot_id']} is not in BOT_TOKENS")
            continue
        try:
            data = await _download(client, str(copy["file_id"]))
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise ValueError("damaged (sha256 differs)")
            header, changes = journal.read_batch(_open(encryption, entry.get("sealing"), data))
        except (TelegramError, ValueError) as exc:
            errors.append(str(exc))
            continue
        except Exception as exc:  # a master key missing, a seal that does not open
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        return _Batch(header, {**entry, "copies": list(copies)}, changes)
    raise ValueError("; ".join(errors) or "no copy of it is known")


async def _download_journal(
    found: _Found, by_bot: dict[int, BotClient], encryption: Encryption, problems: list[str]
) -> list[_Batch]:
    """The snapshot's journal batches in order, up to the first that cannot
    be had (reported in `problems`)."""
    taken_at = found.manifest["taken_at"]
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for pointer in found.pointers:
        if pointer.get("taken_at") == taken_at:
            by_seq.setdefault(int(pointer["seq"]), []).append(pointer)
    newest: _Batch | None = None
    errors: list[str] = []
    # The newest pointer across the chats; an older one if it cannot be had
    # (its caption edit may have failed in one chat only).
    for seq in sorted(by_seq, reverse=True):
        same = by_seq[seq]
        copies = [{key: pointer[key] for key in journal.COPY_KEYS} for pointer in same]
        try:
            newest = await _fetch_batch(same[0], copies, by_bot, encryption)
            break
        except ValueError as exc:
            errors.append(f"batch {seq}: {exc}")
    if not by_seq:
        return []
    if newest is None:
        problems.append(
            "the journal after the snapshot cannot be read: the restore ends at the "
            f"snapshot's time ({'; '.join(errors)})"
        )
        return []
    if errors:
        problems.append(
            f"the newest journal batch cannot be had: the restore ends at batch "
            f"{newest.entry['seq']} ({'; '.join(errors)})"
        )
    return await _walk_back(newest, by_bot, encryption, problems)


async def _walk_back(
    newest: _Batch, by_bot: dict[int, BotClient], encryption: Encryption, problems: list[str]
) -> list[_Batch]:
    """Batches 1 to the newest, in order, found by walking the chain back
    from the newest: each names its predecessor (and a few further back,
    which step over one that cannot be had). A batch of the first format
    names every predecessor. Up to the first that cannot be had (reported)."""
    last = int(newest.entry["seq"])
    fetched = {last: newest}
    known: dict[int, dict[str, Any]] = {}

    def learn(batch: _Batch) -> None:
        named = batch.header.get("previous", batch.header.get("predecessors", []))
        for entry in named:
            known.setdefault(int(entry["seq"]), entry)

    learn(newest)
    failed: dict[int, str] = {}
    for seq in range(last - 1, 0, -1):
        entry = known.get(seq)
        if entry is None:
            failed[seq] = "no batch after it that could be had names it"
            continue
        try:
            fetched[seq] = await _fetch_batch(entry, entry["copies"], by_bot, encryption)
        except ValueError as exc:
            failed[seq] = str(exc)
            continue
        learn(fetched[seq])
    batches: list[_Batch] = []
    for seq in range(1, last + 1):
        if seq in failed:
            problems.append(
                f"journal batch {seq} cannot be had ({failed[seq]}): the batches after it "
                f"are not applied; the restore ends at batch {seq - 1}"
            )
            break
        batches.append(fetched[seq])
    return batches


def _batch_messages(batches: list[_Batch]) -> list[snapshots.SnapshotMessageSpec]:
    """The applied batches' messages, with what the shipper needs to go on
    with the chain (the restored database ships the next batch)."""
    out: list[snapshots.SnapshotMessageSpec] = []
    for batch in batches:
        entry = {key: batch.entry[key] for key in journal.ENTRY_KEYS}
        for copy in batch.entry["copies"]:
            detail = json.dumps({**entry, **copy}, separators=(",", ":"))
            out.append(
                snapshots.SnapshotMessageSpec(
                    journal_rows.KIND,
                    int(copy["bot_id"]),
                    int(copy["chat_id"]),
                    int(copy["message_id"]),
                    str(copy["file_unique_id"]),
                    detail,
                )
            )
    return out


def _own_messages(found: _Found) -> list[snapshots.SnapshotMessageSpec]:
    """The restored snapshot's messages, so that the new database counts
    them as the service's and prunes them in their turn."""
    pieces = [
        snapshots.SnapshotMessageSpec(
            "piece", int(p["bot_id"]), int(p["chat_id"]), int(p["message_id"]), p["file_unique_id"]
        )
        for p in found.manifest["pieces"]
    ]
    manifests = [
        snapshots.SnapshotMessageSpec(
            "manifest",
            found.finder,
            d.chat_id,
            d.message_id,
            d.file_unique_id,
            snapshots.manifest_detail(found.manifest.get("sealing")),
            pinned_at=utcnow(),  # found pinned
        )
        for d in found.documents
    ]
    return pieces + manifests


async def _check_sample(
    sessionmaker: async_sessionmaker[AsyncSession],
    by_bot: dict[int, BotClient],
    report: RestoreReport,
) -> None:
    async with session_scope(sessionmaker) as session:
        sample = await snapshots.sample_copies(session, SAMPLE)
    for bot_id, file_id in sample:
        client = by_bot.get(bot_id)
        report.sample_checked += 1
        if client is None:
            report.sample_missing += 1
            problem = f"chunk copies of bot {bot_id} cannot be read: its token is not in BOT_TOKENS"
            if problem not in report.problems:
                report.problems.append(problem)
            continue
        try:
            await client.get_file(file_id)
        except TelegramError as exc:
            report.sample_missing += 1
            report.problems.append(f"a chunk copy cannot be found: {exc}")
