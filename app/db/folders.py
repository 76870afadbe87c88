"""Folders: where a folder exists, and the rows that keep empty ones.

A folder is a key prefix ending with "/". It exists while an object's key or
a folder row lies under it (its own row included): the objects' keys make
the folders of files stored by name, the rows keep the ones without a file.
Every query is one range scan on a (bucket, key) index.
"""

from __future__ import annotations

import builtins
from datetime import datetime

from sqlalchemy import delete, exists, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.key_ranges import key_prefix_bounds
from app.db.locking import dialect_name
from app.db.models import Folder, StoredObject


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
