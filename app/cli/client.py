"""The client side of the `teleuploader` command: upload, download, check.

Uploads and downloads stream (a file is never read whole into memory) and show
a rich progress bar with bytes, rate and ETA.
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, unquote

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from app.kit.bidi import escape_controls

BLOCK = 1024 * 1024


class ClientError(Exception):
    """A failure to report in one line."""


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def shown(name: str) -> str:
    """A name as rich prints it without acting on it: control characters
    spelt out, and no `[...]` taken for markup."""
    return escape(escape_controls(name))


def explain(response: httpx.Response) -> str:
    try:
        body = response.json()
        detail = f"{body.get('error')}: {body.get('detail')}"
    except ValueError:
        detail = response.text[:200]
    return f"the server answered {response.status_code} ({detail})"


class _ProgressFile:
    """A file whose reads advance a progress bar (httpx reads it in blocks)."""

    def __init__(self, file: BinaryIO, progress: Progress, task: TaskID) -> None:
        self._file = file
        self._progress = progress
        self._task = task

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size if size and size > 0 else BLOCK)
        self._progress.advance(self._task, len(data))
        return data

    def fileno(self) -> int:
        return self._file.fileno()

    def tell(self) -> int:
        return self._file.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)


@dataclass(frozen=True)
class Uploaded:
    """A file stored by `upload`: the local path and the service's answer."""

    path: Path
    file: dict[str, Any]

    @property
    def link(self) -> str:
        return str(self.file["download_url"])


def files_to_upload(names: list[str], *, recursive: bool) -> list[Path]:
    """The files named, a directory's files (every one under it) with
    `recursive`; checked before anything is sent."""
    found: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            if not recursive:
                raise ClientError(
                    f"{name} is a directory: pass --recursive to upload every file under it"
                )
            found.extend(sorted(p for p in path.rglob("*") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise ClientError(f"{name}: no such file")
    return found


def upload(paths: list[Path], *, url: str, key: str | None, console: Console) -> Iterator[Uploaded]:
    """Upload files as new files (POST /api/upload), one after another,
    yielding each as it is stored. The service keeps a file's own name (not
    its directory)."""
    if not key:
        raise ClientError("an API key is needed: pass --key or set TELEUPLOADER_KEY")
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=None, write=None)) as http:
        for path in paths:
            size = path.stat().st_size
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            with _progress(console) as progress, path.open("rb") as file:
                task = progress.add_task(f"upload {shown(path.name)}", total=size)
                wrapped: Any = _ProgressFile(file, progress, task)
                try:
                    response = http.post(
                        "/api/upload",
                        files={"file": (path.name, wrapped, mime)},
                        headers={"Authorization": f"Bearer {key}"},
                    )
                except httpx.HTTPError as exc:
                    raise ClientError(f"upload of {path} to {url} failed: {exc}") from None
            if response.status_code != 201:
                raise ClientError(f"upload of {path}: {explain(response)}")
            yield Uploaded(path, response.json())


def _public_id(reference: str) -> str:
    """Accept a public id or a whole download URL."""
    match = re.search(r"/f/([A-Za-z0-9_-]+)", reference)
    return match.group(1) if match else reference


def _filename(response: httpx.Response, fallback: str) -> str:
    header = response.headers.get("content-disposition", "")
    match = re.search(r"filename\*=UTF-8''([^;]+)", header) or re.search(
        r'filename="([^"]*)"', header
    )
    name = unquote(match.group(1)) if match else fallback
    # Never let the server pick a path outside the current directory.
    return os.path.basename(name) or fallback


@dataclass(frozen=True)
class Downloaded:
    path: Path
    public_id: str
    size: int
    sha256: str
    verified: bool


