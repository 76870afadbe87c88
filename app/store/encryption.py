"""Encryption at rest, the store's side (docs/encryption.md): sealing new
chunks when master keys are configured or the request gave a customer key
(S3 SSE-C), and opening sealed ones.

`app.sealing.frames`, `app.sealing.keys` and `app.sealing.customer` import
`cryptography`, which a service without keys does not load until a customer
key comes: they are imported here only when a chunk is sealed or opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from app.sealing import CUSTOMER_KEY_ID
from app.store.errors import CustomerKeyMismatch, CustomerKeyRequired, EncryptionKeyUnavailable

if TYPE_CHECKING:
    from app.sealing.frames import FrameOpener, SealedBody
    from app.sealing.keys import Keyring

log = structlog.get_logger("app.store.encryption")

# The customer key of the request being served (S3 SSE-C), if it gave one. A
# context variable, not a parameter: it is the request's, and travels with
# it into the chunk writer's tasks (each starts with a copy of the context)
# and the reader's unwrapping, without threading it through every layer.
_customer_key: ContextVar[bytes | None] = ContextVar("customer_key", default=None)


@contextmanager
def customer_key(key: bytes | None) -> Iterator[None]:
    """Within the block, chunks written are wrapped under `key` (None:
    as without it) and chunks wrapped under it open."""
    token = _customer_key.set(key)
    try:
        yield
    finally:
        _customer_key.reset(token)


@dataclass(frozen=True, slots=True)
class ChunkKeys:
    """A new chunk's data key (kept in memory only) and how it is recorded."""

    data_key: bytes = field(repr=False)
    key_id: str
    wrapped: bytes = field(repr=False)


def customer_key_given() -> bool:
    """Whether the request being served gave a customer key: its bytes must
    then be sealed before they are kept anywhere (not inline in the
    database, not in the spool)."""
    return _customer_key.get() is not None


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
    def seals_new_chunks(self) -> bool:
        """Whether a chunk written now is sealed: master keys are configured,
        or the request gave a customer key."""
        return self._keyring is not None or customer_key_given()

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the configured master keys (none: encryption is off)."""
        return () if self._keyring is None else self._keyring.ids

    @property
    def current_key_id(self) -> str | None:
        return None if self._keyring is None else self._keyring.current.id

    def new_chunk(self) -> ChunkKeys:
        """A fresh data key, wrapped under the request's customer key if it
        gave one, else under the current master key."""
        from app.sealing.keys import new_data_key, wrap

        customer = _customer_key.get()
        if customer is not None:
            from app.sealing import customer as customer_keys

            data_key = new_data_key()
            return ChunkKeys(data_key, CUSTOMER_KEY_ID, customer_keys.wrap(customer, data_key))
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

        if key_id == CUSTOMER_KEY_ID:
            return _customer_data_key(wrapped)
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


def _customer_data_key(record: bytes) -> bytes:
    from app.sealing import customer as customer_keys

    customer = _customer_key.get()
    if customer is None:
        raise CustomerKeyRequired()
    try:
        return customer_keys.unwrap(customer, record)
    except customer_keys.WrongCustomerKey:
        raise CustomerKeyMismatch() from None


def customer_key_matches(key: bytes, record: bytes) -> bool:
    """Whether `key` is the customer key a chunk's record was wrapped under."""
    from app.sealing import customer as customer_keys

    return customer_keys.matches(key, record)


def opener(data_key: bytes, salt: bytes, size: int, first: int, *, at: int = 0) -> FrameOpener:
    """Opens a copy's sealed stream from frame `first`, fed from sealed
    offset `at` on (app.sealing.frames.FrameOpener)."""
    from app.sealing.frames import FrameOpener
    from app.sealing.keys import copy_cipher

    return FrameOpener(copy_cipher(data_key, salt), size, first, at=at)
