"""Folders: where a folder exists, and the rows that keep empty ones.

A folder is a key prefix ending with "/". It exists while an object's key or
a folder row lies under it (its own row included): the objects' keys make
the folders of files stored by name, the rows keep the ones without a file.
Every query is one range scan on a (bucket, key) index.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    Select,
    String,
    bindparam,
    delete,
    exists,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.key_ranges import key_prefix_bounds, prefix_upper_bound
from app.db.listing import RowReader
from app.db.locking import dialect_name
from app.db.models import Folder, StoredObject
from app.db.types import utc_from_sqlite_text


def _folder() -> Select[Any]:
    """Whether anything lies under :start (to :stop), and when the folder's
    own row was made: three index seeks in one statement."""
    objects, folders = StoredObject.__table__.c, Folder.__table__.c
    bucket: BindParameter[str] = bindparam("bucket", type_=String())
    start: BindParameter[str] = bindparam("start", type_=String())
    stop: BindParameter[str] = bindparam("stop", type_=String())
    return select(
        exists().where(objects.bucket == bucket, objects.key >= start, objects.key < stop),
        exists().where(folders.bucket == bucket, folders.key >= start, folders.key < stop),
        select(folders.created_at)
        .where(folders.bucket == bucket, folders.key == start)
        .scalar_subquery(),
    )


#: Built once: the row reader compiles each statement object once.
FOLDER = _folder()


class FolderReader:
    """A folder looked up outside any transaction, through the service's
    row reader (a PROPFIND's, a PUT's check of where it writes)."""

    def __init__(self, reader: RowReader) -> None:
        self._reader = reader

    async def find(self, bucket: str, prefix: str) -> tuple[bool, datetime | None]:
        """Whether the folder `prefix` exists, and when its row was made
        (None: it has none, only files)."""
        stop = prefix_upper_bound(prefix)
        assert stop is not None, "a folder's key ends with '/'"
        rows = await self._reader.rows(FOLDER, {"bucket": bucket, "start": prefix, "stop": stop})
        under_objects, under_folders, created = rows[0]
        if isinstance(created, str):
            created = utc_from_sqlite_text(created)
        return bool(under_objects or under_folders), created


class FolderRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def exists(self, bucket: str, prefix: str) -> bool:
        """Whether the folder `prefix` (ending with "/") exists: an object or
        a folder row lies under it."""
        under_objects = exists().where(
            StoredObject.bucket == bucket, *key_prefix_bounds(StoredObject.key, prefix)
        )
        under_folders = exists().where(
            Folder.bucket == bucket, *key_prefix_bounds(Folder.key, prefix)
        )
        found = await self._session.scalar(select(literal(1)).where(under_objects | under_folders))
        return found is not None

    async def created_at(self, bucket: str, prefix: str) -> datetime | None:
        """When the folder's row was made (None: it has none, only files)."""
        return await self._session.scalar(
            select(Folder.created_at).where(Folder.bucket == bucket, Folder.key == prefix)
        )

    async def add(self, bucket: str, prefix: str, now: datetime) -> bool:
        """Keep the folder `prefix`; False if it had a row already."""
        statement = (
            upsert_insert(dialect_name(self._session), Folder.__table__)
            .values(bucket=bucket, key=prefix, created_at=now)
            .on_conflict_do_nothing(index_elements=["bucket", "key"])
            .returning(Folder.key)
        )
        return await self._session.scalar(statement) is not None

    async def delete_under(self, bucket: str, prefix: str) -> int:
        """Drop the rows of `prefix` and of every folder under it."""
        result = await self._session.execute(
            delete(Folder)
            .where(Folder.bucket == bucket, *key_prefix_bounds(Folder.key, prefix))
            .execution_options(synchronize_session=False)
        )
        return int(getattr(result, "rowcount", 0) or 0)

    async def move_under(self, bucket: str, old: str, new: str) -> None:
        """The rows of `old` and under it, renamed to lie under `new`."""
        await self._session.execute(
            update(Folder)
            .where(Folder.bucket == bucket, *key_prefix_bounds(Folder.key, old))
            .values(key=literal(new) + func.substr(Folder.key, len(old) + 1))
            .execution_options(synchronize_session=False)
        )

    async def copy_under(self, bucket: str, old: str, new: str, now: datetime) -> None:
        """Rows for `new` and under it, one for each of `old` and under it."""
        rows = await self.keys_under(bucket, old)
        if not rows:
            return
        await self._session.execute(
            upsert_insert(dialect_name(self._session), Folder.__table__).on_conflict_do_nothing(
                index_elements=["bucket", "key"]
            ),
            [{"bucket": bucket, "key": new + key[len(old) :], "created_at": now} for key in rows],
        )

    async def keys_under(self, bucket: str, prefix: str) -> builtins.list[str]:
        return list(
            await self._session.scalars(
                select(Folder.key)
                .where(Folder.bucket == bucket, *key_prefix_bounds(Folder.key, prefix))
                .order_by(Folder.key)
            )
        )
