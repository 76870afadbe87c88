"""S3 listings (ListObjects, ListMultipartUploads): only the columns a listing
shows, with keys rolled up into common prefixes inside the database.

A delimiter listing walks the (bucket, key) index in one statement, a
recursive CTE that both backends run: each step finds the next key with one
index seek, and a key that rolls up into a common prefix makes the next seek
start past every key under that prefix. A page of 1,000 entries is 1,000
seeks in one round trip, however many keys each prefix holds and however
large the bucket is. Keys compare in byte order (BINARY on SQLite, the "C"
collation on Postgres), the order S3 lists in.
"""

from __future__ import annotations

import builtins
import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy import ColumnElement, Select, TextualSelect, bindparam, column, or_, select, text

from app.db.key_ranges import prefix_upper_bound
from app.db.models import MultipartUpload, StoredObject
from app.db.types import UtcDateTime

_OBJECTS = StoredObject.__table__
_UPLOADS = MultipartUpload.__table__


# Named tuples, not frozen dataclasses: a page builds up to 1,000 of them,
# and a frozen dataclass, which sets each field through object.__setattr__,
# takes twice as long to build.


class ListedObject(NamedTuple):
    """What a listing shows of an object (never its content): ListObjects's
    columns, and the type and public id the web page's bucket browser shows."""

    key: str
    size: int
    etag: str
    modified: datetime
    content_type: str
    public_id: str


class ListedUpload(NamedTuple):
    """What ListMultipartUploads shows of an upload."""

    key: str
    upload_id: str
    initiated: datetime


class CommonPrefix(NamedTuple):
    """Keys under `prefix` rolled up into one entry at the delimiter."""

    prefix: str


class UnsupportedDelimiter(ValueError):
    """A delimiter ending in U+10FFFF: no string sorts right after every key
    under its common prefixes, so the walk could not jump past them."""

    def __init__(self) -> None:
        super().__init__("a delimiter must not end with U+10FFFF")


@dataclass(frozen=True, slots=True)
class _Range:
    """Where a listing starts and stops: keys `> start` (or `>= start` when
    `inclusive`) and `< stop` (no bound when None)."""

    start: str
    inclusive: bool
    stop: str | None


def walk_range(prefix: str, delimiter: str | None, after: str | None) -> _Range:
    """The key range to walk: one lower bound, so the first seek is a single
    index range however far `after` lies from `prefix`."""
    stop = prefix_upper_bound(prefix)
    if after is None or after < prefix:
        return _Range(prefix, True, stop)
    if delimiter and after.startswith(prefix):
        cut = after.find(delimiter, len(prefix))
        if cut >= 0:
            # `after` is under a common prefix that was listed already (the
            # continuation token of a page ending in that prefix is the prefix
            # itself): start past every key under it.
            common = after[: cut + len(delimiter)]
            return _Range(common[:-1] + _successor(common[-1]), True, stop)
    return _Range(after, False, stop)


def _successor(char: str) -> str:
    """The next code point that can occur in a key (surrogates cannot)."""
    code = ord(char) + 1
    return chr(0xE000) if 0xD800 <= code <= 0xDFFF else chr(code)


