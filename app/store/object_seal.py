"""How an object's bytes are sealed, as the S3 layer answers it: under the
master keys (SSE-S3), under a customer's key (SSE-C), or not at all; and
whether a customer key given opens it (docs/encryption.md#sse-c)."""

from __future__ import annotations

from typing import NamedTuple

from app.sealing import CUSTOMER_KEY_ID
from app.store.encryption import customer_key_matches
from app.store.errors import CustomerKeyMismatch, CustomerKeyRequired


class ObjectSeal(NamedTuple):
    # Some chunk is sealed under a master key (and keys are configured).
    master: bool
    # The records of its chunks wrapped under a customer key.
    customer: tuple[bytes, ...]
    # Some chunk is not under a customer key (plaintext or master-sealed).
    other_chunks: bool = False

    @property
    def needs_customer_key(self) -> bool:
        return bool(self.customer)

    def check_customer_key(self, key: bytes | None) -> None:
        """CustomerKeyRequired if the object needs a customer key and none
        was given, CustomerKeyMismatch if the one given does not open every
        chunk wrapped under one."""
        if not self.customer:
            return
        if key is None:
            raise CustomerKeyRequired()
        if not self.opens_with(key):
            raise CustomerKeyMismatch()

    def opens_with(self, key: bytes) -> bool:
        """Whether `key` is the customer key of every chunk under one."""
        return all(customer_key_matches(key, record) for record in self.customer)


PLAIN = ObjectSeal(master=False, customer=())


def seal_from(rows: list[tuple[str | None, bytes | None]], *, master_keys: bool) -> ObjectSeal:
    """The seal of an object from its chunks' (key id, wrapped key) rows."""
    customer = tuple(wrapped for key_id, wrapped in rows if key_id == CUSTOMER_KEY_ID and wrapped)
    master = master_keys and any(key_id not in (None, CUSTOMER_KEY_ID) for key_id, _ in rows)
    other_chunks = any(key_id != CUSTOMER_KEY_ID for key_id, _ in rows)
    return ObjectSeal(master=master, customer=customer, other_chunks=other_chunks)
