"""A copy read whole, from its first byte to its last, and checked on the
way: the scrub's deep checks and its repairs. A plaintext chunk's copy is
checked against its block hashes (app.store.blocks); a sealed chunk's copy
is opened frame by frame (docs/encryption.md), which is its check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app.db.copies import ChunkRow, CopyRow
from app.store import encryption
from app.store.blocks import BlockMismatch, WholeChunkCheck, digest_of
from app.store.encryption import Encryption
from app.store.locator import ChunkLocator, copy_ref

if TYPE_CHECKING:
    from app.sealing.frames import FrameOpener


class CopyBad(Exception):
    """The copy's bytes are not the chunk's."""


class WholeCopy:
    """Feed a copy's bytes in order; get the chunk's bytes back, checked.
    EncryptionKeyUnavailable (at once) if the chunk is sealed under a master
    key that is not configured."""

    def __init__(self, chunk: ChunkRow, copy: CopyRow, keys: Encryption) -> None:
        self._check: WholeChunkCheck | None = None
        self._opener: FrameOpener | None = None
        if chunk.seal_key_id is None:
            self._check = WholeChunkCheck(
                chunk.size, chunk.sha256, chunk.block_hashes, digest_of(chunk.block_digest)
            )
            return
        if copy.salt is None or chunk.sealed_data_key is None:
            raise CopyBad(f"copy {copy.id} of sealed chunk {chunk.id} has no salt")
        data_key = keys.data_key(chunk.id, chunk.seal_key_id, chunk.sealed_data_key)
        self._opener = encryption.opener(data_key, copy.salt, chunk.size, 0)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The chunk's bytes these complete (all of `data` for plaintext)."""
        from_opener = self._opener
        if from_opener is None:
            assert self._check is not None
            try:
                self._check.feed(data)
            except BlockMismatch as exc:
                raise CopyBad(str(exc)) from None
            yield data
            return
        from app.sealing.frames import FrameCorrupt

        try:
            for _, plain in from_opener.feed(data):
                yield plain
        except FrameCorrupt as exc:
            raise CopyBad(str(exc)) from None

    def finish(self) -> bytes | None:
        """A plaintext chunk's block digests (None: sealed); CopyBad unless
        the copy was whole and right."""
        if self._opener is not None:
            from app.sealing.frames import FrameCorrupt

            try:
                self._opener.finish()
            except FrameCorrupt as exc:
                raise CopyBad(str(exc)) from None
            return None
        assert self._check is not None
        try:
            return self._check.finish()
        except (BlockMismatch, ValueError) as exc:
            raise CopyBad(str(exc)) from None


async def read_whole(
    locator: ChunkLocator, chunk: ChunkRow, copy: CopyRow, keys: Encryption
) -> bytes:
    """The chunk's bytes from `copy`, fetched whole and checked: CopyBad if
    they are not the chunk's, TelegramError if Telegram did not give them."""
    data = bytearray()
    check = WholeCopy(chunk, copy, keys)
    async with locator.open_copy(copy_ref(copy), chunk.size, 0) as (_start, body):
        async for piece in body:
            for plain in check.feed(piece):
                data += plain
    check.finish()
    return bytes(data)
