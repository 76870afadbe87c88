"""The trash as the HTTP layer sees it: what a caller may restore, and restoring.

Deleting and replacing into the trash happen in the object store's writes
(the database session keeps the trash: app/db/trash.py); expiry is a step of
the GC's rounds (app/store/gc.py). Who may see which trashed object is the
caller's to say (`TrashScope`): the same rules as for live objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.retry import in_transaction
from app.db.session import session_scope
from app.db.trash import BucketGone, KeyTaken, TrashedObject, TrashRepository
from app.store.errors import StoreError
from app.store.object_info import ObjectInfo

log = structlog.get_logger("app.store.trash")

__all__ = ["NameTaken", "RestoreRefused", "TrashItem", "TrashScope", "TrashStore"]


class NameTaken(StoreError):
    """A live object holds the name or key a restore wants (409)."""


class RestoreRefused(StoreError):
    """The object may not be restored there: its S3 bucket is gone (409)."""


@dataclass(frozen=True, slots=True)
class TrashScope:
    """Which trashed objects a caller reaches: those that were in `bucket`
    (None: any), owned by `owner_key_id` (None: anyone's)."""

    bucket: str | None
    owner_key_id: int | None

    def covers(self, item: TrashedObject) -> bool:
        return (self.bucket is None or item.bucket == self.bucket) and (
            self.owner_key_id is None or item.row.owner_key_id == self.owner_key_id
        )


@dataclass(frozen=True, slots=True)
class TrashItem:
    """An object in the trash: the object as it was, where, why and until when."""

    entry_id: int
    info: ObjectInfo
    bucket: str
    key: str
    reason: str
    trashed_at: datetime
    expires_at: datetime


def _item(trashed: TrashedObject) -> TrashItem:
    return TrashItem(
        entry_id=trashed.entry_id,
        info=ObjectInfo.from_row(trashed.row, with_content=False),
        bucket=trashed.bucket,
        key=trashed.key,
        reason=trashed.reason,
        trashed_at=trashed.trashed_at,
        expires_at=trashed.expires_at,
    )


class _Unreachable(Exception):
    """The object is outside the caller's scope: answered as not found."""


class TrashStore:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker

    async def list(
        self, scope: TrashScope, *, after: int | None = None, limit: int = 100
    ) -> list[TrashItem]:
        """The caller's unexpired trash, the most recently trashed first."""
        async with session_scope(self._sessionmaker) as session:
            rows = await TrashRepository(session).list(
                bucket=scope.bucket, owner_key_id=scope.owner_key_id, after=after, limit=limit
            )
        return [_item(row) for row in rows]

    async def get(self, public_id: str, scope: TrashScope) -> TrashItem | None:
        """The trashed object `public_id`, if it is in the caller's trash."""
        async with session_scope(self._sessionmaker) as session:
            found = await TrashRepository(session).get(public_id)
        return None if found is None or not scope.covers(found) else _item(found)

    async def restore(
        self, public_id: str, scope: TrashScope, *, key: str | None = None, name: str | None = None
    ) -> ObjectInfo | None:
        """Put the object back under its old key, or `key` (and file name
        `name`); None if the caller's trash holds no such object. NameTaken
        or RestoreRefused when it cannot go there: nothing changes."""

        def check(found: TrashedObject) -> None:
            if not scope.covers(found):
                raise _Unreachable

        async def restore(session: AsyncSession) -> ObjectInfo | None:
            row = await TrashRepository(session).restore(public_id, key=key, name=name, check=check)
            return None if row is None else ObjectInfo.from_row(row, with_content=False)

        try:
            restored = await in_transaction(self._sessionmaker, restore)
        except _Unreachable:
            return None
        except KeyTaken as exc:
            raise NameTaken(str(exc)) from None
        except BucketGone as exc:
            raise RestoreRefused(str(exc)) from None
        if restored is not None:
            log.info("trash_restored", bucket=restored.bucket, object_id=restored.id)
        return restored
