"""The chunk writer: how a stream is cut into chunks, and the shared buffer budget."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.models import Chunk, GcEntry
from app.db.session import session_scope
from app.store.blocks import BLAKE3, block_hashes, hashes_root
from app.store.chunk_size import plan_chunk_size
from app.store.gc import GarbageCollector
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.chunk_pieces import ChunkPieces
from app.telegram.errors import PermanentError, TelegramError
from app.telegram.types import DocumentBody, StoredDocument
from tests.running_service import eventually

MiB = 1024 * 1024
CHUNK = 19 * MiB


@pytest.mark.parametrize(
    ("size", "lanes", "expected_chunks"),
    [
        (None, 6, None),  # unknown length: full chunks
        (5 * MiB, 6, 1),  # one chunk, stored as it is
        (CHUNK, 6, 1),
        (100 * MiB, 6, 6),  # 6 equal chunks instead of 5 full + a 5 MiB tail
        (120 * MiB, 6, 12),  # 7 would leave 5 bots idle for a round: 12 of 10 MiB
        (1024 * MiB, 6, 54),  # already a multiple of 6
        (CHUNK + 1, 6, 2),  # 6 chunks would be tiny: stay at 2
        (40 * MiB, 1, 3),
    ],
)
def test_plan_chunk_size(size: int | None, lanes: int, expected_chunks: int | None) -> None:
    chunk = plan_chunk_size(size, CHUNK, lanes)

    assert chunk <= CHUNK
    if size is None or expected_chunks is None:
        assert chunk == CHUNK
        return
    assert -(-size // chunk) == expected_chunks
    if expected_chunks > 1:
        # Equal chunks: the last one is at most one byte per chunk short.
        assert size - (expected_chunks - 1) * chunk >= chunk - expected_chunks


# --- the writer against a fake Telegram --------------------------------------------------


class FakeTelegram:
    """What the store needs from the dispatcher: sends, recorded; a gate to
    hold them; a failure to inject."""

    chat_ids = [-100]

    def __init__(self, bots: int = 3) -> None:
        self.bots = list(range(1, bots + 1))
        self.sent: list[bytes] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_after: int | None = None
        self.failed = asyncio.Event()
        self.failure: TelegramError = PermanentError("Bad Request: refused", status=400)
        self._ids = itertools.count(1)

    def usable_bots(self, chat_id: int | None = None) -> list[int]:
        return list(self.bots)

    def pool_size(self) -> int:
        return len(self.bots)

    def require_open_chats(self) -> list[int]:
        return list(self.chat_ids)  # none is full

    async def send_document(
        self,
        data: bytes | bytearray | ChunkPieces | DocumentBody,
        filename: str,
        *,
        caption: str | None = None,
        chat_id: int | None = None,
        replicas: object = None,
    ) -> StoredDocument:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            if self.fail_after is not None and len(self.sent) >= self.fail_after:
                self.failed.set()
                raise self.failure
            self.sent.append(document_bytes(data))
            message_id = next(self._ids)
            return StoredDocument(
                bot_id=self.bots[message_id % len(self.bots)],
                file_id=f"f{message_id}",
                file_unique_id=f"u{message_id}",
                chat_id=-100,
                message_id=message_id,
                size=len(data),
            )
        finally:
            self.in_flight -= 1


def document_bytes(data: bytes | bytearray | ChunkPieces | DocumentBody) -> bytes:
    """What Telegram would store: the bytes, or what a file-like body reads."""
    if isinstance(data, bytes | bytearray | ChunkPieces):
        return bytes(data)
    data.seek(0)
    return b"".join(iter(lambda: data.read(1 << 20) or b"", b""))


async def pieces(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def make_writer(
    telegram: FakeTelegram,
    sessionmaker: async_sessionmaker[AsyncSession],
    buffers: int,
    gc: GarbageCollector | None = None,
) -> ChunkWriter:
    gc = gc or GarbageCollector(telegram, sessionmaker)  # type: ignore[arg-type]
    return ChunkWriter(
        telegram,  # type: ignore[arg-type]
        sessionmaker,
        gc,
        UploadBuffers(buffers),
        chunk_size=4096,
        inline_threshold=100,
        owner="me",
    )


async def test_concurrent_writes_share_the_buffers_and_store_every_byte(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    telegram = FakeTelegram()
    writer = make_writer(telegram, sessionmaker, buffers=2)
    bodies = [random.Random(n).randbytes(5 * 4096 + n) for n in range(8)]

    written = await asyncio.gather(*(writer.write(pieces(body)) for body in bodies))

    assert telegram.peak_in_flight <= 2  # no more chunks in memory than buffers
    assert writer.buffers.in_use == 0
    for body, content in zip(bodies, written, strict=True):
        assert content.size == len(body)
        assert content.md5_hex == hashlib.md5(body).hexdigest()
    assert sorted(map(len, telegram.sent)) == sorted(
        len(chunk) for body in bodies for chunk in split(body, 4096)
    )


async def test_big_chunks_get_their_block_digests_from_the_uploads_own_hashing(
    sessionmaker: async_sessionmaker[AsyncSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks big enough to be hashed off the loop get their block digests
    in the same pass as the upload's MD5 and SHA-256: each chunk's must be
    what a read will check its blocks against, however the body was cut."""
    telegram = FakeTelegram()
    writer = make_writer(telegram, sessionmaker, buffers=3)
    writer.chunk_size = 2 * MiB + 12345  # neither whole windows nor whole blocks
    writer.use_block_digest(BLAKE3)
    body = random.Random(7).randbytes(5 * MiB + 777)

    async def second_pass(data: bytes | bytearray) -> bytes:
        raise AssertionError("a chunk's blocks were hashed in a pass of their own")

    monkeypatch.setattr("app.store.writer.block_hashes_off_loop", second_pass)
    content = await writer.write(pieces(body, 100_000))

    assert (content.md5_hex, content.sha256_hex) == (
        hashlib.md5(body).hexdigest(),
        hashlib.sha256(body).hexdigest(),
    )
    async with session_scope(sessionmaker) as session:
        rows = (
            await session.execute(select(Chunk.sha256, Chunk.block_hashes, Chunk.block_digest))
        ).all()
    expected = {
        (hashes_root(block_hashes(sent, BLAKE3)), block_hashes(sent, BLAKE3), BLAKE3)
        for sent in telegram.sent
    }
    assert len(telegram.sent) == 3
    assert {tuple(row) for row in rows} == expected


