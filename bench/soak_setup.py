"""What bench/soak.py runs the service with, and what it reads back.

The service's settings (replicas, several chats, encryption, the journal,
Postgres, any KEY=VALUE), its database (a SQLite file, or a fresh Postgres
database dropped afterwards), the queries the leak count needs on either,
and the memory probe: with `--tracemalloc`, a `sitecustomize` put on the
service's PYTHONPATH starts tracemalloc and writes, every minute, the
allocation sites that grew most since the first minute.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import CHAT_ID

# Storage chats beyond the first (the simulator serves them all).
EXTRA_CHATS = tuple(CHAT_ID - n for n in range(1, 16))
# A fixed master key: the soak's bytes are not secret.
ENCRYPTION_KEY = "soak:" + base64.b64encode(bytes(range(32))).decode()
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"

# Runs inside the service when --tracemalloc is given: tracemalloc from its
# first seconds on, then every minute the sites that grew most since the
# first minute, into
# SOAK_TRACEMALLOC_DIR/minute-N.txt (a thread, so it needs no hook in the app).
SITECUSTOMIZE = """
import os, threading, time, tracemalloc
_out = os.environ.get("SOAK_TRACEMALLOC_DIR")
if _out:
    def _probe():
        # Started once the service is up: traced from its start, it did not
        # answer /ready within the 60 s the soak waits, on a loaded machine.
        time.sleep(float(os.environ.get("SOAK_TRACEMALLOC_DELAY", "20")))
        tracemalloc.start(int(os.environ.get("SOAK_TRACEMALLOC_FRAMES", "8")))
        first = None
        minute = 0
        while True:
            time.sleep(60)
            minute += 1
            snap = tracemalloc.take_snapshot().filter_traces(
                (tracemalloc.Filter(False, tracemalloc.__file__),)
            )
            if first is None:
                first = snap
                continue
            lines = [f"traced now {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB"]
            for stat in snap.compare_to(first, "traceback")[:12]:
                lines.append(f"{stat.size_diff / 2**20:+.2f} MiB ({stat.count_diff:+d} blocks)")
                lines.extend("    " + line for line in stat.traceback.format()[-8:])
            with open(os.path.join(_out, f"minute-{minute}.txt"), "w") as f:
                f.write("\\n".join(lines) + "\\n")
    threading.Thread(target=_probe, name="soak-tracemalloc", daemon=True).start()
"""


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replicas", type=int, default=1, help="REPLICAS of the service")
    parser.add_argument("--chats", type=int, default=1, help="storage chats (STORAGE_CHAT_IDS)")
    parser.add_argument("--encryption", action="store_true", help="set ENCRYPTION_KEYS")
    parser.add_argument(
        "--journal-seconds",
        type=float,
        default=None,
        help="JOURNAL_SECONDS (default: the service's own)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="a fresh Postgres database (127.0.0.1:5432, dropped afterwards) instead of SQLite",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further setting of the service (repeat it), e.g. --env MALLOC_ARENA_MAX=2",
    )
    parser.add_argument(
        "--baseline", metavar="REF", help="serve the code at this git ref (the 'before' run)"
    )
    parser.add_argument(
        "--tracemalloc",
        metavar="DIR",
        type=Path,
        default=None,
        help="trace the service's allocations; top growth per minute into DIR (slows it)",
    )


def chat_ids(args: argparse.Namespace) -> list[int]:
    if not 1 <= args.chats <= 1 + len(EXTRA_CHATS):
        raise SystemExit(f"--chats: 1 to {1 + len(EXTRA_CHATS)}")
    return [CHAT_ID, *EXTRA_CHATS[: args.chats - 1]]


def simulator_chat_args(args: argparse.Namespace) -> list[str]:
    """The simulator serves CHAT_ID already; the others are added."""
    return [word for chat in chat_ids(args)[1:] for word in ("--chat-id", str(chat))]


def settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings the options stand for (on top of the soak's own)."""
    values = {
        "STORAGE_CHAT_IDS": ",".join(str(chat) for chat in chat_ids(args)),
        "REPLICAS": str(args.replicas),
    }
    if args.encryption:
        values["ENCRYPTION_KEYS"] = ENCRYPTION_KEY
    if args.journal_seconds is not None:
        values["JOURNAL_SECONDS"] = f"{args.journal_seconds:g}"
    for pair in args.env:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise SystemExit(f"--env {pair!r}: give KEY=VALUE")
        values[key] = value
    return values


def tracemalloc_env(directory: Path, code: Path | None) -> dict[str, str]:
    """The serve-only environment that loads the probe (after `code`, a
    baseline's tree, which must stay first on the path)."""
    directory.mkdir(parents=True, exist_ok=True)
    hook = directory / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = str(hook) if code is None else f"{code}:{hook}"
    return {"PYTHONPATH": path, "SOAK_TRACEMALLOC_DIR": str(directory)}


def describe(args: argparse.Namespace) -> str:
    """The settings of a run, in a line."""
    words = [
        f"REPLICAS {args.replicas}",
        f"{args.chats} chat(s)",
        "encrypted" if args.encryption else "plaintext",
        "Postgres" if args.postgres else "SQLite",
        f"JOURNAL_SECONDS {args.journal_seconds:g}"
        if args.journal_seconds is not None
        else "journal at its default",
        *args.env,
    ]
    if args.baseline:
        words.append(f"code at {args.baseline}")
    return ", ".join(words)


