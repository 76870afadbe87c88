"""The flexible checksum of a byte range of a stored object: what a part
made by UploadPartCopy keeps, so that it has one as an uploaded part does.

A copy is metadata only (the part points into the source's chunks), so its
bytes were never seen; they are read back here, streamed through the
checksum block by block (at most the download budget's prefetch in memory,
as any GetObject). The source's own checksum is used instead when it is of
exactly these bytes: the whole object, in the same algorithm, FULL_OBJECT.
"""

from __future__ import annotations

from app.kit.checksums import b64, new_checksum
from app.kit.consumer_abort import CONSUMER_ABORT
from app.store.errors import ContentUnavailable
from app.store.service import FULL_OBJECT, ObjectInfo, ObjectStore


async def range_checksum(
    objects: ObjectStore, source: ObjectInfo, start: int, end: int, algorithm: str
) -> str:
    """The base64 `algorithm` checksum of bytes [start, end) of `source`.

    Raises ObjectNotFound if the source was replaced (the copy is retried),
    ContentUnavailable if Telegram cannot give the bytes now."""
    known = source.checksum
    if (
        known is not None
        and (start, end) == (0, source.size)
        and known.algorithm == algorithm
        and known.type == FULL_OBJECT
    ):
        return known.value
    checksum = new_checksum(algorithm)
    if checksum is None:
        raise ValueError(f"unsupported checksum algorithm {algorithm!r}")
    inline = objects.inline_range(source, start, end)
    if inline is not None:
        checksum.update(inline)
        return b64(checksum.digest())
    # With the request's abort hook a failed read would cut the client's
    # connection and end the stream short, and a short read would pass for
    # the part's checksum: without it, the stream raises instead.
    hook = CONSUMER_ABORT.set(None)
    read = 0
    try:
        async for block in await objects.open_range(source, start, end):
            checksum.update(block)
            read += len(block)
    finally:
        CONSUMER_ABORT.reset(hook)
    if read != end - start:
        raise ContentUnavailable(
            f"{source.bucket}/{source.key} gave {read} of {end - start} bytes to checksum"
        )
    return b64(checksum.digest())
