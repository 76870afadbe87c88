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

__all__ = [
    "MAX_CONTENT_TYPE_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_PART_NUMBER",
    "MAX_PROPERTY_NAMESPACE_LENGTH",
    "MAX_PROPERTY_NAME_LENGTH",
    "MAX_USER_METADATA_BYTES",
]
