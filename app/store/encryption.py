"""Encryption at rest, the store's side (docs/encryption.md): sealing new
chunks when master keys are configured, and opening sealed ones.

`app.sealing.frames` and `app.sealing.keys` import `cryptography`, which a
service without keys never loads: they are imported here only when a chunk
is sealed or opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from app.store.errors import EncryptionKeyUnavailable

if TYPE_CHECKING:
    from app.sealing.frames import FrameOpener, SealedBody
    from app.sealing.keys import Keyring

log = structlog.get_logger("app.store.encryption")


@dataclass(frozen=True, slots=True)
class ChunkKeys:
    """A new chunk's data key (kept in memory only) and how it is recorded."""

    data_key: bytes = field(repr=False)
    key_id: str
    wrapped: bytes = field(repr=False)


class Encryption:
    """The configured master keys (None: new chunks are stored as plaintext;
    sealed ones cannot be opened)."""

    def __init__(self, keyring: Keyring | None) -> None:
        self._keyring = keyring

    @property
    def enabled(self) -> bool:
        """Whether new chunks are sealed."""
        return self._keyring is not None

    @property
    def current_key_id(self) -> str | None:
        return None if self._keyring is None else self._keyring.current.id

    def new_chunk(self) -> ChunkKeys:
        """A fresh data key, wrapped under the current master key."""
        from app.sealing.keys import new_data_key, wrap

        assert self._keyring is not None, "encryption is off"
        master = self._keyring.current
        data_key = new_data_key()
        return ChunkKeys(data_key, master.id, wrap(master, data_key))

    def seal_copy(self, data_key: bytes, data: bytes | bytearray) -> tuple[bytes, SealedBody]:
        """A new copy of a chunk: its salt, and its sealed stream (sealed as
        it is read; close it once sent)."""
        from app.sealing.frames import SealedBody
        from app.sealing.keys import copy_cipher, new_salt

        salt = new_salt()
        return salt, SealedBody(copy_cipher(data_key, salt), data)

    def data_key(self, chunk_id: int, key_id: str, wrapped: bytes) -> bytes:
        """A sealed chunk's data key; EncryptionKeyUnavailable if its master
        key is not configured (logged by id, never by its bytes)."""
        from app.sealing.keys import UnwrapFailed, unwrap

        master = None if self._keyring is None else self._keyring.get(key_id)
        if master is None:
            log.error("encryption_key_unavailable", chunk_id=chunk_id, key_id=key_id)
            raise EncryptionKeyUnavailable(key_id)
        try:
            return unwrap(master, wrapped)
        except UnwrapFailed:
            # Another key under the same id: as unusable as a missing one.
            log.error("encryption_key_mismatch", chunk_id=chunk_id, key_id=key_id)
            raise EncryptionKeyUnavailable(key_id) from None


def opener(data_key: bytes, salt: bytes, size: int, first: int, *, at: int = 0) -> FrameOpener:
    """Opens a copy's sealed stream from frame `first`, fed from sealed
    offset `at` on (app.sealing.frames.FrameOpener)."""
    from app.sealing.frames import FrameOpener
    from app.sealing.keys import copy_cipher

    return FrameOpener(copy_cipher(data_key, salt), size, first, at=at)
