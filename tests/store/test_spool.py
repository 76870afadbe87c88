"""The staging spool on disk: durable files, its size limit, a full disk."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config.tuning import UNNAMED_SPOOL_FILE_AGE_SECONDS
from app.store import spool as spool_module
from app.store.errors import UploadTooLarge
from app.store.spool import Spool, SpoolFull

# Postgres too: the spool's rows, adopted after a crash (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends


async def stream(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def drain(source: AsyncIterator[bytes]) -> bytes:
    return b"".join([piece async for piece in source])


@pytest.fixture
async def spool(tmp_path: Path) -> Spool:
    spool = Spool(tmp_path / "spool", max_bytes=1000, instance_id="me")
    await spool.open()
    return spool


async def test_a_written_part_is_a_file_with_its_md5(spool: Spool) -> None:
    assert spool.reserve(10)
    written = await spool.write(stream(b"hello", b"world"), reserved=10, max_size=None)

    assert (written.size, written.md5_hex) == (10, hashlib.md5(b"helloworld").hexdigest())
    assert (spool.root / written.path).read_bytes() == b"helloworld"
    assert written.path.startswith("me/")
    assert spool.used == 10
    part = bytearray(4)
    await spool.read_into(written.path, 3, memoryview(part))
    assert part == b"lowo"

    await spool.delete([written.path, written.path])  # twice: counted once
    assert spool.used == 0
    assert not (spool.root / written.path).exists()


def test_reservations_stop_at_the_limit(spool: Spool) -> None:
    assert spool.reserve(600)
    assert not spool.reserve(401)
    assert spool.reserve(400)
    assert not spool.reserve(1)
    assert not Spool(spool.root, max_bytes=0, instance_id="x").reserve(1)


async def test_a_failed_write_leaves_no_file_and_gives_its_room_back(spool: Spool) -> None:
    assert spool.reserve(10)
    with pytest.raises(UploadTooLarge):
        await spool.write(stream(b"x" * 6, b"y" * 6), reserved=10, max_size=8)

    assert spool.used == 0
    assert list(spool.root.rglob("*")) == [spool.root / "me"]


async def test_a_full_disk_hands_back_every_byte_received(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool_module, "WRITE_BATCH", 4)
    real_write = spool_module._write_all
    writes = 0

    def write_until_full(handle: object, pieces: list[bytes]) -> None:
        nonlocal writes
        writes += 1
        if writes == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(handle, pieces)

    monkeypatch.setattr(spool_module, "_write_all", write_until_full)
    pieces = [bytes([n]) * 3 for n in range(6)]
    assert spool.reserve(18)

    with pytest.raises(SpoolFull) as full:
        await spool.write(stream(*pieces), reserved=18, max_size=None)
    rest = await drain(full.value.received)

    # What reached the file, what did not, and what the client had not sent
    # yet, in order; the temporary file is gone and the room given back.
    assert rest == b"".join(pieces)
    assert spool.used == 0
    assert list((spool.root / "me").iterdir()) == []


async def test_only_dead_instances_lose_their_unreferenced_files(spool: Spool) -> None:
    for owner, name in [("me", "a"), ("alive", "b"), ("dead", "kept"), ("dead", "stray")]:
        (spool.root / owner).mkdir(exist_ok=True)
        (spool.root / owner / f"{name}.part").write_bytes(b"x")
    age(spool.root / "dead" / "stray.part", UNNAMED_SPOOL_FILE_AGE_SECONDS + 60)

    removed = await spool.remove_unreferenced(
        {"dead/kept.part"}, {"me", "alive"}, min_age=UNNAMED_SPOOL_FILE_AGE_SECONDS
    )

    assert removed == 1
    left = sorted(str(p.relative_to(spool.root)) for p in spool.root.rglob("*.part"))
    assert left == ["alive/b.part", "dead/kept.part", "me/a.part"]


async def test_a_young_unnamed_file_of_an_instance_taken_for_dead_stays(spool: Spool) -> None:
    # The instance may only be stalled (issue 49) between publishing the
    # file and writing its row: once it resumes, the part is acknowledged.
    (spool.root / "stalled").mkdir()
    young = spool.root / "stalled" / "just-published.part"
    young.write_bytes(b"x")
    age(young, 60)  # a stall of a minute

    assert (
        await spool.remove_unreferenced(set(), {"me"}, min_age=UNNAMED_SPOOL_FILE_AGE_SECONDS) == 0
    )
    assert young.exists()


def age(path: Path, seconds: float) -> None:
    """Make the file's last write `seconds` ago."""
    when = time.time() - seconds
    os.utime(path, (when, when))


async def test_many_slow_writers_hold_one_budget_not_a_batch_each(tmp_path: Path) -> None:
    """Forty clients that each sent most of a write batch and then stalled
    (a slow link, a paused tus upload) must not each keep it in memory."""
    writers, piece, pieces = 40, 64 * 1024, spool_module.WRITE_BATCH // (64 * 1024) - 1
    spool = Spool(
        tmp_path / "spool", max_bytes=writers * spool_module.WRITE_BATCH, instance_id="me"
    )
    await spool.open()
    stalled = asyncio.Semaphore(0)
    go_on = asyncio.Event()

    async def slow_client(seed: int) -> AsyncIterator[bytes]:
        for index in range(pieces):
            yield bytes([seed, index % 256]) * (piece // 2)
        stalled.release()
        await go_on.wait()
        yield b"end"

    size = pieces * piece + 3
    assert spool.reserve(writers * size)
    tracemalloc.start()
    try:
        tasks = [
            asyncio.create_task(spool.write(slow_client(n), reserved=size, max_size=None))
            for n in range(writers)
        ]
        for _ in range(writers):
            await stalled.acquire()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    go_on.set()
    written = await asyncio.gather(*tasks)

    # Each writer keeps at most the piece it is handling beyond the shared budget.
    assert held < spool_module.GATHER_BUDGET + writers * piece + 4 * 1024 * 1024, held
    assert [w.size for w in written] == [size] * writers
    assert spool.gathered == 0
    first = (spool.root / written[0].path).read_bytes()
    assert first == b"".join(bytes([0, i % 256]) * (piece // 2) for i in range(pieces)) + b"end"
