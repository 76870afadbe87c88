"""Building test data: stored documents, chunks and object specs."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, func, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.compiled import CompiledStatement
from app.db.models import Base, Chunk, SpooledPart
from app.db.multipart import MultipartRepository
from app.db.repositories import ChunkRepository, ObjectSpec, PieceSpec
from app.db.session import session_scope
from app.db.spool import SpoolRepository
from app.telegram.types import StoredDocument


@dataclass(frozen=True)
class Database:
    """A test database reachable two ways: `url` for the app, `migration_url` for Alembic."""

    backend: str
    url: str
    migration_url: str


CHAT_ID = -1001234567890
_message_ids = itertools.count(1000)


def document(size: int = 100, bot_id: int = 111) -> StoredDocument:
    message_id = next(_message_ids)
    return StoredDocument(
        bot_id=bot_id,
        file_id=f"file-{message_id}",
        file_unique_id=f"unique-{message_id}",
        chat_id=CHAT_ID,
        message_id=message_id,
        size=size,
    )


@dataclass(frozen=True)
class StoredChunk:
    """A chunk a test stored: its id and size, and its one copy's document."""

    id: int
    size: int
    document: StoredDocument

    @property
    def bot_id(self) -> int:
        return self.document.bot_id

    @property
    def chat_id(self) -> int:
        return self.document.chat_id

    @property
    def message_id(self) -> int:
        return self.document.message_id

    @property
    def file_unique_id(self) -> str:
        return self.document.file_unique_id


async def add_chunks(
    sessionmaker: async_sessionmaker[AsyncSession], sizes: Sequence[int]
) -> list[StoredChunk]:
    """Pending chunks of one copy each, committed (as the uploader commits each one)."""
    async with session_scope(sessionmaker) as session:
        repo = ChunkRepository(session)
        stored = []
        for size in sizes:
            doc = document(size)
            chunk = await repo.add_pending(doc, hashlib.sha256(b"%d" % size).hexdigest())
            stored.append(StoredChunk(chunk.id, size, doc))
        return stored


def whole_chunks(chunks: Sequence[Chunk | StoredChunk]) -> list[PieceSpec]:
    return [PieceSpec(chunk_id=c.id, offset=0, length=c.size) for c in chunks]


def spec(
    key: str,
    pieces: Sequence[PieceSpec] = (),
    *,
    bucket: str = "bucket",
    inline_data: bytes | None = None,
    etag: str = '"d41d8cd98f00b204e9800998ecf8427e"',
) -> ObjectSpec:
    size = len(inline_data) if inline_data is not None else sum(p.length for p in pieces)
    return ObjectSpec(
        bucket=bucket,
        key=key,
        name=key.rsplit("/", 1)[-1],
        content_type="application/octet-stream",
        size=size,
        etag=etag,
        md5=etag.strip('"'),
        user_metadata={"origin": "test"},
        inline_data=inline_data,
        pieces=tuple(pieces),
    )


async def count(session: AsyncSession, model: type[Base]) -> int:
    return await session.scalar(select(func.count()).select_from(model)) or 0


_WRITES = ("insert", "update", "delete")


class LockWaits:
    """Tells when a transaction of `engine` is waiting for a lock that another
    open transaction holds: the proof that the other one's lock works, without
    guessing how long that takes.

    Postgres: a backend of this database waits for a lock (pg_stat_activity).
    SQLite: a connection is running a write statement. Its single write lock
    makes that statement wait while another transaction that has written is
    open, so call `wait` only when the one holding the lock is idle.

    Make it before the waiting transaction starts (SQLite counts statements as
    they begin).
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._writing: set[int] = set()  # ids of connections with a write running
        if self._sqlite:
            sync_engine = engine.sync_engine
            event.listen(sync_engine, "before_cursor_execute", self._before)
            event.listen(sync_engine, "after_cursor_execute", self._after)
            event.listen(sync_engine, "handle_error", self._failed)

    def _before(self, conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().lower().startswith(_WRITES):
            self._writing.add(id(conn))

    def _after(self, conn: Connection, *_: Any) -> None:
        self._writing.discard(id(conn))

    def _failed(self, context: Any) -> None:
        self._writing.discard(id(context.connection))

    async def _someone_waits(self) -> bool:
        if self._sqlite:
            return bool(self._writing)
        async with self._engine.connect() as connection:
            waiting = await connection.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
        return bool(waiting)

    async def wait(self, within: float = 10.0) -> None:
        """Until some transaction waits for a lock; fail after `within` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not await self._someone_waits():
            if loop.time() > deadline:
                raise AssertionError(f"no transaction waited for a lock within {within}s")
            await asyncio.sleep(0.01)


@contextmanager
def key_queries() -> Iterator[list[str]]:
    """The SQL statements on api_keys that any engine in this process runs meanwhile."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "api_keys" in statement:
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL every engine in this process runs meanwhile (the service's too),
    and the statements run on a driver's own connection (app.db.compiled),
    which SQLAlchemy's events do not see."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    on_driver = CompiledStatement.parameters

    def record_on_driver(compiled: CompiledStatement, values: Mapping[str, Any]) -> tuple[Any, ...]:
        seen.append(" ".join(compiled.sql.split()))
        return on_driver(compiled, values)

    event.listen(Engine, "before_cursor_execute", record)
    CompiledStatement.parameters = record_on_driver  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        CompiledStatement.parameters = on_driver  # type: ignore[method-assign]
        event.remove(Engine, "before_cursor_execute", record)


# --- pending objects (app.db.pending) ------------------------------------------------

FLUSHED = 1000  # part 1, already in Telegram
SPOOLED = 600  # part 2, still in the spool


def etag(size: int) -> str:
    return f'"{hashlib.md5(b"%d" % size).hexdigest()}"'


async def pending_object(
    sessionmaker: async_sessionmaker[AsyncSession], key: str = "k"
) -> tuple[int, int, int]:
    """An object of a flushed part and a spooled one, completed: (object
    id, the flushed part's chunk id, the spooled part's spool row id)."""
    (chunk,) = await add_chunks(sessionmaker, [FLUSHED])
    async with session_scope(sessionmaker) as session:
        repo = MultipartRepository(session)
        upload = await repo.create(bucket="b", key=key, content_type="x/y", user_metadata={})
        await repo.put_part(upload.id, 1, size=FLUSHED, etag=etag(1), pieces=whole_chunks([chunk]))
        await SpoolRepository(session).put(
            upload.id,
            2,
            size=SPOOLED,
            etag=etag(2),
            path="i/p.part",
            owner="i",
            bucket="b",
            key=key,
        )
        # Part 3 is left out of the completion: it goes at once.
        await SpoolRepository(session).put(
            upload.id, 3, size=10, etag=etag(3), path="i/q.part", owner="i", bucket="b", key=key
        )
    async with session_scope(sessionmaker) as session:
        row = await MultipartRepository(session).complete(
            upload.id, [(1, etag(1)), (2, etag(2))], name=key, allow_spooled=True
        )
        spool_id = await session.scalar(select(SpooledPart.id))
    assert spool_id is not None
    return row.id, chunk.id, spool_id
