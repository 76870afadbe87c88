"""`teleuploader check`: every bot token (getMe, its rights in each storage
chat), the channel's audit, each chat's fill, the memory budget and the
stored data's state; `--deep` measures each bot in each chat."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from app.cli.database import CliError
from app.config.settings import Settings, load_settings


def add_check_command(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="check every bot token: getMe, then its rights in the storage chat",
    )
    check.add_argument(
        "--deep",
        action="store_true",
        help="also measure each bot in each storage chat: post, getFile, download (whole and "
        "by Range) and delete two test documents, then suggest settings (stop the service "
        "first: its calls would meet these)",
    )
    check.add_argument(
        "--json",
        action="store_true",
        help="with --deep: print its report as JSON on stdout (no token in it), the rest on stderr",
    )
    check.set_defaults(handler=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    from rich.console import Console

    from app.cli.chat_checks import check_chats
    from app.cli.client import audit_storage_chat, check_bots, check_budget, inspect_bots
    from app.cli.durability import check_durability

    if args.json and not args.deep:
        raise CliError("--json is the report of --deep: give both")
    settings = load_settings()
    if not settings.bot_tokens:
        raise CliError("BOT_TOKENS is not set: give at least one bot token")
    if not settings.chat_ids:
        raise CliError(
            "STORAGE_CHAT_ID (or STORAGE_CHAT_IDS) is not set: give the id of the storage channel"
        )
    rows = asyncio.run(
        inspect_bots(
            settings.bot_tokens,
            chat_ids=settings.chat_ids,
            api_base=settings.telegram_api_base,
        )
    )
    # Piped (as deploy/README.md runs it) nothing is cut to fit 80 columns.
    # With --json, stdout is the report's: the tables go to stderr.
    stream = sys.stderr if args.json else sys.stdout
    console = Console(file=stream) if stream.isatty() else Console(file=stream, width=10_000)
    bots_ok = check_bots(rows, console)
    asyncio.run(audit_storage_chat(settings, rows, console))
    chats_ok = asyncio.run(check_chats(settings, rows, console))
    budget_ok = check_budget(settings, console)
    data_ok = asyncio.run(check_durability(settings, console))
    deep_ok = _deep_check(settings, console, as_json=args.json) if args.deep else True
    return 0 if bots_ok and chats_ok and budget_ok and data_ok and deep_ok else 1


def _deep_check(settings: Settings, console: Any, *, as_json: bool) -> bool:
    import json

    from app.cli.deep_advice import print_report
    from app.cli.deep_check import measure

    console.print(
        "Deep check: two test documents per bot and storage chat, posted and deleted "
        "(stop the service first: its calls would meet these)"
    )
    report = asyncio.run(measure(settings))
    print_report(report, console)
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    return report.ok