def download(
    reference: str,
    *,
    url: str,
    key: str | None,
    output: str | None,
    force: bool,
    console: Console,
) -> Downloaded:
    """Save a file; never over an existing one unless `force`. The bytes go
    to a temporary file beside the target, which replaces it only once the
    whole file arrived and its SHA-256 matched."""
    public_id = _public_id(reference)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if output is not None:
        _check_may_write(Path(output), force)
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=120)) as http:
        try:
            info = http.get(f"/file/{quote(public_id)}/info", headers=headers)
            if info.status_code != 200:
                raise ClientError(f"{public_id}: {explain(info)}")
            expected = info.json().get("sha256")
            with http.stream("GET", f"/f/{quote(public_id)}", headers=headers) as response:
                if response.status_code != 200:
                    response.read()
                    raise ClientError(f"{public_id}: {explain(response)}")
                target = Path(output or _filename(response, public_id))
                _check_may_write(target, force)
                digest, size = _save(response, target, expected, force, console)
        except httpx.HTTPError as exc:
            raise ClientError(f"download of {public_id} from {url} failed: {exc}") from None
    saved = shown(str(target))  # a name the service chose
    console.print(f"saved {saved} (SHA-256 verified)" if expected else f"saved {saved}")
    return Downloaded(target, public_id, size, digest, verified=bool(expected))


def _check_may_write(target: Path, force: bool) -> None:
    if target.is_dir():
        raise ClientError(f"{target} is a directory: give the file's path with -o")
    if target.exists() and not force:
        raise ClientError(f"{target} exists: pass --force to overwrite it, or -o to save elsewhere")


def _save(
    response: httpx.Response, target: Path, expected: str | None, force: bool, console: Console
) -> tuple[str, int]:
    total = int(response.headers.get("content-length", 0)) or None
    digest = hashlib.sha256()
    size = 0
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".part"
    )
    try:
        with _progress(console) as progress, os.fdopen(handle, "wb") as file:
            task = progress.add_task(f"download {target.name}", total=total)
            for block in _blocks(response):
                file.write(block)
                digest.update(block)
                size += len(block)
                progress.advance(task, len(block))
        if expected and digest.hexdigest() != expected:
            raise ClientError(f"{target}: SHA-256 does not match the server's ({expected})")
        # Checked again: the file may have appeared while the bytes came.
        _check_may_write(target, force)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return digest.hexdigest(), size


def _blocks(response: httpx.Response) -> Iterator[bytes]:
    yield from response.iter_bytes(BLOCK)


def check_bots(rows: list[dict[str, Any]], console: Console) -> bool:
    """Print the table of (bot, chat) pairs and list the pairs that fail;
    True when every bot can work in every storage chat."""
    table = Table(title="Bots in the storage chats")
    for column in ("bot id", "chat id", "username", "admin", "can post", "can delete", "problem"):
        # A narrow terminal wraps a value rather than cut it short.
        table.add_column(column, overflow="fold")
    failing: list[str] = []
    for row in rows:
        usable = row["admin"] and row["can_post"] and row["can_delete"] and not row["problem"]
        if not usable:
            failing.append(f"bot {row['bot_id']} in chat {row['chat_id']}")
        table.add_row(
            str(row["bot_id"]),
            str(row["chat_id"]),
            row["username"] or "-",
            _yes(row["admin"]),
            _yes(row["can_post"]),
            _yes(row["can_delete"]),
            row["problem"] or "",
        )
    console.print(table)
    if failing:
        console.print("[red]Failing: " + ", ".join(failing) + "[/red]")
    return not failing