def _walk(table: str, bounds: _Range, *, find: str, only: str = "") -> str:
    """Two CTEs: `walk(n, key)`, the first key in `bounds`, then after each key
    the next one, or, after a key under a common prefix, the first key past
    that prefix; and `entries(n, key, plain)`, the keys found, `plain` being 1
    for a key that does not roll up (0: it stands for its common prefix).

    Parameters: bucket, start, stop, skip (1 + the prefix's length), delimiter,
    delimiter_length, bump (the successor of the delimiter's last character)
    and steps (how many keys to find at most). `find` is the dialect's
    "position of a substring" function (1-based, 0 when absent); `only`, a
    condition on the table's rows (alias `o`) that every key found meets.
    """
    first_op = ">=" if bounds.inclusive else ">"
    below_stop = "AND o.key < :stop" if bounds.stop is not None else ""
    if only:
        below_stop = f"{below_stop} AND {only}"
    position = f"{find}(substr(walk.key, :skip), :delimiter)"
    # A common prefix ends with the delimiter; the keys under it stop just
    # before the same string with the delimiter's last character bumped.
    prefix_end = f"substr(walk.key, 1, :skip - 3 + {position} + :delimiter_length) || :bump"
    return f"""
    WITH RECURSIVE walk(n, key) AS (
        SELECT 1, (
            SELECT o.key FROM {table} o
            WHERE o.bucket = :bucket AND o.key {first_op} :start {below_stop}
            ORDER BY o.key LIMIT 1
        )
        UNION ALL
        SELECT n + 1, CASE
            WHEN {position} = 0 THEN (
                SELECT o.key FROM {table} o
                WHERE o.bucket = :bucket AND o.key > walk.key {below_stop}
                ORDER BY o.key LIMIT 1
            )
            ELSE (
                SELECT o.key FROM {table} o
                WHERE o.bucket = :bucket AND o.key >= {prefix_end} {below_stop}
                ORDER BY o.key LIMIT 1
            )
        END
        FROM walk
        WHERE walk.key IS NOT NULL AND n < :steps
    ),
    entries AS (
        SELECT n, key, CASE WHEN {find}(substr(key, :skip), :delimiter) = 0 THEN 1 ELSE 0 END
            AS plain
        FROM walk WHERE key IS NOT NULL
    )
    """


class RowReader(Protocol):
    """Where a page's statement runs (app.db.single_statements): on the
    driver's own connection, outside a session, as GET and HEAD read their
    row. A session added a BEGIN and a COMMIT to every page, and on SQLite a
    hop to aiosqlite's thread for each step: about half the CPU of a page of
    a few entries, 10-30 % of one of 1,000 (bench/README.md, thirteenth round)."""

    dialect: str

    async def rows(
        self, statement: Select[Any] | TextualSelect, values: dict[str, Any]
    ) -> Sequence[Sequence[Any]]: ...


