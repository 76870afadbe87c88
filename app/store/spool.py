"""The staging spool: acknowledged bytes on local disk, waiting for Telegram.

A part is written to a file under SPOOL_DIR/<instance id>/, fsynced (file and
directory) and only then recorded in the database and acknowledged: after a
crash, the restarted service finds both the row and the bytes, and flushes
them. Files are written and read in a worker thread, so the event loop never
waits on the disk.

The spool has a size limit (SPOOL_MAX_BYTES). A writer reserves room for what
it is about to write; when there is none, or the disk is full, it is told so
(`SpoolFull`) and takes the synchronous path to Telegram instead: nothing fails
for lack of spool.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from app.store.errors import UploadTooLarge

log = structlog.get_logger("app.store.spool")

# Bytes gathered from the client before one write to the file.
WRITE_BATCH = 1024 * 1024
# Bytes all writers together may hold gathered: past it, a writer writes what
# it has at once. Memory stays bounded per process however many clients
# stream into the spool (small writes are the price, only under that load).
GATHER_BUDGET = 8 * WRITE_BATCH
# A file no row names, in the directory of an instance taken for dead, is
# removed only once it is this old (its last write). That instance may only be
# stalled (a VM pause, a database failover) between publishing a part's file
# and writing its row: once it resumes, the row names the file and the part
# is acknowledged. No stall outlasts an hour; a dead writer's leftovers wait
# that long for a later sweep (Tuning.unnamed_spool_file_age_seconds).


class SpoolFull(Exception):
    """No room on the disk for the rest of a part. `received` streams the
    whole part: the bytes already taken from the client (read back from the
    partial file, which it then deletes), then the rest of the client's
    stream, so the caller can send it another way."""

    def __init__(self, received: AsyncIterator[bytes]) -> None:
        super().__init__("the staging spool's disk is full")
        self.received = received


@dataclass(frozen=True, slots=True)
class SpooledFile:
    path: str  # relative to the spool's root
    size: int
    md5_hex: str


class Spool:
    def __init__(self, root: Path, *, max_bytes: int, instance_id: str) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.instance_id = instance_id
        self._own_dir = root / instance_id
        self.used = 0  # bytes in files plus bytes reserved for writes under way
        self.gathered = 0  # bytes received by writers and not yet written

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    async def open(self) -> None:
        await asyncio.to_thread(self._own_dir.mkdir, parents=True, exist_ok=True)

    def disk(self) -> tuple[int, int] | None:
        """The spool's filesystem: (bytes free to the service, its size); None
        without a spool, or before its directory exists. One statvfs(2): cheap
        enough for every scrape."""
        if not self.enabled:
            return None
        try:
            usage = shutil.disk_usage(self.root)
        except OSError:
            return None
        return usage.free, usage.total

    def reserve(self, size: int) -> bool:
        if not self.enabled or self.used + size > self.max_bytes:
            return False
        self.used += size
        return True

    def unreserve(self, size: int) -> None:
        self.used = max(0, self.used - size)

    def account(self, sizes: Iterable[int]) -> None:
        """Count files that were already on disk at start (adopted rows)."""
        self.used += sum(sizes)

    async def write(
        self,
        stream: AsyncIterator[bytes],
        *,
        reserved: int,
        max_size: int | None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> SpooledFile:
        """Write a stream to a new file and make it durable.

        `reserved` bytes were reserved by the caller and stay counted for the
        file it becomes. Raises SpoolFull (with the bytes received so far, for
        the caller to send elsewhere) if the stream outgrows the reservation
        or the disk fills; UploadTooLarge past `max_size`.
        """
        name = f"{self.instance_id}/{secrets.token_hex(12)}.part"
        final = self.root / name
        temporary = final.with_suffix(".tmp")
        md5 = hashlib.md5(usedforsecurity=False)
        size = 0
        batch: list[bytes] = []
        batch_size = 0
        try:
            handle = await asyncio.to_thread(open, temporary, "wb")
            try:
                async for data in stream:
                    if not data:
                        continue
                    size += len(data)
                    if max_size is not None and size > max_size:
                        raise UploadTooLarge(max_size)
                    md5.update(data)
                    if on_bytes is not None:
                        on_bytes(len(data))
                    batch.append(bytes(data))
                    batch_size += len(data)
                    self.gathered += len(data)
                    if size > reserved:
                        # The payload decoders hold a body to its declared size.
                        raise ValueError("a spooled part outgrew its declared size")
                    if batch_size >= WRITE_BATCH or self.gathered > GATHER_BUDGET:
                        await asyncio.to_thread(_write_all, handle, batch)
                        self.gathered -= batch_size
                        batch, batch_size = [], 0
                await asyncio.to_thread(_write_all, handle, batch)
                await asyncio.to_thread(_sync_file, handle)
            finally:
                # What was not written is the caller's now (SpoolFull's replay) or gone.
                self.gathered -= batch_size
                batch_size = 0
                await asyncio.to_thread(handle.close)
            await asyncio.to_thread(_publish, temporary, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                await _unlink(temporary)
                raise
            log.warning("spool_disk_full", path=str(self.root))
            self.unreserve(reserved)
            raise SpoolFull(_replay(temporary, batch, stream)) from None
        except BaseException:
            self.unreserve(reserved)
            await _unlink(temporary)
            raise
        if size < reserved:
            self.unreserve(reserved - size)
        return SpooledFile(path=name, size=size, md5_hex=md5.hexdigest())

    async def read_into(self, path: str, offset: int, target: memoryview) -> None:
        """Fill `target` with the file's bytes from `offset` on."""
        await asyncio.to_thread(_read_range_into, self.root / path, offset, target)

    async def delete(self, paths: Iterable[str]) -> None:
        """Delete spool files and give their room back. A file already gone
        was counted out by whoever deleted it."""
        for path in paths:
            self.unreserve(await asyncio.to_thread(_unlink_counted, self.root / path))

    async def remove_unreferenced(
        self,
        referenced: set[str],
        live_owners: set[str],
        *,
        min_age: float,
    ) -> int:
        """Delete files no row names, last written `min_age` seconds ago or
        more, in directories of instances that are not running (their writes
        under way died with them); return how many."""
        return await asyncio.to_thread(
            self._remove_unreferenced, referenced, live_owners, time.time() - min_age
        )

    def _remove_unreferenced(
        self, referenced: set[str], live_owners: set[str], written_before: float
    ) -> int:
        removed = 0
        if not self.root.is_dir():
            return 0
        for directory in self.root.iterdir():
            if not directory.is_dir() or directory.name in live_owners:
                continue
            for file in directory.iterdir():
                if f"{directory.name}/{file.name}" in referenced:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if file.stat().st_mtime >= written_before:
                        continue  # its instance may be stalled, its row still to come
                    file.unlink()
                    removed += 1
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when empty
        return removed


