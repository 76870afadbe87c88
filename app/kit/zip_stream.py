"""A ZIP archive written as a stream, with its length known before the first
byte: the files are stored (no compression) and each one's CRC-32 follows
its bytes in a data descriptor, so nothing is held but the current block,
no temporary file is written, and a folder of any size goes out as one
response with a Content-Length.

Why not a library: stream-zip, the well-kept one, stores files uncompressed
only when given each file's CRC-32 before its bytes (which we learn only
while streaming) or else buffers the whole file in memory; its compressed
mode streams but cannot tell the archive's length beforehand, spends CPU
deflating media that does not shrink, and its async interface runs the
writer in the default thread pool, holding a thread while each file's
bytes are fetched. The format written here is small: PKWARE's APPNOTE.TXT
6.3.10, sections 4.3 (structure), 4.4 (fields), 4.5.3 (ZIP64 extra field).

ZIP64: a member of 4 GiB - 1 or more gets 8-byte sizes (in its local
header's extra field, its data descriptor and the central directory), a
member at an offset past 4 GiB - 1 gets its offset in the central
directory's ZIP64 field, and an archive past the classic limits (65,535
members, 4 GiB of central directory or offset) ends with the ZIP64 end
records. `force_zip64` writes every member and the end that way (tests
use it to read the ZIP64 structures without writing 4 GiB).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_DESCRIPTOR_32 = struct.Struct("<IIII")
_DESCRIPTOR_64 = struct.Struct("<IIQQ")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END_64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR_64 = struct.Struct("<IIQI")
_END = struct.Struct("<IHHHHIIH")

_LOCAL_SIGNATURE = 0x04034B50
_DESCRIPTOR_SIGNATURE = 0x08074B50
_CENTRAL_SIGNATURE = 0x02014B50
_END_64_SIGNATURE = 0x06064B50
_LOCATOR_64_SIGNATURE = 0x07064B50
_END_SIGNATURE = 0x06054B50
_ZIP64_EXTRA = 0x0001

# Bit 3: CRC-32 and sizes follow the data; bit 11: the name is UTF-8.
_FLAGS = 0x0008 | 0x0800
_STORED = 0
_VERSION = 20  # 2.0: what a stored member with a data descriptor needs
_VERSION_64 = 45  # 4.5: ZIP64
_MADE_BY_UNIX = 3 << 8
_REGULAR_FILE = 0o100644 << 16  # external attributes: a Unix file, rw-r--r--
_MAX_16 = 0xFFFF
_MAX_32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class ZipMember:
    """A file of the archive: its path inside it, size and time."""

    name: str
    size: int
    modified: datetime


class MemberChanged(Exception):
    """A member's stream gave more or fewer bytes than its announced size:
    the archive's length, already sent, would be a lie."""


#: Opens member `index`'s bytes.
OpenMember = Callable[[int], Awaitable[AsyncIterator[bytes]]]


def member_path(path: str) -> str:
    """A path safe to unpack: no empty, "." or ".." segments (no escape from
    the folder it unpacks into), no backslashes (a separator on Windows)."""
    parts = [p.replace("\\", "_") for p in path.split("/") if p not in ("", ".", "..")]
    return "/".join(parts) or "_"


@dataclass(frozen=True, slots=True)
class _Layout:
    name: bytes
    size: int
    offset: int
    wide: bool  # 8-byte sizes
    far: bool  # the offset in the ZIP64 extra field
    dos_time: int
    dos_date: int

    @property
    def local_length(self) -> int:
        return _LOCAL.size + len(self.name) + (20 if self.wide else 0)

    @property
    def descriptor_length(self) -> int:
        return (_DESCRIPTOR_64 if self.wide else _DESCRIPTOR_32).size

    @property
    def central_extra(self) -> int:
        fields = (2 if self.wide else 0) + (1 if self.far else 0)
        return 4 + 8 * fields if fields else 0

    @property
    def central_length(self) -> int:
        return _CENTRAL.size + len(self.name) + self.central_extra


