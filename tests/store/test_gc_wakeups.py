"""The object store wakes the garbage collector only when a write handed it
chunks: a GC round (two transactions) per small PUT cost more than the PUT."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store.encryption import Encryption
from app.store.gc import GarbageCollector
from app.store.object_write import ObjectWrite
from app.store.reader import RangeReader
from app.store.service import ObjectStore
from app.store.writer import ChunkWriter, WrittenContent
from tests.db.helpers import add_chunks, whole_chunks

Sessions = async_sessionmaker[AsyncSession]


class CountingGc:
    def __init__(self) -> None:
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    async def release_chunks(self, *_: Any, **__: Any) -> None:
        raise AssertionError("nothing is discarded here")


def content(data: bytes | None = None, pieces: Any = ()) -> WrittenContent:
    size = len(data) if data is not None else sum(p.length for p in pieces)
    return WrittenContent(
        size=size,
        md5_hex=hashlib.md5(data or b"").hexdigest(),
        sha256_hex=hashlib.sha256(data or b"").hexdigest(),
        pieces=list(pieces),
        inline_data=data,
    )


@pytest.fixture
def gc() -> CountingGc:
    return CountingGc()


@pytest.fixture
async def store(sessionmaker: Sessions, gc: CountingGc) -> AsyncIterator[ObjectStore]:
    store = ObjectStore(
        sessionmaker,
        # Nothing here writes or reads chunk bytes: only the sealing, off.
        cast(ChunkWriter, SimpleNamespace(encryption=Encryption(None))),
        cast(RangeReader, None),
        cast(GarbageCollector, gc),
    )
    yield store
    await store.close()  # it may hold database connections


async def test_only_writes_that_release_chunks_wake_the_collector(
    sessionmaker: Sessions, store: ObjectStore, gc: CountingGc
) -> None:

    async def put(key: str, written: WrittenContent) -> None:
        await store.commit(written, ObjectWrite(bucket="b", key=key, name=key))

    await put("small", content(b"x" * 2048))
    await put("small", content(b"y"))  # replacing inline data releases no chunk
    chunks = await add_chunks(sessionmaker, [10])
    await put("big", content(pieces=whole_chunks(chunks)))
    assert await store.delete("b", "small")
    assert not await store.delete("b", "missing")
    assert gc.wakes == 0

    await put("big", content(b"now small"))  # the chunk goes to the ledger
    assert gc.wakes == 1
    chunks = await add_chunks(sessionmaker, [20])
    await put("big", content(pieces=whole_chunks(chunks)))  # inline: nothing released
    assert gc.wakes == 1
    assert await store.delete("b", "big")
    assert gc.wakes == 2