# --- the database ----------------------------------------------------------------------


@dataclass(frozen=True)
class Database:
    url: str  # DATABASE_URL
    sqlite_path: Path | None
    postgres_dsn: str | None

    def query(self, sql: str) -> int:
        """The first value of the first row (0 for none or NULL)."""
        rows = self.rows(sql)
        return int(rows[0][0] or 0) if rows else 0

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.sqlite_path is not None:
            connection = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=30)
            try:
                return [tuple(row) for row in connection.execute(sql).fetchall()]
            finally:
                connection.close()
        return asyncio.run(_pg_rows(str(self.postgres_dsn), sql))


async def _pg_rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    import asyncpg  # type: ignore[import-untyped]

    connection = await asyncpg.connect(dsn)
    try:
        return [tuple(row) for row in await connection.fetch(sql)]
    finally:
        await connection.close()


async def _pg_admin(sql: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(POSTGRES_ADMIN)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@contextlib.contextmanager
def database(args: argparse.Namespace, workdir: Path) -> Iterator[Database]:
    if not args.postgres:
        path = workdir / "soak.db"
        yield Database(f"sqlite+aiosqlite:///{path}", path, None)
        return
    name = f"soak_{secrets.token_hex(4)}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        dsn = f"postgresql://postgres@127.0.0.1:5432/{name}"
        yield Database(dsn.replace("postgresql://", "postgresql+asyncpg://", 1), None, dsn)
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


# (chat_id, message_id) of the messages the service keeps: every copy of the
# chunks that a live object or an unfinished multipart upload holds (REPLICAS
# of them each), and its metadata snapshots' and journal batches' own
# (`snapshot_messages`).
REFERENCED = (
    "SELECT chat_id, message_id FROM chunk_copies WHERE chunk_id IN "
    "(SELECT chunk_id FROM pieces UNION SELECT chunk_id FROM part_pieces) "
    "UNION ALL SELECT chat_id, message_id FROM snapshot_messages"
)


def referenced_messages(db: Database) -> int:
    """How many messages the service keeps (`REFERENCED`)."""
    return db.query(f"SELECT count(*) FROM ({REFERENCED}) AS referenced")


def unreferenced(db: Database, stored: dict[int, list[int]]) -> list[str]:
    """A line for every message Telegram still has that `referenced_messages`
    does not count, with what the database still knows of it: the first
    question when the leak count is not 0."""
    counted = {(int(chat), int(message)) for chat, message in db.rows(REFERENCED)}
    known: dict[tuple[int, int], str] = {}
    for chat, message, chunk, chunk_state, copy_state, created in db.rows(
        "SELECT cc.chat_id, cc.message_id, cc.chunk_id, c.state, cc.state, c.created_at "
        "FROM chunk_copies cc LEFT JOIN chunks c ON c.id = cc.chunk_id"
    ):
        known[(int(chat), int(message))] = (
            f"a copy ({copy_state}) of chunk {chunk} ({chunk_state}, created {created}) "
            "that no object or part holds"
        )
    for table in ("gc_ledger", "left_messages"):
        for chat, message, reason in db.rows(f"SELECT chat_id, message_id, reason FROM {table}"):
            known[(int(chat), int(message))] = f"in {table} ({reason})"
    return [
        f"chat {chat} message {message}: {known.get((chat, message), 'no row names it')}"
        for chat, messages in sorted(stored.items())
        for message in sorted(messages)
        if (chat, message) not in counted
    ]


def garbage_backlog(db: Database) -> int:
    """What the service has still to delete: ledgered messages, chunks of
    uploads that did not finish, and chats marked for a reconciliation (a
    send whose answer was lost may have left a message that no row knows of
    until that round ledgers it: app/store/reconcile.py)."""
    ledger = db.query("SELECT count(*) FROM gc_ledger")
    pending = db.query("SELECT count(*) FROM chunks WHERE state = 'pending'")
    unclean = db.query("SELECT count(*) FROM chat_watermarks WHERE unclean_since IS NOT NULL")
    return ledger + pending + unclean


def leftovers(db: Database) -> str:
    """What may explain messages no row references: those the service left
    for good (`left_messages`), sends whose outcome is unknown (`send_intents`,
    for reconciliation), copies not in state ok."""
    left = db.query("SELECT count(*) FROM left_messages")
    intents = db.query("SELECT count(*) FROM send_intents")
    not_ok = db.query("SELECT count(*) FROM chunk_copies WHERE state <> 'ok'")
    return f"left_messages {left}, send_intents {intents}, copies not ok {not_ok}"


def most_calls_per_lane(bots: dict[str, dict[str, object]]) -> int:
    """The most calls of one lane one token had in flight at once: uploads
    and posts in one lane, small calls (getFile, deleteMessage...) in the
    other, which the dispatcher runs beside it (target 1, as
    tests.running_service.assert_one_call_per_lane)."""
    return max(
        max(int(str(b["max_concurrent_posting_calls"])), int(str(b["max_concurrent_small_calls"])))
        for b in bots.values()
    )


def tracemalloc_report(directory: Path) -> str:
    """The last minute's top growth, or ''."""
    files = sorted(directory.glob("minute-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    return f"{files[-1].name}:\n{files[-1].read_text()}" if files else ""
