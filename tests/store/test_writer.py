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
from app.store.chunk_size import SPREAD, plan_chunk_size, plan_chunks
from app.store.gc import GarbageCollector
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.chunk_pieces import ChunkPieces
from app.telegram.errors import PermanentError, TelegramError
from app.telegram.types import DocumentBody, StoredDocument
from tests.running_service import ServiceLauncher, eventually, payload

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
    # A stream of unknown length: chunks of 4096 bytes (past the first six,
    # a few bytes short: SPREAD).
    assert sorted(map(len, telegram.sent)) == sorted(
        length for body in bodies for length in spread_lengths(len(body), 4096)
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


def spread_lengths(total: int, chunk_size: int) -> list[int]:
    """The chunks a stream of unknown length is cut into."""
    plan = plan_chunks(None, chunk_size, lanes=3)
    lengths: list[int] = []
    while total > 0:
        lengths.append(min(total, plan.length(len(lengths))))
        total -= lengths[-1]
    return lengths


@pytest.mark.parametrize("size", [None, 40 * MiB + 5, 100 * MiB, 19 * MiB])
def test_a_streams_chunks_differ_in_size_from_one_to_the_next(size: int | None) -> None:
    """The official server spaces one bot's uploads of the same size by up to
    0.9 s (telegram-bot-api Client.cpp, on_cmd; bench/spacing_bench.py): the
    chunks of one stream differ, by a few bytes, and stay within CHUNK_SIZE
    and as equal as before."""
    max_chunk = 19 * MiB
    plan = plan_chunks(size, max_chunk, lanes=6)
    total = size if size is not None else 400 * MiB
    lengths: list[int] = []
    while sum(lengths) < total:
        lengths.append(min(plan.length(len(lengths)), total - sum(lengths)))

    assert max(lengths) <= max_chunk and sum(lengths) == total
    if size is None:
        # The first two per bot meet no spacing (a second of burst): whole.
        assert lengths[:12] == [max_chunk] * 12
    if size is None or size > max_chunk:
        body = lengths[12 if size is None else 0 : -1]  # the last takes what is left
        assert all(a != b for a, b in itertools.pairwise(body))
        assert max(body) - min(body) < SPREAD
    if size is not None and size > max_chunk:
        # As many chunks as the equal cut, the last no longer than the others.
        assert len(lengths) == -(-size // plan_chunk_size(size, max_chunk, 6))
        assert lengths[-1] <= min(lengths[:-1])
    if size is not None and size <= max_chunk:
        assert lengths == [size]


async def test_with_the_servers_upload_spacing_on_a_streams_chunks_are_not_held_back(
    launcher: ServiceLauncher,
) -> None:
    """One bot, a body cut into many chunks over 100,000 bytes: the official
    server's spacing of equal uploads (the simulator's `upload_spacing`)
    would hold most of them back; their sizes differ, so none waits, and
    one call at a time never meets its 429."""
    service = await launcher.start(
        bots=1, chunk_size=200_000, prepare=lambda sim: sim.configure(upload_spacing=True)
    )
    body = payload(16 * 200_000 + 5, seed=9)

    async with service.client() as http:
        known = await http.put("/api/files/known.bin", content=body, headers=service.auth)

        async def unknown_length() -> AsyncIterator[bytes]:
            for start in range(0, len(body), 65_536):
                yield body[start : start + 65_536]

        streamed = await http.put(
            "/api/files/streamed.bin", content=unknown_length(), headers=service.auth
        )

    assert known.status_code == streamed.status_code == 201
    [stats] = service.sim.stats().values()
    assert stats.calls["sendDocument"] >= 34
    assert (stats.spaced_uploads, stats.rate_limited) == (0, 0)
