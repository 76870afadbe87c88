"""The request path's single statements themselves, built once (building a
statement per request cost more than running it), and the row they read.
Where and how they run: app/db/single_statements.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple, cast

from sqlalchemy import Table, bindparam, delete, exists, insert, select, update

from app.db.models import Piece, StoredObject, TrashEntry
from app.db.object_rows import CHUNKLESS_PUTS, INSERTS_UNLESS_EXISTS, ObjectRow
from app.db.pending_filter import pending_object

_OBJECTS = cast(Table, StoredObject.__table__)
# Every column but a multipart object's part list (up to 10,000 entries, read
# only by partNumber requests and GetObjectAttributes).
COLUMNS: Final = [column for column in _OBJECTS.c if column.name != "parts"]
BY_KEY: Final = select(*COLUMNS).where(
    _OBJECTS.c.bucket == bindparam("bucket"), _OBJECTS.c.key == bindparam("key")
)
BY_PUBLIC_ID: Final = select(*COLUMNS).where(_OBJECTS.c.public_id == bindparam("public_id"))
# What `object_rows.row_values` gives: every column but the id.
INSERT_KEYS: Final = [column.name for column in _OBJECTS.c if column.name != "id"]
# The object under (bucket, key) deleted if it references no chunk (none to
# release), returning its id; nothing if there is none or it has chunks.
CHUNKLESS_DELETE: Final = (
    delete(_OBJECTS)
    .where(
        _OBJECTS.c.bucket == bindparam("bucket"),
        _OBJECTS.c.key == bindparam("key"),
        ~exists().where(Piece.__table__.c.object_id == _OBJECTS.c.id),
        ~pending_object(_OBJECTS.c.id),
    )
    .returning(_OBJECTS.c.id)
)
# The writes, by kind; each returns the row's id first.
INSERT: Final = "insert"
CHUNKLESS_PUT: Final = "chunkless_put"
WRITES: Final = {INSERT: INSERTS_UNLESS_EXISTS, CHUNKLESS_PUT: CHUNKLESS_PUTS}


def inserted_row(new_id: int, values: dict[str, Any]) -> ObjectRow:
    """The row `insert_object_unless_exists(values)` inserted as `new_id`
    (building the ORM object for it cost a tenth of a small PUT)."""
    return ObjectRow(new_id, *(values[name] for name in ObjectRow._fields[1:]))


# --- the trash (app/db/trash.py), for objects that reference no chunk ------------

#: Where trashed objects' rows live. Starting with "_", it is no S3 bucket
#: (S3 refuses such names) and not the native API's `_native`.
TRASH_BUCKET: Final = "_trash"
_TRASH = cast(Table, TrashEntry.__table__)
# The object under (bucket, key): its id, creation time, and whether it
# references a chunk (then the session moves it: its chunks need locks).
CURRENT: Final = select(
    _OBJECTS.c.id,
    _OBJECTS.c.created_at,
    exists().where(Piece.__table__.c.object_id == _OBJECTS.c.id) | pending_object(_OBJECTS.c.id),
).where(_OBJECTS.c.bucket == bindparam("bucket"), _OBJECTS.c.key == bindparam("key"))
# An object's row moved out of its namespace (TrashRepository.put's move).
TO_TRASH: Final = (
    update(_OBJECTS)
    .where(_OBJECTS.c.id == bindparam("object_id"))
    .values(bucket=bindparam("trash_bucket"), key=bindparam("trash_key"))
)
TRASH_KEYS: Final = ["object_id", "bucket", "key", "reason", "trashed_at", "expires_at"]
TRASH_ENTRY: Final = insert(_TRASH)


@dataclass(frozen=True, slots=True)
class TrashMove:
    """An object that references no chunk, to be trashed under its key."""

    bucket: str
    key: str
    reason: str
    trashed_at: datetime
    expires_at: datetime

    def entry(self, object_id: int) -> dict[str, Any]:
        return {
            "object_id": object_id,
            "bucket": self.bucket,
            "key": self.key,
            "reason": self.reason,
            "trashed_at": self.trashed_at,
            "expires_at": self.expires_at,
        }


def trash_key(object_id: int) -> str:
    """A trashed object's key in TRASH_BUCKET (TrashRepository.put's too)."""
    return f"{object_id:020d}"


class TrashOutcome(NamedTuple):
    """What `trash_chunkless_object` did."""

    # Whether an object was moved to the trash (False: the key had none).
    trashed: bool
    # The replacement's row id and creation time (None: no replacement).
    stored: tuple[int, datetime] | None
