"""Files and folders of a bucket, as WebDAV (app/http/dav) works on them.

Names with "/" are folders: the file `photos/2026/a.jpg` lies in the folder
`photos/2026/`. A folder exists while a file or a kept folder lies under it
(app/db/folders.py); MKCOL keeps an empty one, and so does removing or
moving away the last file of a folder (a drive's folder does not vanish when
it is emptied).

Every change here is one transaction, metadata only (app/db/subtrees.py): a
folder of thousands of files is moved, copied or sent to the trash without
a byte going to Telegram again, and a reader sees it before or after, never
half done. Each also checks, in that transaction, the WebDAV locks it must
honour (`app.store.dav_locks.enforce`) and who owns what it changes (a
`write` API key changes only its own files, as in the native API).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.dav_properties import PropertyReader, PropertyRepository, PropertyRow
from app.db.folders import FolderReader, FolderRepository
from app.db.listing import CommonPrefix, RowReader
from app.db.locking import lock_object_key
from app.db.objects import ObjectRepository
from app.db.retry import in_transaction
from app.db.session import session_scope
from app.db.subtrees import ForeignObject, Place, SourcePending, SubtreeRepository
from app.db.tree_listing import TreeEntry, TreeFile, TreeListing
from app.db.types import utcnow
from app.store.dav_locks import Submitted, Target, enforce
from app.store.errors import ContentPending, NotOwner, StoreError
from app.store.gc import GarbageCollector
from app.store.service import ObjectInfo, ObjectStore

__all__ = [
    "CommonPrefix",
    "FileTree",
    "FolderInfo",
    "Occupied",
    "PropertyChange",
    "PropertyRow",
    "TooManyProperties",
    "TreeEntry",
    "TreeFile",
]

#: How long a copy waits for a file still being stored, at most, before it
#: answers 503 with Retry-After (the file's bytes are in a spool, not yet in
#: Telegram: there is nothing to point the copy at).
PENDING_RETRY_AFTER = 5


@dataclass(frozen=True, slots=True)
class FolderInfo:
    key: str
    # When its row was made; None for a folder only its files make.
    created_at: datetime | None


@dataclass(frozen=True, slots=True)
class PropertyChange:
    """Set (`value` the XML inside the element) or, with None, remove one property."""

    namespace: str
    name: str
    value: str | None


class Occupied(StoreError):
    """The destination holds a file or folder, and overwriting was not allowed."""


class Gone(StoreError):
    """The resource went away before the change could be made."""


class TooManyProperties(StoreError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"a resource may have at most {limit} properties")
        self.limit = limit


def parent_of(key: str) -> str:
    """The folder `key` lies in: "a/b/c" and "a/b/c/" -> "a/b/"."""
    return key.rstrip("/").rpartition("/")[0] + "/"


class FileTree:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        store: ObjectStore,
        reader: RowReader,
        gc: GarbageCollector,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._store = store
        self._listing = TreeListing(reader)
        self._folders = FolderReader(reader)
        self._properties = PropertyReader(reader)
        self._gc = gc

    # --- reading ------------------------------------------------------------------

    async def file(self, bucket: str, key: str) -> ObjectInfo | None:
        return await self._store.get(bucket, key)

    async def folder(self, bucket: str, prefix: str) -> FolderInfo | None:
        """The folder `prefix` (ending with "/"), if it exists."""
        found, created = await self._folders.find(bucket, prefix)
        return FolderInfo(prefix, created) if found else None

    async def children(
        self, bucket: str, prefix: str, *, after: str | None, limit: int
    ) -> builtins.list[TreeEntry]:
        """A page of what lies right in the folder `prefix`, in key order."""
        return await self._listing.children(bucket, prefix, after=after, limit=limit)

    async def used_bytes(self, bucket: str, prefix: str) -> int:
        return await self._listing.used_bytes(bucket, prefix)

    async def has_properties(self, bucket: str, prefix: str) -> bool:
        """Whether anything under the folder `prefix` (itself included) has a
        dead property: a listing of a folder with none looks none up."""
        return await self._properties.any_under(bucket, prefix)

    async def properties(
        self, bucket: str, keys: Iterable[str]
    ) -> dict[str, builtins.list[PropertyRow]]:
        """The dead properties of each resource of `keys` that has some."""
        async with session_scope(self._sessionmaker) as session:
            rows = await PropertyRepository(session).of(bucket, keys)
        found: dict[str, builtins.list[PropertyRow]] = {}
        for row in rows:
            found.setdefault(row.key, []).append(row)
        return found

    # --- changing -----------------------------------------------------------------

    async def patch(
        self,
        bucket: str,
        key: str,
        changes: Sequence[PropertyChange],
        submitted: Submitted,
        *,
        owner: int | None,
        max_properties: int,
        metadata: Mapping[str, Any] | None = None,
        root: bool = False,
    ) -> None:
        """Apply `changes` in order, all or none (PROPPATCH); with
        `metadata`, the file's metadata is replaced too (its modification
        time). Gone if the resource is not there any more (the `root`
        folder always is)."""

        async def work(session: AsyncSession) -> None:
            await lock_object_key(session, bucket, key)
            await enforce(session, bucket, [Target(key)], submitted)
            place = Place(bucket, key)
            if place.folder:
                if not root and not await FolderRepository(session).exists(bucket, key):
                    raise Gone(key)
            else:
                subtree = SubtreeRepository(session)
                if not await subtree.keys(place):
                    raise Gone(key)
                await self._own(subtree, place, owner)
                if metadata is not None:
                    await ObjectRepository(session).set_metadata(bucket, key, metadata)
            properties = PropertyRepository(session)
            for change in changes:
                if change.value is None:
                    await properties.remove(bucket, key, change.namespace, change.name)
                else:
                    await properties.put(bucket, key, change.namespace, change.name, change.value)
            if await properties.count(bucket, key) > max_properties:
                raise TooManyProperties(max_properties)

        await in_transaction(self._sessionmaker, work)

    async def make_folder(self, bucket: str, prefix: str, submitted: Submitted) -> bool:
        """Keep the folder `prefix` (MKCOL); False if something is there already."""

        async def work(session: AsyncSession) -> bool:
            await lock_object_key(session, bucket, prefix)
            await enforce(session, bucket, [Target(prefix), Target(parent_of(prefix))], submitted)
            subtree = SubtreeRepository(session)
            for form in (prefix, prefix.rstrip("/")):
                if await self._occupied(session, subtree, bucket, form):
                    return False
            return await FolderRepository(session).add(bucket, prefix, utcnow())

        return await in_transaction(self._sessionmaker, work)

    async def remove(
        self,
        bucket: str,
        key: str,
        submitted: Submitted,
        *,
        owner: int | None,
        keep: str | None,
    ) -> bool:
        """Send the file `key`, or the folder `key` and all under it, to the
        trash (DELETE); the folder `keep` (its parent) stays. False if there
        was nothing."""

        async def work(session: AsyncSession) -> tuple[bool, int]:
            subtree = SubtreeRepository(session)
            place = Place(bucket, key)
            await subtree.lock(bucket, [])
            keys = await subtree.keys(place)
            await subtree.lock(bucket, keys)
            targets = [Target(key, subtree=place.folder), Target(parent_of(key))]
            await enforce(session, bucket, targets, submitted)
            if place.folder:
                if not await FolderRepository(session).exists(bucket, key):
                    return False, 0
            elif not keys:
                return False, 0
            await self._own(subtree, place, owner)
            await subtree.remove(place, "deleted")
            if keep is not None:
                await FolderRepository(session).add(bucket, keep, utcnow())
            return True, subtree.chunks_released

        removed, released = await in_transaction(self._sessionmaker, work)
        if released:
            self._gc.wake()
        return removed

    async def move(
        self,
        bucket: str,
        source: str,
        target: str,
        submitted: Submitted,
        *,
        overwrite: bool,
        owner: int | None,
        name: str,
        keep: str | None,
        metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move the file or folder `source` to `target` (its new key: a
        folder's ends with "/"), replacing what is there if `overwrite`
        (else Occupied); the folder `keep` (the source's parent) stays, and
        a moved file gets `metadata` if given. True if the destination was
        free (201), False if something was replaced (204)."""
        return await self._relocate(
            bucket,
            source,
            target,
            submitted,
            overwrite=overwrite,
            owner=owner,
            keep=keep,
            metadata=metadata,
            move_as=name,
        )

    async def copy(
        self,
        bucket: str,
        source: str,
        target: str,
        submitted: Submitted,
        *,
        overwrite: bool,
        owner: int | None,
        name: str,
        members: bool,
        copier: int,
        metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """Copy the file or folder `source` to `target` (with its members
        when `members`), metadata only; as `move` otherwise."""
        try:
            return await self._relocate(
                bucket,
                source,
                target,
                submitted,
                overwrite=overwrite,
                owner=owner,
                keep=None,
                metadata=metadata,
                copy_as=(name, members, copier),
            )
        except SourcePending as exc:
            raise ContentPending(
                f"{exc.key} is still being stored: copy it again shortly",
                retry_after=PENDING_RETRY_AFTER,
            ) from None

    async def _relocate(
        self,
        bucket: str,
        source: str,
        target: str,
        submitted: Submitted,
        *,
        overwrite: bool,
        owner: int | None,
        keep: str | None,
        metadata: Mapping[str, Any] | None,
        move_as: str | None = None,
        copy_as: tuple[str, bool, int] | None = None,
    ) -> bool:
        src = Place(bucket, source)

        async def work(session: AsyncSession) -> tuple[bool, int]:
            subtree = SubtreeRepository(session)
            await subtree.lock(bucket, [])
            source_keys = await subtree.keys(src)
            target_keys = (
                [target + key[len(source) :] for key in source_keys] if src.folder else [target]
            )
            both_forms = [target.rstrip("/"), target.rstrip("/") + "/"]
            in_the_way = await subtree.keys(Place(bucket, both_forms[1]))
            await subtree.lock(bucket, [*source_keys, *target_keys, both_forms[0], *in_the_way])
            targets = [Target(form, subtree=form.endswith("/")) for form in both_forms]
            targets.append(Target(parent_of(target)))
            if move_as is not None:
                targets += [Target(source, subtree=src.folder), Target(parent_of(source))]
            await enforce(session, bucket, targets, submitted)
            if src.folder:
                if not await FolderRepository(session).exists(bucket, source):
                    raise Gone(source)
            elif not source_keys:
                raise Gone(source)
            if move_as is not None:
                await self._own(subtree, src, owner)
            free = True
            for form in both_forms:
                if await self._occupied(session, subtree, bucket, form):
                    if not overwrite:
                        raise Occupied(f"{form} exists")
                    await self._own(subtree, Place(bucket, form), owner)
                    await subtree.remove(Place(bucket, form), "replaced")
                    free = False
            if move_as is not None:
                await subtree.move(src, Place(bucket, target), move_as)
                if keep is not None:
                    await FolderRepository(session).add(bucket, keep, utcnow())
            elif copy_as is not None:
                name, members, copier = copy_as
                await subtree.copy(
                    src,
                    Place(bucket, target),
                    name=name,
                    owner_key_id=copier,
                    members=members,
                    now=utcnow(),
                )
            if metadata is not None and not src.folder:
                await ObjectRepository(session).set_metadata(bucket, target, metadata)
            return free, subtree.chunks_released

        if copy_as is not None:
            await self._settle_pending(bucket, source)
        free, released = await in_transaction(self._sessionmaker, work)
        if released:
            self._gc.wake()
        return free

    async def _settle_pending(self, bucket: str, source: str) -> None:
        """Before a copy of a file: wait for its bytes, if they are still in
        a spool (a tus upload completed moments ago), to reach Telegram, so
        the copy has pieces to point at. A folder's files are not waited
        for: one found pending makes the copy a 503 to retry."""
        if source.endswith("/"):
            return
        info = await self._store.get(bucket, source)
        if info is not None:
            await self._store.wait_settled(info)

    @staticmethod
    async def _occupied(
        session: AsyncSession, subtree: SubtreeRepository, bucket: str, key: str
    ) -> bool:
        place = Place(bucket, key)
        if place.folder:
            return await FolderRepository(session).exists(bucket, key)
        return bool(await subtree.keys(place))

    @staticmethod
    async def _own(subtree: SubtreeRepository, place: Place, owner: int | None) -> None:
        try:
            await subtree.check_owner(place, owner)
        except ForeignObject as exc:
            raise NotOwner(str(exc)) from None
