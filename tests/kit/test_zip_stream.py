"""The streamed ZIP (app/kit/zip_stream.py): read back by Python's zipfile
and Info-ZIP's unzip, byte for byte, its length known before it is
written, ZIP64 where the classic fields end, and no byte of a member that
is not the size announced."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import zipfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.kit.zip_stream import MemberChanged, ZipMember, member_path, zip_length, zip_stream

WHEN = datetime(2026, 12, 7, 13, 14, 16, tzinfo=UTC)
FILES = {
    "folder/a.txt": b"alpha",
    "folder/deep/b.bin": os.urandom(200_003),
    "folder/empty": b"",
    "folder/ünï/çødé.txt": "ünïcødé".encode(),
}


async def archive(
    files: dict[str, bytes], *, force_zip64: bool = False, block: int = 7000
) -> bytes:
    members = [ZipMember(name, len(data), WHEN) for name, data in files.items()]
    datas = list(files.values())

    async def open_member(index: int) -> AsyncIterator[bytes]:
        async def blocks() -> AsyncIterator[bytes]:
            data = datas[index]
            for start in range(0, len(data), block):
                yield data[start : start + block]

        return blocks()

    out = b"".join(
        [part async for part in zip_stream(members, open_member, force_zip64=force_zip64)]
    )
    assert len(out) == zip_length(members, force_zip64=force_zip64)
    return out


@pytest.mark.parametrize("force_zip64", [False, True], ids=["classic", "zip64"])
async def test_every_member_reads_back_exactly(force_zip64: bool, tmp_path: Path) -> None:
    data = await archive(FILES, force_zip64=force_zip64)
    with zipfile.ZipFile(io.BytesIO(data)) as unzipped:
        assert unzipped.testzip() is None
        assert {info.filename: unzipped.read(info) for info in unzipped.infolist()} == FILES
        info = unzipped.getinfo("folder/a.txt")
        assert info.date_time == (2026, 12, 7, 13, 14, 16)
        assert info.compress_type == zipfile.ZIP_STORED
    path = tmp_path / "a.zip"
    path.write_bytes(data)
    tested = await asyncio.to_thread(
        subprocess.run, ["unzip", "-t", str(path)], capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "No errors detected" in tested.stdout


async def test_a_member_of_another_length_stops_the_archive() -> None:
    members = [ZipMember("a", 10, WHEN)]

    async def shorter(_index: int) -> AsyncIterator[bytes]:
        async def blocks() -> AsyncIterator[bytes]:
            yield b"123456789"

        return blocks()

    with pytest.raises(MemberChanged):
        async for _ in zip_stream(members, shorter):
            pass


def test_past_4_gib_a_member_and_the_end_are_zip64() -> None:
    big = 5 * 2**30
    local = 30 + 3 + 20  # header, name, ZIP64 extra (two sizes)
    descriptor = 24  # 8-byte sizes
    central = 46 + 3 + 20  # header, name, ZIP64 extra (two sizes; offset 0 fits)
    end = 56 + 20 + 22  # the central directory starts past 4 GiB: ZIP64 end records
    assert zip_length([ZipMember("big", big, WHEN)]) == local + big + descriptor + central + end
    small = 30 + 3 + 3 + 16 + 46 + 3 + 22
    assert zip_length([ZipMember("one", 3, WHEN)]) == small


@given(st.text(max_size=40))
def test_member_paths_never_climb_out(path: str) -> None:
    safe = member_path(path)
    parts = safe.split("/")
    assert safe and ".." not in parts and "." not in parts and "" not in parts
    assert "\\" not in safe and not safe.startswith("/")
