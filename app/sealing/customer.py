"""Customer-provided keys (S3 SSE-C, docs/encryption.md#sse-c).

A chunk written with a customer key has a random data key, as every sealed
chunk, but it is wrapped by a key derived from the customer's key instead of
a master key. The record kept in `chunks.sealed_data_key` is

    salt (16) | check (32) | wrapped data key (40)

where HKDF-SHA256(customer key, salt) gives 64 bytes: the first 32 wrap, the
last 32 are the check. The check tells a wrong key from the right one at
once (a 403 before any byte is fetched) and, being one-way, says nothing of
the key; the customer key itself is never stored.
"""

from __future__ import annotations

import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from app.sealing.keys import KEY_BYTES, SALT_BYTES, new_salt

CHECK_BYTES = 32
_INFO = b"teleuploader sse-c v1"


class WrongCustomerKey(Exception):
    """The customer key given is not the one the chunk was written with."""


def _derive(customer_key: bytes, salt: bytes) -> tuple[bytes, bytes]:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=KEY_BYTES + CHECK_BYTES, salt=salt, info=_INFO
    ).derive(customer_key)
    return derived[:KEY_BYTES], derived[KEY_BYTES:]


def wrap(customer_key: bytes, data_key: bytes) -> bytes:
    """The record of a data key wrapped under a customer key (a fresh salt)."""
    salt = new_salt()
    kek, check = _derive(customer_key, salt)
    return salt + check + aes_key_wrap(kek, data_key)


def matches(customer_key: bytes, record: bytes) -> bool:
    """Whether `customer_key` is the key `record` was wrapped under."""
    salt, check = record[:SALT_BYTES], record[SALT_BYTES : SALT_BYTES + CHECK_BYTES]
    return hmac.compare_digest(_derive(customer_key, salt)[1], check)


def unwrap(customer_key: bytes, record: bytes) -> bytes:
    """The data key; WrongCustomerKey unless the key is the one it was wrapped under."""
    salt = record[:SALT_BYTES]
    kek, check = _derive(customer_key, salt)
    if not hmac.compare_digest(check, record[SALT_BYTES : SALT_BYTES + CHECK_BYTES]):
        raise WrongCustomerKey("the customer key does not match")
    try:
        return aes_key_unwrap(kek, record[SALT_BYTES + CHECK_BYTES :])
    except InvalidUnwrap:
        raise WrongCustomerKey("the customer key does not match") from None
