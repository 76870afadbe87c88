"""The object store's deletes: by key (S3) or public id (native), to the
trash when it is on, releasing the chunks nothing else references."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession

from app.db import objects as db_objects
from app.db.objects import ObjectRepository
from app.db.retry import in_transaction
from app.db.types import utcnow
from app.store.errors import NotOwner
from app.store.store_parts import StoreParts


class ObjectDeletes(StoreParts):
    async def delete(self, bucket: str, key: str) -> bool:
        # One statement when there are no chunks to release (small objects,
        # as a registry's upload state files), and one read more when there
        # is no object at all (a delete is answered alike either way, and
        # clients send it for keys long gone); the session finds and releases
        # the chunks otherwise. An object written between the two statements
        # came after this delete. With the trash on, the read comes first
        # (an absent key costs no transaction), then a small object goes to
        # the trash in one short transaction; one with chunks, in the session.
        if self._trash_retention:
            if await self._statements.object(bucket, key) is None:
                return False
            outcome = await self._statements.trash_chunkless_object(
                self._trash_move(bucket, key, "deleted", utcnow())
            )
            if outcome is not None:
                return outcome.trashed
        else:
            if await self._statements.delete_chunkless_object(bucket, key):
                return True
            if await self._statements.object(bucket, key) is None:
                return False
        return await self._deleted(lambda repo: repo.delete(bucket, key))

    async def delete_by_public_id(
        self, public_id: str, *, bucket: str, only_if_owned_by: int | None = None
    ) -> bool:
        """False if no object in `bucket` has this id; NotOwner if
        `only_if_owned_by` is given and the object belongs to another key
        (nothing deleted)."""
        try:
            return await self._deleted(
                lambda repo: repo.delete_by_public_id(
                    public_id, bucket=bucket, only_if_owned_by=only_if_owned_by
                )
            )
        except db_objects.NotOwner as exc:
            raise NotOwner(str(exc)) from None

    async def _deleted(self, delete: Callable[[ObjectRepository], Awaitable[bool]]) -> bool:
        """`delete` in a transaction, run again if Postgres makes it a
        deadlock's victim (a pending object settling at that moment locks the
        same rows); the collector is woken when it released chunks."""

        async def work(session: AsyncSession) -> tuple[bool, int]:
            repo = ObjectRepository(session)
            return await delete(repo), repo.chunks_released

        deleted, released = await in_transaction(self._sessionmaker, work)
        if released:
            self._gc.wake()
        return deleted
