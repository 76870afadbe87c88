"""`teleuploader snapshot` (ask the running service for a snapshot now) and
`teleuploader restore` (rebuild an empty database from the snapshot pinned
in the storage chats and the journal after it; the service must not run)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any

from app.kit.bidi import escape_controls


def add_snapshot_commands(
    commands: Any, client_options: Callable[[argparse.ArgumentParser], None]
) -> None:
    snapshot = commands.add_parser(
        "snapshot",
        help="ask the running service (an admin key) to write a snapshot of the metadata "
        "into the storage chats now; waits until it is pinned",
    )
    snapshot.add_argument("--json", action="store_true", help="print the result as JSON")
    client_options(snapshot)
    snapshot.set_defaults(handler=cmd_snapshot)
    restore = commands.add_parser(
        "restore",
        help="rebuild an empty, migrated DATABASE_URL from the newest snapshot pinned in the "
        "storage chats and the journal after it (BOT_TOKENS, STORAGE_CHAT_ID(S)); the "
        "service must be stopped",
    )
    restore.add_argument("--json", action="store_true", help="print the report as JSON")
    restore.set_defaults(handler=cmd_restore)


def cmd_snapshot(args: argparse.Namespace) -> int:
    import httpx

    from app.cli.client import ClientError, explain

    if not args.key:
        raise ClientError("an admin API key is needed: --key or TELEUPLOADER_KEY")
    headers = {"Authorization": f"Bearer {args.key}"}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=600) as http:
            response = http.post("/api/admin/snapshot")
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach {args.url}: {exc}") from None
    if response.status_code != 200:
        raise ClientError(f"no snapshot: {explain(response)}")
    result = response.json()
    if args.json:
        print(json.dumps(result))
    elif not result["taken"]:
        print("another instance is writing a snapshot now")
    else:
        print(
            f"snapshot of {result['taken_at']}: {result['pieces']} pieces, "
            f"{result['compressed_bytes']} bytes; rows: {_counts(result['rows'])}"
        )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """Exit 0 when everything was restored and the sampled chunks are there;
    1 when the report lists problems."""
    from app.config.settings import load_settings

    report = asyncio.run(_restore(load_settings()))
    problems: list[str] = report["problems"]
    if args.json:
        print(json.dumps(report))
    else:
        print(f"restored the snapshot of {report['taken_at']} (schema {report['schema']})")
        print(f"rows: {_counts(report['restored'])}")
        print(
            f"chunk copies sampled: {report['sample_checked']}, "
            f"not found: {report['sample_missing']}"
        )
        print(
            f"journal batches applied: {report['journal_batches']} "
            f"(rows written {report['journal_upserted']}, deleted {report['journal_deleted']})"
        )
        for problem in problems:
            print(f"could not: {escape_controls(problem)}")  # Telegram's words among them
        print(f"the last change it saw: {report['last_change_at']}")
    return 1 if problems else 0


async def _restore(settings: Any) -> dict[str, Any]:
    from app.cli.client import ClientError
    from app.db.engine import create_engine, create_sessionmaker
    from app.db.migrations import check_schema
    from app.sealing.layout import sealed_size
    from app.store.encryption import Encryption
    from app.store.restore import RestoreRefused, restore
    from app.telegram.client import BotClient
    from app.telegram.local_files import local_files_for

    if not settings.bot_tokens or not settings.chat_ids:
        raise ClientError("restore needs BOT_TOKENS and STORAGE_CHAT_ID (or STORAGE_CHAT_IDS)")
    engine = create_engine(settings.database_url)
    local_files = local_files_for(settings)
    clients = [
        BotClient(
            token,
            api_base=settings.telegram_api_base,
            local_files=local_files,
            expected_file_size=sealed_size(settings.chunk_size),
        )
        for token in settings.bot_tokens
    ]
    try:
        await check_schema(engine)
        report = await restore(
            create_sessionmaker(engine),
            clients,
            settings.chat_ids,
            Encryption(settings.keyring()),
        )
    except RestoreRefused as exc:
        raise ClientError(str(exc)) from None
    finally:
        for client in clients:
            await client.aclose()
        await engine.dispose()
    return {
        "taken_at": report.taken_at.isoformat(),
        "schema": report.schema,
        "restored": report.restored,
        "manifests_found": report.manifests_found,
        "sample_checked": report.sample_checked,
        "sample_missing": report.sample_missing,
        "problems": report.problems,
        "journal_batches": report.journal_batches,
        "journal_upserted": report.journal_upserted,
        "journal_deleted": report.journal_deleted,
        "chunks_released": report.released,
        "last_change_at": report.last_change_at.isoformat() if report.last_change_at else None,
    }


def _counts(rows: dict[str, int]) -> str:
    return ", ".join(f"{table} {count}" for table, count in rows.items())
