"""The flusher's memory: a failed send leaves no chunk buffer behind.

SQLite only: what is measured is what Python keeps alive, not any SQL.
"""

from __future__ import annotations

import asyncio
import gc
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store import flusher as flusher_module
from app.store.spool import Spool
from app.telegram.errors import TransientError
from app.telegram.types import StoredDocument
from tests.store.test_flusher import CHUNK, flusher_for, part_bytes, spooled_upload
from tests.store.test_writer import FakeTelegram

Sessions = async_sessionmaker[AsyncSession]


@pytest.fixture
async def spool(tmp_path: Path) -> Spool:
    spool = Spool(tmp_path, max_bytes=10**6, instance_id="me")
    await spool.open()
    return spool


class _FlakyTelegram(FakeTelegram):
    """Every second send fails, `failures` times, each with an error of its
    own (as a real timeout is), then every send succeeds."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures_left = failures
        self.calls = 0

    async def send_document(self, *args: Any, **kwargs: Any) -> StoredDocument:
        self.calls += 1
        if self.failures_left and self.calls % 2 == 0:
            self.failures_left -= 1
            raise TransientError("sendDocument: ReadError")
        return await super().send_document(*args, **kwargs)


async def test_a_failed_send_leaves_no_chunk_buffer_behind(
    sessionmaker: Sessions, spool: Spool
) -> None:
    # A failed send's traceback keeps its frames until the cyclic GC runs,
    # which large buffers do not hasten (they are not GC objects): a view of
    # the chunk's buffer left in such a frame kept the buffer with it. A
    # soak grew by 92 MiB of these in 3 minutes (issue 55). Collections held
    # off here, as they are between rare full collections in the service.
    telegram = _FlakyTelegram(failures=8)
    parts = [random.Random(n).randbytes(3000) for n in range(6)]
    upload_id = await spooled_upload(sessionmaker, spool, parts)
    flusher = flusher_for(telegram, sessionmaker, spool)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        async with asyncio.timeout(30):
            await flusher.flushed(upload_id, [1, 2, 3, 4, 5, 6])
        buffers = [
            trace.size
            for trace in tracemalloc.take_snapshot()
            .filter_traces([tracemalloc.Filter(True, flusher_module.__file__)])
            .traces
            if trace.size >= CHUNK // 2
        ]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert telegram.failures_left == 0
    assert await part_bytes(sessionmaker, telegram, upload_id) == parts
    assert buffers == []
    await flusher.stop(grace=1)