def check_budget(settings: Any, console: Console) -> bool:
    """Say what the process-wide upload budget and the spool come to; False
    when the spool directory cannot be used."""
    import shutil

    mib = 1024 * 1024
    buffers = settings.upload_buffers
    console.print(
        f"Upload budget: {buffers} buffers x CHUNK_SIZE {settings.chunk_size / mib:g} MiB = "
        f"{buffers * settings.chunk_size / mib:.0f} MiB of upload memory at most"
    )
    if settings.spool_max_bytes == 0:
        console.print("Spool: off (SPOOL_MAX_BYTES=0): S3 parts wait for Telegram")
        return True
    spool = Path(settings.spool_path)
    existing = next((p for p in (spool, *spool.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK):
        console.print(f"[red]Spool: {spool} cannot be created or written by this user[/red]")
        return False
    free = shutil.disk_usage(existing).free
    console.print(
        f"Spool: {spool}, up to {settings.spool_max_bytes / mib / 1024:.1f} GiB "
        f"({free / mib / 1024:.1f} GiB free on its disk)"
    )
    if free < settings.spool_max_bytes:
        console.print(
            "[yellow]The disk has less free room than SPOOL_MAX_BYTES: parts will take the "
            "slower synchronous path when it fills.[/yellow]"
        )
    return True


def _yes(value: object) -> str:
    return "yes" if value else "NO"


async def inspect_bots(
    tokens: list[Any], *, chat_ids: list[int], api_base: str
) -> list[dict[str, Any]]:
    """getMe, then getChatMember in every storage chat, for every token: one
    row per (bot, chat)."""
    import asyncio

    from app.telegram.client import BotClient
    from app.telegram.errors import TelegramError

    async def one(token: Any) -> list[dict[str, Any]]:
        client = BotClient(token, api_base=api_base)
        rows = [
            {
                "bot_id": token.bot_id,
                "chat_id": chat_id,
                "username": None,
                "admin": False,
                "can_post": False,
                "can_delete": False,
                "can_edit": False,  # may pin (app/cli/chat_checks.py)
                "problem": None,
            }
            for chat_id in chat_ids
        ]
        try:
            try:
                me = await client.get_me()
            except TelegramError as exc:
                for row in rows:
                    row["problem"] = exc.description
                return rows
            for row in rows:
                row["username"] = f"@{me.username}" if me.username else None
                try:
                    member = await client.get_chat_member(row["chat_id"], token.bot_id)
                except TelegramError as exc:
                    row["problem"] = exc.description
                    continue
                row["admin"] = member.is_admin
                row["can_post"] = member.can_post_messages
                row["can_delete"] = member.can_delete_messages
                row["can_edit"] = member.can_edit_messages
                if not member.is_admin:
                    row["problem"] = f"not an admin of the chat (status {member.status})"
        finally:
            await client.aclose()
        return rows

    per_bot = await asyncio.gather(*(one(token) for token in tokens))
    return [row for rows in per_bot for row in rows]


async def audit_storage_chat(settings: Any, rows: list[dict[str, Any]], console: Console) -> None:
    """Warn about posts in the storage chats that the service did not make:
    reconciliation after an unclean stop would delete them. A warning only:
    it does not fail the check."""
    from app.db.engine import create_engine, create_sessionmaker
    from app.db.migrations import check_schema

    engine = create_engine(settings.database_url)
    try:
        try:
            await check_schema(engine)
        except Exception as exc:  # the check goes on without the database
            console.print(f"Foreign posts: not checked (database: {str(exc).splitlines()[0]})")
            return
        for chat_id in settings.chat_ids:
            await _audit_one_chat(settings, create_sessionmaker(engine), rows, chat_id, console)
    finally:
        await engine.dispose()


async def _audit_one_chat(
    settings: Any, sessionmaker: Any, rows: list[dict[str, Any]], chat_id: int, console: Console
) -> None:
    from app.store.channel_audit import audit_channel
    from app.telegram.client import BotClient
    from app.telegram.errors import TelegramError

    usable = {
        row["bot_id"]
        for row in rows
        if row["chat_id"] == chat_id
        and row["admin"]
        and row["can_post"]
        and row["can_delete"]
        and not row["problem"]
    }
    token = next((t for t in settings.bot_tokens if t.bot_id in usable), None)
    if token is None:
        console.print(f"Foreign posts in chat {chat_id}: not checked (no usable bot there)")
        return
    client = BotClient(token, api_base=settings.telegram_api_base)
    try:
        audit = await audit_channel(sessionmaker, client, chat_id)
    except TelegramError as exc:
        console.print(f"Foreign posts in chat {chat_id}: not checked (Telegram: {exc.description})")
        return
    finally:
        await client.aclose()
    if audit is None:
        console.print(
            f"Foreign posts in chat {chat_id}: none to judge yet (the service has not posted there)"
        )
    elif audit.foreign:
        console.print(
            f"[yellow]Warning: storage chat {chat_id} holds {audit.foreign} post(s) the service "
            f"did not make (among message ids {audit.watermark + 1} to {audit.probe_id - 1}). "
            "A storage chat must belong to TeleUploader alone: after an unclean stop, "
            "reconciliation deletes every message there that no chunk holds.[/yellow]"
        )
    else:
        console.print(
            f"Foreign posts in chat {chat_id}: none (every message there is the service's)"
        )
