"""Master keys, data keys and copy keys (envelope encryption).

A master key (ENCRYPTION_KEYS) only wraps: every chunk has a random 32-byte
data key, stored wrapped (RFC 3394 AES key wrap, which checks integrity as
it unwraps) beside its id. Every copy of a chunk has a random 16-byte salt,
and seals under HKDF-SHA256(data key, salt): each copy key seals one stream
only (app.sealing.frames), and replicas are unrelated ciphertexts.

Rotating a master key re-wraps data keys; no stored byte in Telegram changes.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

KEY_BYTES = 32
SALT_BYTES = 16
KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_COPY_INFO = b"teleuploader copy key v1"


class BadMasterKey(ValueError):
    """A configured master key is malformed (the message holds no key bytes)."""


class UnwrapFailed(Exception):
    """A wrapped data key did not unwrap under the master key named for it."""


@dataclass(frozen=True, slots=True)
class MasterKey:
    id: str
    secret: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Keyring:
    """The configured master keys: the first seals new chunks, all open."""

    keys: tuple[MasterKey, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise BadMasterKey("no encryption key given")

    @property
    def current(self) -> MasterKey:
        return self.keys[0]

    def get(self, key_id: str) -> MasterKey | None:
        return next((key for key in self.keys if key.id == key_id), None)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(key.id for key in self.keys)


def split_entries(text: str) -> list[str]:
    """`id:base64` entries separated by commas or lines; `#` starts a comment."""
    entries: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        entries.extend(part.strip() for part in line.split(",") if part.strip())
    return entries


def parse_keys(entries: Iterable[str], source: str) -> Keyring:
    """The keyring of `id:base64-32-bytes` entries; BadMasterKey names the
    entry by its position and id, never its bytes."""
    keys: list[MasterKey] = []
    for position, entry in enumerate(entries, start=1):
        key_id, colon, text = entry.partition(":")
        key_id = key_id.strip()
        where = f"{source}: entry {position}"
        if not colon:
            raise BadMasterKey(f"{where} is not of the form id:base64-32-bytes")
        if not KEY_ID.match(key_id):
            raise BadMasterKey(f"{where}: a key id is 1-32 of A-Z a-z 0-9 _ . -")
        try:
            secret = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise BadMasterKey(f"{where} (id {key_id}): the key is not valid base64") from None
        if len(secret) != KEY_BYTES:
            raise BadMasterKey(
                f"{where} (id {key_id}): the key is {len(secret)} bytes, not {KEY_BYTES}"
            )
        if any(key.id == key_id for key in keys):
            raise BadMasterKey(f"{where}: the id {key_id} is given twice")
        keys.append(MasterKey(key_id, secret))
    if not keys:
        raise BadMasterKey(f"{source}: no key given")
    return Keyring(tuple(keys))


def new_master_key_text(key_id: str) -> str:
    """A new master key as its `id:base64` line."""
    if not KEY_ID.match(key_id):
        raise BadMasterKey("a key id is 1-32 of A-Z a-z 0-9 _ . -")
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"


def new_data_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def wrap(master: MasterKey, data_key: bytes) -> bytes:
    return aes_key_wrap(master.secret, data_key)


def unwrap(master: MasterKey, wrapped: bytes) -> bytes:
    try:
        return aes_key_unwrap(master.secret, wrapped)
    except InvalidUnwrap:
        raise UnwrapFailed(f"a data key does not unwrap under master key {master.id}") from None


def copy_cipher(data_key: bytes, salt: bytes) -> AESGCM:
    """The cipher of one copy: its own key, from the chunk's data key and
    the copy's salt."""
    key = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=_COPY_INFO).derive(
        data_key
    )
    return AESGCM(key)
