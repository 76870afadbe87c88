"""The master keys of encryption at rest, from ENCRYPTION_KEYS or
ENCRYPTION_KEYS_FILE (docs/encryption.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr

if TYPE_CHECKING:
    from app.sealing.keys import Keyring


def load_keyring(keys: SecretStr | None, keys_file: str | None) -> Keyring | None:
    """The keyring of `keys` or `keys_file` (None: neither), checked now so
    that a bad key stops the start with one line. Only then is
    `cryptography` imported."""
    if keys is not None and keys_file is not None:
        raise ValueError("ENCRYPTION_KEYS and ENCRYPTION_KEYS_FILE are both set: keep one of them")
    if keys is not None:
        text, source = keys.get_secret_value(), "ENCRYPTION_KEYS"
    elif keys_file is not None:
        source = f"ENCRYPTION_KEYS_FILE ({keys_file})"
        try:
            text = Path(keys_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ValueError(f"{source}: cannot be read: {reason}") from None
    else:
        return None
    from app.sealing.keys import BadMasterKey, parse_keys, split_entries

    try:
        return parse_keys(split_entries(text), source)
    except BadMasterKey as exc:
        raise ValueError(str(exc)) from None
