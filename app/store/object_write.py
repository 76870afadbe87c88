"""What one write of an object is: built once, at the HTTP edge, and handed
down whole (`ObjectStore.put_stream`, `ObjectStore.commit`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.db.object_rows import StoredChecksum
from app.db.objects import WriteCheck

DEFAULT_CONTENT_TYPE = "application/octet-stream"


def object_name(key: str) -> str:
    """The name an S3 object is given (its downloads' file name): the last
    part of its key."""
    return key.rstrip("/").rsplit("/", 1)[-1] or key


@dataclass(frozen=True, slots=True)
class ObjectWrite:
    """The object a stream becomes, and the terms it is stored on."""

    # Where, and what a reader is told of it.
    bucket: str
    key: str
    name: str
    content_type: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # S3 object tags of this version (None or empty: none).
    tags: Mapping[str, str] | None = None

    # Who writes: the API key recorded as its owner; with `only_if_owned_by`,
    # an object it replaces must belong to that key (else NotOwner). The
    # native API keeps a replaced file's public id (its /f/ link).
    owner_key_id: int | None = None
    only_if_owned_by: int | None = None
    keep_public_id: bool = False

    # Conditions (S3's If-Match / If-None-Match), checked under the key's
    # lock in the transaction that commits.
    check: WriteCheck | None = None

    # Limits: the most bytes the stream may have, and the length it
    # announced (cut into equal chunks when known).
    max_size: int | None = None
    expected_size: int | None = None

    # The checksum the stream verified, asked once it ended (S3's flexible
    # checksums); None when none was sent.
    checksum: Callable[[], StoredChecksum | None] | None = None

    @property
    def stored_content_type(self) -> str:
        return self.content_type or DEFAULT_CONTENT_TYPE
