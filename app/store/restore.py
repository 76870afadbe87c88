"""Restore: an empty database rebuilt from the snapshot pinned in the
storage chats (app/store/snapshot.py), with the Bot API alone.

`getChat` on every storage chat names its pinned manifest; the newest wins.
Its pieces are downloaded by the bots that sent them (a file_id works for
its own bot only), checked against their sha256, opened if sealed, and
their rows loaded in batches in one transaction: a restore that fails
leaves the database as empty as it found it. A sample of chunk copies is
then asked of Telegram (getFile), so that the report says whether the
chunks the rows point at are still there.
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

from app.db import snapshots
from app.db.session import session_scope
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


@dataclass(frozen=True, slots=True)
class _Found:
    manifest: dict[str, Any]
    documents: list[StoredDocument]  # the manifest's message in each chat that pins it
    finder: int  # the bot that found them


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
    with tempfile.TemporaryFile() as spill:
        await _download_pieces(manifest, by_bot, encryption, spill)
        spill.seek(0)
        async with session_scope(sessionmaker) as session:
            with gzip.GzipFile(fileobj=spill, mode="rb") as lines:
                for line in lines:
                    batch = json.loads(line)
                    table = str(batch["table"])
                    restored[table] += await snapshots.load_rows(session, table, batch["rows"])
            taken_at = datetime.fromisoformat(manifest["taken_at"])
            await snapshots.reset_id_sequences(session)
            await snapshots.record_messages(session, taken_at, _own_messages(found))
    report = RestoreReport(
        taken_at=datetime.fromisoformat(manifest["taken_at"]),
        schema=str(manifest.get("schema", "")),
        restored=restored,
        manifests_found=len(found.documents),
        problems=problems,
    )
    expected = manifest.get("counts", {})
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
        client, document = pinned
        try:
            manifest = json.loads(await _download(client, document.file_id))
        except (TelegramError, ValueError) as exc:
            problems.append(f"chat {chat_id}: its pinned manifest cannot be read ({exc})")
            continue
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            problems.append(f"chat {chat_id}: its pinned message is not a snapshot manifest")
            continue
        if best is not None and manifest["taken_at"] == best.manifest["taken_at"]:
            best.documents.append(document)
        elif best is None or manifest["taken_at"] > best.manifest["taken_at"]:
            best = _Found(manifest, [document], client.bot_id)
    if best is None:
        raise RestoreRefused(
            "no snapshot manifest is pinned in the storage chats "
            f"({'; '.join(problems) or 'none pinned'})"
        )
    return best


async def _pinned(
    clients: Sequence[BotClient], chat_id: int, problems: list[str]
) -> tuple[BotClient, StoredDocument] | None:
    errors: list[str] = []
    for client in clients:
        try:
            document = await client.pinned_document(chat_id)
        except TelegramError as exc:
            errors.append(str(exc))
            continue
        if document is None:
            problems.append(f"chat {chat_id}: nothing is pinned")
            return None
        return client, document
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
            "manifest", found.finder, d.chat_id, d.message_id, d.file_unique_id
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