def _dos(moment: datetime) -> tuple[int, int]:
    if moment.year < 1980:
        return 0, (1 << 5) | 1  # 1980-01-01, the format's first day
    year = min(moment.year, 2107)
    time = (moment.hour << 11) | (moment.minute << 5) | (moment.second // 2)
    date = ((year - 1980) << 9) | (moment.month << 5) | moment.day
    return time, date


def _layout(members: Sequence[ZipMember], force_zip64: bool) -> tuple[list[_Layout], int, int]:
    """Each member's place; the central directory's offset and length."""
    layouts: list[_Layout] = []
    offset = 0
    for member in members:
        name = member.name.encode("utf-8", "surrogatepass")
        time, date = _dos(member.modified)
        layout = _Layout(
            name=name,
            size=member.size,
            offset=offset,
            wide=force_zip64 or member.size >= _MAX_32,
            far=force_zip64 or offset >= _MAX_32,
            dos_time=time,
            dos_date=date,
        )
        layouts.append(layout)
        offset += layout.local_length + member.size + layout.descriptor_length
    central = sum(layout.central_length for layout in layouts)
    return layouts, offset, central


def _end_is_wide(count: int, central_offset: int, central_length: int, force: bool) -> bool:
    return force or count >= _MAX_16 or central_offset >= _MAX_32 or central_length >= _MAX_32


def zip_length(members: Sequence[ZipMember], *, force_zip64: bool = False) -> int:
    """The archive's length in bytes, before any is written."""
    layouts, central_offset, central_length = _layout(members, force_zip64)
    end = _END.size
    if _end_is_wide(len(layouts), central_offset, central_length, force_zip64):
        end += _END_64.size + _LOCATOR_64.size
    return central_offset + central_length + end


async def zip_stream(
    members: Sequence[ZipMember], open_member: OpenMember, *, force_zip64: bool = False
) -> AsyncIterator[bytes]:
    """The archive's bytes: each member's header, its bytes as
    `open_member(index)` streams them, its data descriptor; then the
    central directory. Raises MemberChanged if a member's length is not
    the one announced."""
    layouts, central_offset, central_length = _layout(members, force_zip64)
    crcs: list[int] = []
    for index, layout in enumerate(layouts):
        yield _local_header(layout)
        crc = 0
        sent = 0
        async for block in await open_member(index):
            sent += len(block)
            if sent > layout.size:
                raise MemberChanged(f"{members[index].name!r} is longer than {layout.size} bytes")
            crc = zlib.crc32(block, crc)
            yield block
        if sent != layout.size:
            raise MemberChanged(f"{members[index].name!r} ended at {sent} of {layout.size} bytes")
        crcs.append(crc)
        if layout.wide:
            yield _DESCRIPTOR_64.pack(_DESCRIPTOR_SIGNATURE, crc, layout.size, layout.size)
        else:
            yield _DESCRIPTOR_32.pack(_DESCRIPTOR_SIGNATURE, crc, layout.size, layout.size)
    yield b"".join(_central_header(layout, crc) for layout, crc in zip(layouts, crcs, strict=True))
    yield _end(len(layouts), central_offset, central_length, force_zip64)


def _local_header(layout: _Layout) -> bytes:
    extra = struct.pack("<HHQQ", _ZIP64_EXTRA, 16, 0, 0) if layout.wide else b""
    sizes = _MAX_32 if layout.wide else 0
    return (
        _LOCAL.pack(
            _LOCAL_SIGNATURE,
            _VERSION_64 if layout.wide else _VERSION,
            _FLAGS,
            _STORED,
            layout.dos_time,
            layout.dos_date,
            0,  # CRC-32: in the data descriptor
            sizes,
            sizes,
            len(layout.name),
            len(extra),
        )
        + layout.name
        + extra
    )


def _central_header(layout: _Layout, crc: int) -> bytes:
    values: list[int] = []
    if layout.wide:
        values += [layout.size, layout.size]  # uncompressed, then compressed
    if layout.far:
        values.append(layout.offset)
    extra = b""
    if values:
        extra = struct.pack(f"<HH{len(values)}Q", _ZIP64_EXTRA, 8 * len(values), *values)
    version = _VERSION_64 if layout.wide or layout.far else _VERSION
    size = _MAX_32 if layout.wide else layout.size
    return (
        _CENTRAL.pack(
            _CENTRAL_SIGNATURE,
            _MADE_BY_UNIX | version,
            version,
            _FLAGS,
            _STORED,
            layout.dos_time,
            layout.dos_date,
            crc,
            size,
            size,
            len(layout.name),
            len(extra),
            0,  # comment length
            0,  # disk number
            0,  # internal attributes
            _REGULAR_FILE,
            _MAX_32 if layout.far else layout.offset,
        )
        + layout.name
        + extra
    )


def _end(count: int, central_offset: int, central_length: int, force: bool) -> bytes:
    out = b""
    if _end_is_wide(count, central_offset, central_length, force):
        end_64_offset = central_offset + central_length
        out += _END_64.pack(
            _END_64_SIGNATURE,
            _END_64.size - 12,  # the record's size, less its first two fields
            _MADE_BY_UNIX | _VERSION_64,
            _VERSION_64,
            0,
            0,
            count,
            count,
            central_length,
            central_offset,
        )
        out += _LOCATOR_64.pack(_LOCATOR_64_SIGNATURE, 0, end_64_offset, 1)
        return out + _END.pack(_END_SIGNATURE, 0, 0, _MAX_16, _MAX_16, _MAX_32, _MAX_32, 0)
    return out + _END.pack(_END_SIGNATURE, 0, 0, count, count, central_length, central_offset, 0)
