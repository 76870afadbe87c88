"""`teleuploader keys create | list | revoke`: API keys, straight in the
database (the service need not run)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.cli.database import CliError, with_database
from app.config.settings import Settings
from app.kit.bidi import escape_controls

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    Sessionmaker = async_sessionmaker[AsyncSession]

# A new key uploads and manages its own files; `admin` (everyone's files) must
# be asked for. Keys from before scopes existed were migrated to admin.
DEFAULT_KEY_SCOPE = "write"


def add_key_commands(commands: Any, usage: Callable[[argparse.ArgumentParser], int]) -> None:
    from app.db.models import KEY_SCOPES

    keys = commands.add_parser("keys", help="manage API keys")
    key_commands = keys.add_subparsers(title="key commands", metavar="ACTION")
    create = key_commands.add_parser("create", help="create a key and print it (shown once)")
    create.add_argument("name")
    create.add_argument(
        "--scope",
        choices=KEY_SCOPES,
        default=DEFAULT_KEY_SCOPE,
        help="read: list files (and download, with REQUIRE_KEY_FOR_DOWNLOADS); "
        "write: also upload, and delete or replace the files this key uploaded; "
        f"admin: everything, on every file ({DEFAULT_KEY_SCOPE})",
    )
    create.set_defaults(handler=cmd_keys_create)
    listing = key_commands.add_parser("list", help="list keys (never their secret part)")
    listing.set_defaults(handler=cmd_keys_list)
    revoke = key_commands.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    revoke.set_defaults(handler=cmd_keys_revoke)
    keys.set_defaults(handler=lambda _args: usage(keys))


def cmd_keys_create(args: argparse.Namespace) -> int:
    from app.db.api_keys import ApiKeyNameTaken, ApiKeyRepository
    from app.db.session import session_scope

    async def run(_settings: Settings, sessions: Sessionmaker) -> str:
        async with session_scope(sessions) as session:
            try:
                _key, plaintext = await ApiKeyRepository(session).create(
                    args.name, scope=args.scope
                )
            except ApiKeyNameTaken as exc:
                raise CliError(str(exc)) from None
        return plaintext

    _, plaintext = with_database(run)
    print(plaintext)
    print(
        f"(key {args.name!r} created with scope {args.scope}; it is shown only this once)",
        file=sys.stderr,
    )
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from app.db.api_keys import ApiKeyRepository
    from app.db.session import session_scope

    async def run(
        _settings: Settings, sessions: Sessionmaker
    ) -> list[tuple[str, str, str, str, str]]:
        async with session_scope(sessions) as session:
            keys = await ApiKeyRepository(session).list()
            return [
                (
                    key.name,
                    key.prefix + "…",
                    key.scope,
                    key.created_at.strftime("%Y-%m-%d %H:%M"),
                    "revoked" if key.revoked else "active",
                )
                for key in keys
            ]

    _, rows = with_database(run)
    if not rows:
        print("no API keys; create one with `teleuploader keys create NAME`")
    for name, prefix, scope, created, state in rows:
        print(f"{escape_controls(name):<24} {prefix:<14} {scope:<6} {created}  {state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from app.db.api_keys import ApiKeyRepository
    from app.db.session import session_scope

    async def run(_settings: Settings, sessions: Sessionmaker) -> bool:
        async with session_scope(sessions) as session:
            return await ApiKeyRepository(session).revoke(args.name)

    if not with_database(run)[1]:
        raise CliError(f"no active key is named {args.name!r}")
    print(f"key {args.name!r} revoked")
    return 0