class ListingRepository:
    def __init__(self, reader: RowReader) -> None:
        self._reader = reader

    async def objects(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str | None = None,
        after: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[ListedObject | CommonPrefix]:
        """Up to `limit` objects and common prefixes of `bucket` under
        `prefix`, after `after`, in byte order: one statement, only the
        listed columns. A common prefix that `after` is under was listed
        already and is skipped.

        Raises UnsupportedDelimiter.
        """
        _check_delimiter(delimiter)
        if limit <= 0:
            return []
        bounds = walk_range(prefix, delimiter, after)
        if not delimiter:
            return builtins.list(await self._plain_objects(bucket, bounds, limit))
        objects = StoredObject.__tablename__
        join = self._join_each(
            objects,
            "o",
            "size, etag, updated_at, content_type, public_id",
            "o.bucket = :bucket AND o.key = entries.key",
        )
        sql = self._walk(objects, bounds) + (
            "SELECT entries.key, entries.plain, o.size, o.etag, o.updated_at,"
            " o.content_type, o.public_id\n"
            f"FROM entries {join}\n"
            "ORDER BY entries.n"
        )
        rows = await self._reader.rows(
            _text_statement(sql, _OBJECT_WALK_COLUMNS, "updated_at"),
            walk_parameters(bucket, prefix, delimiter, bounds, steps=limit),
        )
        entries: builtins.list[ListedObject | CommonPrefix] = []
        for key, plain, size, etag, modified, content_type, public_id in rows:
            if plain:
                entries.append(ListedObject(key, size, etag, modified, content_type, public_id))
            else:
                entries.append(CommonPrefix(common_prefix(key, prefix, delimiter)))
        return entries

    async def _plain_objects(
        self, bucket: str, bounds: _Range, limit: int
    ) -> builtins.list[ListedObject]:
        rows = await self._reader.rows(
            _plain_objects_query(bounds.inclusive, bounds.stop is not None),
            _bound_values(bucket, bounds, limit),
        )
        return builtins.list(map(ListedObject._make, rows))

    async def uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str | None = None,
        key_marker: str | None = None,
        upload_id_marker: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[ListedUpload | CommonPrefix]:
        """Up to `limit` multipart uploads and common prefixes of `bucket`
        under `prefix`, in (key, upload id) byte order, after the markers; the
        same walk as `objects`.

        Ordered by key, then upload id (S3 orders a key's uploads by initiation
        time; ids are random, so ours are in an arbitrary but stable order).
        Without `upload_id_marker`, `key_marker` skips every upload of that
        key; `upload_id_marker` alone is ignored, as S3 does. Raises
        UnsupportedDelimiter.
        """
        _check_delimiter(delimiter)
        if limit <= 0:
            return []
        bounds = walk_range(prefix, delimiter, key_marker)
        # With both markers the rest of the marker key's uploads come first
        # (unless that key is under a common prefix, listed already).
        resume = key_marker if upload_id_marker and not bounds.inclusive else None
        if resume is not None:
            bounds = _Range(resume, True, bounds.stop)
        if not delimiter:
            return builtins.list(
                await self._plain_uploads(bucket, bounds, resume, upload_id_marker, limit)
            )
        uploads = MultipartUpload.__tablename__
        join = self._join_each(
            uploads,
            "u",
            "id, created_at",
            "entries.plain = 1 AND u.bucket = :bucket AND u.key = entries.key"
            " AND u.completed_at IS NULL"
            " AND (u.key != :resume_key OR u.id > :resume_id)",
        )
        # A pending object's source is no upload to the client, nor does it
        # make a common prefix (app.db.pending).
        sql = self._walk(uploads, bounds, only="o.completed_at IS NULL") + (
            "SELECT entries.key, entries.plain, u.id, u.created_at\n"
            f"FROM entries LEFT {join}\n"
            "ORDER BY entries.n, u.id\n"
            "LIMIT :limit"
        )
        # One more key than entries: the marker key may have no uploads left.
        parameters = walk_parameters(bucket, prefix, delimiter, bounds, steps=limit + 1)
        parameters.update(resume_key=resume or "", resume_id=upload_id_marker or "", limit=limit)
        rows = await self._reader.rows(
            _text_statement(sql, _UPLOAD_WALK_COLUMNS, "created_at"), parameters
        )
        entries: builtins.list[ListedUpload | CommonPrefix] = []
        for key, plain, upload_id, initiated in rows:
            if not plain:
                entries.append(CommonPrefix(common_prefix(key, prefix, delimiter)))
            elif upload_id is not None:
                entries.append(ListedUpload(key, upload_id, initiated))
        return entries

    async def _plain_uploads(
        self,
        bucket: str,
        bounds: _Range,
        resume: str | None,
        upload_id_marker: str | None,
        limit: int,
    ) -> builtins.list[ListedUpload]:
        values = _bound_values(bucket, bounds, limit)
        if resume is not None:
            values.update(resume_key=resume, resume_id=upload_id_marker)
        rows = await self._reader.rows(
            _plain_uploads_query(bounds.inclusive, bounds.stop is not None, resume is not None),
            values,
        )
        return builtins.list(map(ListedUpload._make, rows))

    def _walk(self, table: str, bounds: _Range, only: str = "") -> str:
        find = "strpos" if self._postgres() else "instr"
        return _walk(table, bounds, find=find, only=only)

    def _join_each(self, table: str, alias: str, columns: str, condition: str) -> str:
        """A JOIN of `table` that looks its rows up once per entry of the walk,
        through the index. SQLite always joins that way. Postgres, whose
        statistics cannot know how few entries the walk yields, may hash-join
        every row of the bucket instead (60 ms at 100,000 objects): a LATERAL
        subquery, kept from being merged into a plain join by OFFSET 0, makes
        it look each entry up."""
        if self._postgres():
            return (
                f"JOIN LATERAL (SELECT {columns} FROM {table} {alias} WHERE {condition} OFFSET 0)"
                f" AS {alias} ON true"
            )
        return f"JOIN {table} {alias} ON {condition}"

    def _postgres(self) -> bool:
        return self._reader.dialect == "postgresql"


# Each listing statement has a few forms (a bound included or not, a stop
# or none, a delimiter walk on one backend): each is built once, with its
# values as bound parameters. Building the statement for each page cost
# SQLAlchemy more than half a millisecond.


@functools.lru_cache(maxsize=8)
def _plain_objects_query(inclusive: bool, bounded: bool) -> Select[Any]:
    # The table's columns, not the mapped class's: the ORM's row handling
    # cost a third of a 1,000-key page, for rows that are plain tuples.
    objects = _OBJECTS.c
    key = objects.key
    query = select(
        key,
        objects.size,
        objects.etag,
        objects.updated_at,
        objects.content_type,
        objects.public_id,
    ).where(objects.bucket == bindparam("bucket"), _above_start(key, inclusive))
    if bounded:
        query = query.where(key < bindparam("stop"))
    return query.order_by(key).limit(bindparam("limit"))


@functools.lru_cache(maxsize=8)
def _plain_uploads_query(inclusive: bool, bounded: bool, resume: bool) -> Select[Any]:
    uploads = _UPLOADS.c
    key, upload_id = uploads.key, uploads.id
    query = select(key, upload_id, uploads.created_at).where(
        uploads.bucket == bindparam("bucket"),
        _above_start(key, inclusive),
        # A pending object's source is no upload to the client (app.db.pending).
        uploads.completed_at.is_(None),
    )
    if bounded:
        query = query.where(key < bindparam("stop"))
    if resume:
        query = query.where(or_(key > bindparam("resume_key"), upload_id > bindparam("resume_id")))
    return query.order_by(key, upload_id).limit(bindparam("limit"))


def _above_start(key: ColumnElement[str], inclusive: bool) -> ColumnElement[bool]:
    return key >= bindparam("start") if inclusive else key > bindparam("start")


def _bound_values(bucket: str, bounds: _Range, limit: int) -> dict[str, object]:
    values: dict[str, object] = {"bucket": bucket, "start": bounds.start, "limit": limit}
    if bounds.stop is not None:
        values["stop"] = bounds.stop
    return values


# A walk's columns, in the order its SELECT names them.
_OBJECT_WALK_COLUMNS = ("key", "plain", "size", "etag", "updated_at", "content_type", "public_id")
_UPLOAD_WALK_COLUMNS = ("key", "plain", "id", "created_at")


@functools.lru_cache(maxsize=64)
def _text_statement(sql: str, names: tuple[str, ...], timestamp_column: str) -> TextualSelect:
    """A walk's text as a statement of the columns `names`, of which
    `timestamp_column` reads as UTC."""
    return text(sql).columns(
        *(
            column(name, UtcDateTime()) if name == timestamp_column else column(name)
            for name in names
        )
    )


def _check_delimiter(delimiter: str | None) -> None:
    if delimiter and delimiter[-1] == chr(sys.maxunicode):
        raise UnsupportedDelimiter


def walk_parameters(
    bucket: str, prefix: str, delimiter: str, bounds: _Range, *, steps: int
) -> dict[str, object]:
    parameters: dict[str, object] = {
        "bucket": bucket,
        "start": bounds.start,
        "skip": len(prefix) + 1,
        "delimiter": delimiter,
        "delimiter_length": len(delimiter),
        "bump": _successor(delimiter[-1]),
        "steps": steps,
    }
    if bounds.stop is not None:
        parameters["stop"] = bounds.stop
    return parameters


def common_prefix(key: str, prefix: str, delimiter: str) -> str:
    cut = key.find(delimiter, len(prefix))
    return key[: cut + len(delimiter)]