async def test_a_failed_chunk_releases_the_stored_ones_and_every_buffer(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    telegram = FakeTelegram()
    telegram.fail_after = 2
    gc = GarbageCollector(telegram, sessionmaker)  # type: ignore[arg-type]
    writer = make_writer(telegram, sessionmaker, buffers=3, gc=gc)

    with pytest.raises(PermanentError):
        await writer.write(pieces(bytes(10 * 4096)))
    await gc.stop()  # records what was handed over in memory

    assert writer.buffers.in_use == 0
    async with session_scope(sessionmaker) as session:
        assert await session.scalar(select(func.count()).select_from(Chunk)) == 0
        ledgered = await session.scalar(select(func.count()).select_from(GcEntry))
    assert ledgered == len(telegram.sent) == 2


async def test_a_cancelled_write_gives_its_buffers_back(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    telegram = FakeTelegram()
    telegram.gate.clear()  # Telegram never answers
    writer = make_writer(telegram, sessionmaker, buffers=2)
    task = asyncio.create_task(writer.write(pieces(bytes(8 * 4096))))
    # Both chunks at Telegram (their send intents written): the cancellation
    # meets them there, not halfway through a database call.
    await eventually(lambda: telegram.in_flight == 2)
    assert writer.buffers.in_use == 2

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert (writer.buffers.in_use, writer.buffers.waiting) == (0, 0)
    # The send intents' resolution outlives the cancelled sends.
    await writer.settle()


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]
