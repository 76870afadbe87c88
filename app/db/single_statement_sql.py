"""The request path's single statements themselves, built once (building a
statement per request cost more than running it), and the row they read.
Where and how they run: app/db/single_statements.py.
"""

from __future__ import annotations

from typing import Any, Final, cast

from sqlalchemy import Table, bindparam, delete, exists, select

from app.db.models import Piece, StoredObject
from app.db.object_rows import CHUNKLESS_PUTS, INSERTS_UNLESS_EXISTS, ObjectRow

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
