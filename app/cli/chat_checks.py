"""What `teleuploader check` says about the storage chats themselves, after
the bots' table: whether a bot may pin each chat's snapshot manifest, how
many bots the chats must take as administrators, how full each chat is, and
how many messages stay in them for good."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from app.telegram.chat_fill import WARN_FRACTION

#: Administrators a channel takes at most: Telegram refuses the 51st with
#: TOO_MANY_ADMIN. Reported by users of another Telegram store (teldrive
#: #258); Telegram's documentation does not say it and the Bot API server's
#: source cannot show it (the server enforces it): unverified here.
CHANNEL_ADMIN_LIMIT = 50


async def check_chats(settings: Any, rows: list[dict[str, Any]], console: Console) -> bool:
    """Print the storage chats' part of the check; False when a snapshot
    could not be pinned somewhere, or when no chat takes new files."""
    pins_ok = check_pin_rights(settings, rows, console)
    check_admin_count(settings, console)
    room_ok = await check_fill(settings, console)
    return pins_ok and room_ok


def check_pin_rights(settings: Any, rows: list[dict[str, Any]], console: Console) -> bool:
    """Pinning in a channel takes the administrator right can_edit_messages
    (td's DialogManager.cpp, can_pin_messages). With snapshots on, every chat
    needs a bot holding it: there the snapshot's manifest is pinned, and
    without it no snapshot is written. False when a chat has none."""
    interval = settings.snapshot_interval_seconds
    if interval <= 0:
        console.print("Snapshot pins: not needed (SNAPSHOT_INTERVAL_SECONDS=0: no snapshots)")
        return True
    ok = True
    for chat_id in settings.chat_ids:
        in_chat = [r for r in rows if r["chat_id"] == chat_id and r["admin"] and not r["problem"]]
        pinners = [str(r["bot_id"]) for r in in_chat if r.get("can_edit")]
        lacking = [str(r["bot_id"]) for r in in_chat if not r.get("can_edit")]
        if not pinners:
            ok = False
            console.print(
                f"[red]No bot may pin in chat {chat_id}: snapshots (SNAPSHOT_INTERVAL_SECONDS="
                f"{interval:g}) pin their manifest there, which takes the administrator right "
                'can_edit_messages ("Edit messages of others"). Give it to at least one bot '
                "in that chat: until then no snapshot is written.[/red]"
            )
            continue
        note = f"; lacking can_edit_messages: {', '.join(lacking)}" if lacking else ""
        console.print(
            f"Snapshot pins in chat {chat_id}: bots {', '.join(pinners)} may pin "
            f"(can_edit_messages){note}"
        )
    return ok


def check_admin_count(settings: Any, console: Console) -> None:
    """A warning when BOT_TOKENS holds more bots than a channel takes admins."""
    count = len(settings.bot_tokens)
    if count <= CHANNEL_ADMIN_LIMIT:
        return
    console.print(
        f"[yellow]Warning: BOT_TOKENS holds {count} bots, but a channel takes at most "
        f"{CHANNEL_ADMIN_LIMIT} administrators (Telegram answers TOO_MANY_ADMIN; reported "
        "by teldrive #258, not in Telegram's documentation): the bots past that cannot be "
        "made administrators of a storage chat, and fail in it.[/yellow]"
    )


async def check_fill(settings: Any, console: Console) -> bool:
    """Each storage chat's messages against CHAT_MESSAGE_LIMIT (a warning
    from 80 %), and the messages left in the chats for good. False when no
    chat takes new files: every upload is then refused (507)."""
    from app.db.chat_fill import ChatFillRepository
    from app.db.engine import create_engine, create_sessionmaker
    from app.db.gc import GcRepository
    from app.db.migrations import schema_is_current
    from app.db.session import session_scope

    engine = create_engine(settings.database_url)
    try:
        if not await schema_is_current(engine):
            console.print("Storage chats' fill: not checked (the database is not migrated)")
            return True
        async with session_scope(create_sessionmaker(engine)) as session:
            known = await ChatFillRepository(session).all()
            left = await GcRepository(session).left_count()
    except Exception as exc:  # the bots' checks above stand on their own
        console.print(f"Storage chats' fill: not checked (DATABASE_URL: {type(exc).__name__})")
        return True
    finally:
        await engine.dispose()
    limit = settings.chat_message_limit
    full = [chat_id for chat_id in settings.chat_ids if limit and known.get(chat_id, 0) >= limit]
    for chat_id in settings.chat_ids:
        _print_fill(console, chat_id, known.get(chat_id), limit)
    console.print(
        f"Messages left in the storage chats for good: {left} (no longer needed, but "
        "posted more than 48 hours before their deletion came, or refused by Telegram: no "
        "bot may delete them; docs/trash.md)"
    )
    if full and len(full) == len(settings.chat_ids):
        console.print(
            "[red]Every storage chat is full: uploads are refused (507) until a storage chat "
            'is added (deploy/README.md, "Adding a storage chat").[/red]'
        )
        return False
    return True


def _print_fill(console: Console, chat_id: int, messages: int | None, limit: int) -> None:
    if messages is None:
        console.print(f"Storage chat {chat_id}: messages not known yet (no post seen there)")
        return
    if not limit:
        console.print(f"Storage chat {chat_id}: {messages:,} messages (CHAT_MESSAGE_LIMIT=0)")
        return
    share = 100 * messages / limit
    line = f"Storage chat {chat_id}: {messages:,} of {limit:,} messages ({share:.0f} %)"
    if messages >= limit:
        console.print(
            f"[red]{line}: full, it takes no new files; the other chats carry on "
            '(deploy/README.md, "Adding a storage chat")[/red]'
        )
    elif messages >= WARN_FRACTION * limit:
        console.print(
            f"[yellow]Warning: {line}, past {WARN_FRACTION:.0%} of CHAT_MESSAGE_LIMIT: add a "
            'storage chat before it fills (deploy/README.md, "Adding a storage chat")[/yellow]'
        )
    else:
        console.print(line)
