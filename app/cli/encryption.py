"""`teleuploader encryption ...`: master keys, and what the database holds
under each (docs/encryption.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from app.cli.database import CliError, with_database
from app.config.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from app.db.snapshots import SealUse

T = TypeVar("T")


def add_commands(
    commands: Any,
    usage: Callable[[argparse.ArgumentParser], int],
    client_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """`encryption new-key | status | rotate | migrate` under `commands`;
    `client_options` adds --url and --key (migrate goes through the service)."""
    encryption = commands.add_parser("encryption", help="encryption at rest: keys and rotation")
    actions = encryption.add_subparsers(title="encryption commands", metavar="ACTION")
    new_key = actions.add_parser(
        "new-key", help="print a new master key as an ENCRYPTION_KEYS entry (id:base64)"
    )
    new_key.add_argument("id", help="the key's id: 1-32 of A-Z a-z 0-9 _ . -")
    new_key.set_defaults(handler=cmd_new_key)
    status = actions.add_parser(
        "status", help="chunks and objects per master key id, and plaintext ones"
    )
    status.set_defaults(handler=cmd_status)
    rotate = actions.add_parser(
        "rotate",
        help="re-wrap every data key under the current (first) master key: database only, "
        "resumable, safe while the service runs",
    )
    rotate.add_argument("--batch", type=int, default=500, help="chunks per transaction")
    rotate.set_defaults(handler=cmd_rotate)
    migrate = actions.add_parser(
        "migrate",
        help="ask the running service (an admin key) to seal the chunks stored before "
        "encryption was on, within its pacing",
    )
    migrate.add_argument("--wait", action="store_true", help="follow the pass until it ends")
    client_options(migrate)
    migrate.set_defaults(handler=cmd_migrate)
    encryption.set_defaults(handler=lambda _args: usage(encryption))


def cmd_new_key(args: argparse.Namespace) -> int:
    from app.sealing.keys import BadMasterKey, new_master_key_text

    try:
        print(new_master_key_text(args.id))
    except BadMasterKey as exc:
        raise CliError(str(exc)) from None
    print(
        "(add it first in ENCRYPTION_KEYS to seal new chunks with it; keep a copy: "
        "without it, what it sealed cannot be read)",
        file=sys.stderr,
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from app.db.sealing import KeyCount, SealingRepository
    from app.db.session import session_scope
    from app.db.snapshots import seal_use

    async def run(
        settings: Settings, sessions: async_sessionmaker[AsyncSession]
    ) -> tuple[list[KeyCount], SealUse | None]:
        async with session_scope(sessions) as session:
            return await SealingRepository(session).counts(), await seal_use(session)

    settings, (counts, use) = with_database(run)
    keyring = settings.keyring()
    configured = [] if keyring is None else list(keyring.ids)
    current = None if keyring is None else keyring.current.id
    print(f"{'key id':<34} {'chunks':>10} {'objects':>10}  state")
    for count in counts:
        if count.key_id is None:
            name, state = "(plaintext)", ""
        else:
            name = count.key_id
            state = (
                "current"
                if count.key_id == current
                else "configured"
                if count.key_id in configured
                else "NOT CONFIGURED: unreadable"
            )
        print(f"{name:<34} {count.chunks:>10} {count.objects:>10}  {state}")
    for line in _restore_lines(use, configured):
        print(line)
    with_chunks = {count.key_id for count in counts}
    for key_id in configured:
        if key_id == current:
            continue
        if key_id in with_chunks:
            print(f"{key_id}: in use by chunks (run `teleuploader encryption rotate`)")
        elif use is not None and use.needs(key_id):
            print(f"{key_id}: NOT removable: {_snapshot_needs(use)}")
        else:
            print(f"{key_id}: removable: no chunk, pinned snapshot or journal batch uses it")
    return 0


def _restore_lines(use: SealUse | None, configured: list[str]) -> list[str]:
    """What `restore` would open now: the pinned snapshot's key and its
    journal batches' (app.db.snapshots.SealUse)."""
    if use is None:
        return ["restore: no snapshot is pinned"]

    def named(key_id: str | None) -> str:
        if key_id is None:
            return "(plaintext)"
        return key_id if key_id in configured else f"{key_id} (NOT CONFIGURED: unreadable)"

    snapshot = named(use.snapshot_key) if use.snapshot_key_known else "(not recorded)"
    batches = ", ".join(f"{named(k)} x{n}" for k, n in sorted(use.batch_keys.items(), key=str))
    return [
        f"restore: the pinned snapshot of {use.taken_at.isoformat()} is sealed under {snapshot}",
        f"restore: its journal batches: {batches or 'none'}",
    ]


def _snapshot_needs(use: SealUse) -> str:
    return (
        f"the pinned snapshot of {use.taken_at.isoformat()} or its journal batches need it "
        "(`teleuploader restore` opens them with it); once a snapshot is taken under the "
        "current key (`teleuploader snapshot`), it is not"
    )


def cmd_rotate(args: argparse.Namespace) -> int:
    from app.db.session import session_scope
    from app.db.snapshots import seal_use
    from app.store.key_rotation import Rotation, rotate

    def progress(done: Rotation) -> None:
        print(f"rotate: {done.rewrapped} re-wrapped", end="\r", file=sys.stderr, flush=True)

    async def run(settings: Settings, sessions: async_sessionmaker[AsyncSession]) -> Rotation:
        keyring = settings.keyring()
        if keyring is None:
            raise CliError("no master key: set ENCRYPTION_KEYS or ENCRYPTION_KEYS_FILE")
        done = await rotate(sessions, keyring, batch=max(1, args.batch), on_progress=progress)
        async with session_scope(sessions) as session:
            use = await seal_use(session)
        # Rotation re-wraps chunks' data keys only: the snapshot and journal
        # batches already in the chats stay sealed as they were sent.
        for key_id in keyring.ids:
            if key_id != keyring.current.id and use is not None and use.needs(key_id):
                print(f"rotate: keep {key_id}: {_snapshot_needs(use)}", file=sys.stderr)
        return done

    settings, done = with_database(run)
    keyring = settings.keyring()
    assert keyring is not None
    print(f"rotate: {done.rewrapped} data keys re-wrapped under {keyring.current.id}")
    if done.unavailable:
        print(
            f"rotate: {done.unavailable} chunks are under master keys that are not "
            "configured (see `teleuploader encryption status`); they stay as they are",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_migrate(args: argparse.Namespace, poll_seconds: float = 1.0) -> int:
    """Exit 0 when the pass (if followed) left nothing it could not seal."""
    import time

    import httpx

    if not args.key:
        raise CliError("an admin API key is needed: --key or TELEUPLOADER_KEY")
    path = "/api/admin/encryption/migrate"
    headers = {"Authorization": f"Bearer {args.key}"}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=30) as http:
            response = http.post(path)
            while True:
                if response.status_code not in (200, 202):
                    detail = response.json().get("detail", response.text[:200])
                    raise CliError(f"the service answered {response.status_code}: {detail}")
                status: dict[str, Any] = response.json()
                done = status["last_pass"] or {}
                print(
                    f"migrate: {done.get('sealed', 0)} sealed, {done.get('skipped', 0)} skipped, "
                    f"{status['plaintext_chunks']} plaintext chunks left",
                    file=sys.stderr,
                )
                if not args.wait or not done.get("running", False):
                    break
                time.sleep(poll_seconds)
                response = http.get(path)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach {args.url}: {exc}") from None
    if done.get("error"):
        raise CliError(f"the migration failed: {done['error']}")
    return 1 if args.wait and done.get("skipped") else 0
