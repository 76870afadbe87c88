"""A folder's children, as WebDAV's PROPFIND lists them: the files right in
it, with what their properties need, and the folders right in it.

The same walk as the S3 listings (app.db.listing): one index seek per entry,
a folder costing one seek however much lies under it, so a page costs the
same in a folder of ten files as in one of millions. The folders come from
two walks merged: the objects' keys (a folder of files stored by name) and
the folder rows (folders kept without a file, app.db.folders).
"""

from __future__ import annotations

import builtins
import functools
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Select, TextualSelect, bindparam, column, func, select, text

from app.db.key_ranges import prefix_upper_bound
from app.db.listing import (
    CommonPrefix,
    ListingRepository,
    common_prefix,
    walk_parameters,
    walk_range,
)
from app.db.models import Folder, StoredObject
from app.db.types import JsonDict, UtcDateTime

DELIMITER = "/"


class TreeFile(NamedTuple):
    """What PROPFIND shows of a file (never its content)."""

    key: str
    size: int
    etag: str
    md5: str | None
    created_at: datetime
    updated_at: datetime
    content_type: str
    metadata: dict[str, Any]


TreeEntry = TreeFile | CommonPrefix


class TreeListing(ListingRepository):
    async def children(
        self, bucket: str, prefix: str, *, after: str | None, limit: int
    ) -> builtins.list[TreeEntry]:
        """Up to `limit` files and folders right under the folder `prefix`
        (ending with "/"), after the key or folder `after`, in key order."""
        if limit <= 0:
            return []
        files = await self._files(bucket, prefix, after, limit)
        folders = await self._folders(bucket, prefix, after, limit)
        merged: dict[str, TreeEntry] = {}
        for entry in [*files, *folders]:
            name = entry.key if isinstance(entry, TreeFile) else entry.prefix
            merged.setdefault(name, entry)
        return [merged[name] for name in sorted(merged)][:limit]

    async def _files(
        self, bucket: str, prefix: str, after: str | None, limit: int
    ) -> builtins.list[TreeEntry]:
        bounds = walk_range(prefix, DELIMITER, after)
        objects = StoredObject.__tablename__
        join = self._join_each(
            objects,
            "o",
            "size, etag, md5, created_at, updated_at, content_type, user_metadata",
            "o.bucket = :bucket AND o.key = entries.key",
        )
        sql = self._walk(objects, bounds) + (
            "SELECT entries.key, entries.plain, o.size, o.etag, o.md5, o.created_at,"
            " o.updated_at, o.content_type, o.user_metadata\n"
            f"FROM entries {join}\n"
            "ORDER BY entries.n"
        )
        rows = await self._reader.rows(
            _files_statement(sql),
            walk_parameters(bucket, prefix, DELIMITER, bounds, steps=limit),
        )
        entries: builtins.list[TreeEntry] = []
        for key, plain, size, etag, md5, created, updated, content_type, metadata in rows:
            if plain:
                entries.append(
                    TreeFile(key, size, etag, md5, created, updated, content_type, metadata or {})
                )
            else:
                entries.append(CommonPrefix(common_prefix(key, prefix, DELIMITER)))
        return entries

    async def _folders(
        self, bucket: str, prefix: str, after: str | None, limit: int
    ) -> builtins.list[TreeEntry]:
        bounds = walk_range(prefix, DELIMITER, after)
        sql = self._walk(Folder.__tablename__, bounds) + (
            "SELECT entries.key, entries.plain FROM entries ORDER BY entries.n"
        )
        rows = await self._reader.rows(
            _folders_statement(sql),
            walk_parameters(bucket, prefix, DELIMITER, bounds, steps=limit),
        )
        # A plain entry is the folder's own row (its key is the prefix).
        return [
            CommonPrefix(common_prefix(key, prefix, DELIMITER)) for key, plain in rows if not plain
        ]

    async def used_bytes(self, bucket: str, prefix: str) -> int:
        """The bytes of every file under `prefix`: a range scan of its keys."""
        stop = prefix_upper_bound(prefix)
        values: dict[str, object] = {"bucket": bucket, "start": prefix}
        if stop is not None:
            values["stop"] = stop
        total = await self._reader.rows(_used_bytes_statement(stop is not None), values)
        return int(total[0][0])


@functools.lru_cache(maxsize=8)
def _files_statement(sql: str) -> TextualSelect:
    return text(sql).columns(
        column("key"),
        column("plain"),
        column("size"),
        column("etag"),
        column("md5"),
        column("created_at", UtcDateTime()),
        column("updated_at", UtcDateTime()),
        column("content_type"),
        column("user_metadata", JsonDict),
    )


@functools.lru_cache(maxsize=2)
def _used_bytes_statement(bounded: bool) -> Select[Any]:
    objects = StoredObject.__table__.c
    query = select(func.coalesce(func.sum(objects.size), 0)).where(
        objects.bucket == bindparam("bucket"), objects.key >= bindparam("start")
    )
    if bounded:
        query = query.where(objects.key < bindparam("stop"))
    return query


@functools.lru_cache(maxsize=8)
def _folders_statement(sql: str) -> TextualSelect:
    return text(sql).columns(column("key"), column("plain"))
