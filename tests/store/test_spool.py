"""The staging spool on disk: durable files, its size limit, a full disk."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.store import spool as spool_module
from app.store.errors import UploadTooLarge
from app.store.spool import Spool, SpoolFull


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

    removed = await spool.remove_unreferenced({"dead/kept.part"}, {"me", "alive"})

    assert removed == 1
    left = sorted(str(p.relative_to(spool.root)) for p in spool.root.rglob("*.part"))
    assert left == ["alive/b.part", "dead/kept.part", "me/a.part"]
