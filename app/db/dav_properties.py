"""Dead properties: what WebDAV clients set with PROPPATCH, per resource key.

A value is the XML inside the property's element, as the HTTP layer wrote
it (self-contained: every element declares its namespace). One row per
(bucket, key, namespace, name): `put` replaces under the caller's lock on
the resource (see app.db.models.dav for why no unique index says so).
Properties follow their resource: moved, copied and deleted with it, in the
same transaction (app.db.subtrees).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, delete, func, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.key_ranges import key_prefix_bounds, prefix_upper_bound
from app.db.listing import RowReader
from app.db.locking import batches
from app.db.models import DeadProperty


class PropertyRow(NamedTuple):
    key: str
    namespace: str
    name: str
    value: str


def _any_under() -> Select[Any]:
    properties = DeadProperty.__table__.c
    return (
        select(properties.id)
        .where(
            properties.bucket == bindparam("bucket"),
            properties.key >= bindparam("start"),
            properties.key < bindparam("stop"),
        )
        .limit(1)
    )


#: Built once: the row reader compiles each statement object once.
ANY_UNDER = _any_under()


class PropertyReader:
    """Whether a folder holds dead properties at all, through the service's
    row reader: a listing of a folder with none (most) looks none up."""

    def __init__(self, reader: RowReader) -> None:
        self._reader = reader

    async def any_under(self, bucket: str, prefix: str) -> bool:
        stop = prefix_upper_bound(prefix)
        assert stop is not None, "a folder's key ends with '/'"
        rows = await self._reader.rows(ANY_UNDER, {"bucket": bucket, "start": prefix, "stop": stop})
        return bool(rows)


class PropertyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def of(self, bucket: str, keys: Iterable[str]) -> builtins.list[PropertyRow]:
        """The properties of the resources `keys`, in no particular order."""
        found: builtins.list[PropertyRow] = []
        for batch in batches(sorted(set(keys))):
            rows = await self._session.execute(
                select(
                    DeadProperty.key, DeadProperty.namespace, DeadProperty.name, DeadProperty.value
                ).where(DeadProperty.bucket == bucket, DeadProperty.key.in_(batch))
            )
            found.extend(PropertyRow(*row) for row in rows)
        return found

    async def count(self, bucket: str, key: str) -> int:
        return int(
            await self._session.scalar(
                select(func.count()).where(DeadProperty.bucket == bucket, DeadProperty.key == key)
            )
            or 0
        )

    async def put(self, bucket: str, key: str, namespace: str, name: str, value: str) -> None:
        await self.remove(bucket, key, namespace, name)
        await self._session.execute(
            insert(DeadProperty).values(
                bucket=bucket, key=key, namespace=namespace, name=name, value=value
            )
        )

    async def remove(self, bucket: str, key: str, namespace: str, name: str) -> None:
        await self._session.execute(
            delete(DeadProperty)
            .where(
                DeadProperty.bucket == bucket,
                DeadProperty.key == key,
                DeadProperty.namespace == namespace,
                DeadProperty.name == name,
            )
            .execution_options(synchronize_session=False)
        )

    async def delete_of(self, bucket: str, key: str) -> None:
        """Drop the properties of the resource `key` alone."""
        await self._session.execute(
            delete(DeadProperty)
            .where(DeadProperty.bucket == bucket, DeadProperty.key == key)
            .execution_options(synchronize_session=False)
        )

    async def delete_under(self, bucket: str, prefix: str) -> None:
        """Drop the properties of every resource whose key starts with `prefix`."""
        await self._session.execute(
            delete(DeadProperty)
            .where(DeadProperty.bucket == bucket, *key_prefix_bounds(DeadProperty.key, prefix))
            .execution_options(synchronize_session=False)
        )

    async def move(self, bucket: str, old: str, new: str) -> None:
        """The properties of the resource `old` now belong to `new`."""
        await self._session.execute(
            update(DeadProperty)
            .where(DeadProperty.bucket == bucket, DeadProperty.key == old)
            .values(key=new)
            .execution_options(synchronize_session=False)
        )

    async def move_under(self, bucket: str, old: str, new: str) -> None:
        """Every property under `old` (its own included) moves under `new`."""
        await self._session.execute(
            update(DeadProperty)
            .where(DeadProperty.bucket == bucket, *key_prefix_bounds(DeadProperty.key, old))
            .values(key=literal(new) + func.substr(DeadProperty.key, len(old) + 1))
            .execution_options(synchronize_session=False)
        )

    async def copy(self, bucket: str, old: str, new: str, *, under: bool) -> None:
        """Copies of the properties of `old` (and, with `under`, of every
        resource under it) for the resources at the same places under `new`."""
        where = key_prefix_bounds(DeadProperty.key, old) if under else [DeadProperty.key == old]
        rows = (
            await self._session.execute(
                select(
                    DeadProperty.key, DeadProperty.namespace, DeadProperty.name, DeadProperty.value
                ).where(DeadProperty.bucket == bucket, *where)
            )
        ).all()
        if not rows:
            return
        await self._session.execute(
            insert(DeadProperty),
            [
                {
                    "bucket": bucket,
                    "key": new + key[len(old) :],
                    "namespace": namespace,
                    "name": name,
                    "value": value,
                }
                for key, namespace, name, value in rows
            ],
        )