def _write_all(handle: object, pieces: list[bytes]) -> None:
    for piece in pieces:
        handle.write(piece)  # type: ignore[attr-defined]


def _sync_file(handle: object) -> None:
    handle.flush()  # type: ignore[attr-defined]
    os.fsync(handle.fileno())  # type: ignore[attr-defined]


def _publish(temporary: Path, final: Path) -> None:
    """Give the file its final name and make the name durable too."""
    os.replace(temporary, final)
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _unlink_counted(path: Path) -> int:
    """Delete a file; its size, or 0 if it was not there."""
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


async def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        await asyncio.to_thread(path.unlink, True)


async def _replay(
    temporary: Path, batch: list[bytes], rest: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """A part a full disk interrupted: what reached the file, the batch that
    did not, then what the client has not sent yet; the file is deleted as
    soon as it has been read back."""
    try:
        with contextlib.suppress(FileNotFoundError):
            file = await asyncio.to_thread(open, temporary, "rb")
            try:
                while block := await asyncio.to_thread(file.read, WRITE_BATCH):
                    yield block
            finally:
                await asyncio.to_thread(file.close)
    finally:
        await _unlink(temporary)
    for piece in batch:
        yield piece
    async for piece in rest:
        yield piece


def _read_range_into(path: Path, offset: int, target: memoryview) -> None:
    with open(path, "rb") as file:
        file.seek(offset)
        done = 0
        while done < len(target):
            count = file.readinto(target[done:])
            if not count:
                raise OSError(f"spool file {path.name} ends at {offset + done} bytes")
            done += count
