"""What one stored object's fields may hold, for the APIs to check before they
read a body (the database would refuse it only at commit, after the upload).

Both APIs refuse anything beyond these with their own 4xx; the columns in
app/db/models/ are sized from the same numbers.
"""

from __future__ import annotations

from typing import Final

from app.db.models import (
    MAX_CONTENT_TYPE_LENGTH,
    MAX_KEY_LENGTH,
    MAX_NAME_LENGTH,
    MAX_PART_NUMBER,
    MAX_PROPERTY_NAME_LENGTH,
    MAX_PROPERTY_NAMESPACE_LENGTH,
)

#: User metadata (``x-amz-meta-*`` names and values, in bytes of UTF-8), as S3
#: limits it.
MAX_USER_METADATA_BYTES: Final = 2048


def key_bytes(key: str) -> int | None:
    """An S3 key's length as S3 counts it (MAX_KEY_LENGTH is in these units),
    bytes of UTF-8; None if it is no text S3 can carry (a lone surrogate)."""
    try:
        return len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return None


__all__ = [
    "MAX_CONTENT_TYPE_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_PART_NUMBER",
    "MAX_PROPERTY_NAMESPACE_LENGTH",
    "MAX_PROPERTY_NAME_LENGTH",
    "MAX_USER_METADATA_BYTES",
    "key_bytes",
]
