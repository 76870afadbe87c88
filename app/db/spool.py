"""Spooled parts and the instances that own them.

A part acknowledged from the local spool is an `UploadPart` (size, ETag) with
no pieces plus a `SpooledPart` naming its file. `put` writes both in one
transaction; `commit_pieces` turns it into an ordinary part (pieces written,
spool row gone) in another; the last of a pending object's parts also
finalises the object there (app.db.pending). Replacing a part number,
aborting or completing an upload deletes spool rows with their parts (ON DELETE CASCADE); the caller
deletes the files named in what these methods return.

Owners: every row carries the id of the instance that wrote it. An instance
whose heartbeat went stale has died; `adopt` hands its rows to a live one.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import delete, exists, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.chunks import ChunkRepository
from app.db.dialects import upsert_insert
from app.db.locking import batches, dialect_name, lock_database_for_write, lock_upload_part
from app.db.models import Instance, MultipartUpload, PartPiece, SpooledPart, UploadPart
from app.db.multipart_errors import UploadMissing
from app.db.object_rows import PieceSpec
from app.db.pending import PendingRepository
from app.db.types import utcnow


class InstanceRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def register(self, instance_id: str, host: str, pid: int, *, block_digests: str) -> None:
        """`block_digests`: what the registering release checks
        (app.store.blocks.READABLE); new chunks get a digest only once every
        live row lists it."""
        now = utcnow()
        self._session.add(
            Instance(
                id=instance_id,
                host=host,
                pid=pid,
                started_at=now,
                heartbeat_at=now,
                block_digests=block_digests,
            )
        )
        await self._session.flush()

    async def register_again(
        self, instance_id: str, host: str, pid: int, *, block_digests: str
    ) -> None:
        """`register`, unless the row is there (another part of the same
        process, which also found it gone, has registered it meanwhile)."""
        now = utcnow()
        await self._session.execute(
            upsert_insert(dialect_name(self._session), Instance)
            .values(
                id=instance_id,
                host=host,
                pid=pid,
                started_at=now,
                heartbeat_at=now,
                block_digests=block_digests,
            )
            .on_conflict_do_nothing()
        )

    async def block_digests(self, ids: set[str]) -> list[str]:
        """What each of the given instances can check (`instances.block_digests`)."""
        found: list[str] = []
        for batch in batches(sorted(ids)):
            found.extend(
                await self._session.scalars(
                    select(Instance.block_digests).where(Instance.id.in_(batch))
                )
            )
        return found

    async def heartbeat(self, instance_id: str) -> bool:
        """Whether the instance's row is still there (another instance may
        have taken it for dead and deleted it)."""
        result = await self._session.execute(
            update(Instance).where(Instance.id == instance_id).values(heartbeat_at=utcnow())
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def remove(self, instance_id: str) -> None:
        await self._session.execute(delete(Instance).where(Instance.id == instance_id))

    async def live_ids(self, stale_after: float) -> set[str]:
        fresh = utcnow() - timedelta(seconds=stale_after)
        return set(
            await self._session.scalars(select(Instance.id).where(Instance.heartbeat_at >= fresh))
        )

    async def processes_on(self, host: str, ids: set[str]) -> list[tuple[str, int]]:
        """(id, pid) of the given instances that run on `host`."""
        rows = await self._session.execute(
            select(Instance.id, Instance.pid).where(
                Instance.id.in_(builtins.list(ids)), Instance.host == host
            )
        )
        return [(instance_id, pid) for instance_id, pid in rows]

    async def forget(self, ids: set[str]) -> None:
        """Delete the rows of instances found dead."""
        for batch in batches(sorted(ids)):
            await self._session.execute(delete(Instance).where(Instance.id.in_(batch)))


class SpoolRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._chunks = ChunkRepository(session)

    async def put(
        self,
        upload_id: str,
        part_number: int,
        *,
        size: int,
        etag: str,
        path: str,
        owner: str,
        bucket: str,
        key: str,
        checksum: str | None = None,
        md5: str | None = None,
        now: datetime | None = None,
    ) -> list[str]:
        """Record a spooled part, replacing any earlier upload of its number.

        Returns the spool paths the replaced part had (to delete once this
        commits). A replaced part's chunks go to the ledger ('overwritten').
        Raises UploadMissing.
        """
        now = now or utcnow()
        await lock_database_for_write(self._session)
        upload = await self._session.scalar(
            select(MultipartUpload)
            .where(MultipartUpload.id == upload_id)
            .with_for_update(read=True)
        )
        if (
            upload is None
            or upload.bucket != bucket
            or upload.key != key
            or upload.completed_at is not None
        ):
            raise UploadMissing(upload_id)
        await lock_upload_part(self._session, upload_id, part_number)
        old_paths = builtins.list(
            await self._session.scalars(
                select(SpooledPart.path).where(
                    SpooledPart.upload_id == upload_id, SpooledPart.part_number == part_number
                )
            )
        )
        old_chunk_ids = builtins.list(
            await self._session.scalars(
                select(PartPiece.chunk_id)
                .where(PartPiece.upload_id == upload_id, PartPiece.part_number == part_number)
                .distinct()
            )
        )
        # The old part goes whole (its pieces and spool row cascade with it).
        await self._session.execute(
            delete(UploadPart).where(
                UploadPart.upload_id == upload_id, UploadPart.part_number == part_number
            )
        )
        await self._session.execute(
            insert(UploadPart).values(
                upload_id=upload_id,
                part_number=part_number,
                size=size,
                etag=etag,
                checksum=checksum,
                created_at=now,
            )
        )
        await self._session.execute(
            insert(SpooledPart).values(
                upload_id=upload_id,
                part_number=part_number,
                path=path,
                size=size,
                owner=owner,
                created_at=now,
                md5=md5,
            )
        )
        await self._chunks.release(old_chunk_ids, "overwritten")
        return old_paths

    async def owned(self, owner: str, upload_id: str | None = None) -> builtins.list[SpooledPart]:
        """The rows `owner` must flush, oldest upload first, parts in order."""
        query = select(SpooledPart).where(SpooledPart.owner == owner)
        if upload_id is not None:
            query = query.where(SpooledPart.upload_id == upload_id)
        rows = await self._session.scalars(
            query.order_by(SpooledPart.upload_id, SpooledPart.part_number)
        )
        return builtins.list(rows)

    async def pending_parts(self, upload_id: str, part_numbers: Sequence[int]) -> set[int]:
        """Which of these part numbers are still in the spool."""
        if not part_numbers:
            return set()
        rows = await self._session.scalars(
            select(SpooledPart.part_number).where(
                SpooledPart.upload_id == upload_id,
                SpooledPart.part_number.in_(builtins.list(part_numbers)),
            )
        )
        return set(rows)

    async def paths_of_upload(self, upload_id: str) -> builtins.list[str]:
        return builtins.list(
            await self._session.scalars(
                select(SpooledPart.path).where(SpooledPart.upload_id == upload_id)
            )
        )

    async def existing(self, spool_ids: Iterable[int]) -> set[int]:
        """Which of these rows exist, whoever owns them."""
        found: set[int] = set()
        for batch in batches(sorted(set(spool_ids))):
            found.update(
                await self._session.scalars(select(SpooledPart.id).where(SpooledPart.id.in_(batch)))
            )
        return found

    async def all_paths(self) -> set[str]:
        return set(await self._session.scalars(select(SpooledPart.path)))

    async def commit_pieces(self, spool_id: int, pieces: Sequence[PieceSpec]) -> bool:
        """Give a spooled part its pieces and drop its spool row.

        False if the row is gone (the part was replaced, or its upload
        completed or aborted meanwhile): nothing is written, and the caller
        releases the chunks it stored for it.
        """
        await lock_database_for_write(self._session)
        upload_id = await self._session.scalar(
            select(SpooledPart.upload_id).where(SpooledPart.id == spool_id)
        )
        if upload_id is None:
            return False
        # The upload first, exclusively, as Complete and abort lock it: a
        # Complete that makes the object pending and the commit of its last
        # spooled part go one after the other, and of two parts committed at
        # once the second sees the first's row gone, so one of them finalises.
        upload = await self._session.scalar(
            select(MultipartUpload)
            .where(MultipartUpload.id == upload_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        row = await self._session.scalar(
            select(SpooledPart).where(SpooledPart.id == spool_id).with_for_update()
        )
        if upload is None or row is None:
            return False
        if sum(piece.length for piece in pieces) != row.size:
            raise ValueError(f"pieces do not add up to the {row.size} bytes of spooled part")
        await self._chunks.mark_live(piece.chunk_id for piece in pieces)
        await self._session.execute(
            insert(PartPiece),
            [
                {
                    "upload_id": row.upload_id,
                    "part_number": row.part_number,
                    "seq": seq,
                    "chunk_id": piece.chunk_id,
                    "offset": piece.offset,
                    "length": piece.length,
                }
                for seq, piece in enumerate(pieces)
            ],
        )
        await self._session.execute(delete(SpooledPart).where(SpooledPart.id == spool_id))
        await PendingRepository(self._session).finalise(upload)
        return True

    async def adopt(self, owner: str, live_owners: set[str]) -> builtins.list[int]:
        """Take over the rows of instances that are not alive; their sizes."""
        # Also not of an instance with a row: one that registered after
        # `live_owners` was read is alive (see collect_pending_orphans).
        orphaned = SpooledPart.owner.not_in(builtins.list(live_owners | {owner})) & ~exists().where(
            Instance.id == SpooledPart.owner
        )
        await lock_database_for_write(self._session)
        rows = (
            await self._session.execute(
                select(SpooledPart.id, SpooledPart.size).where(orphaned).with_for_update()
            )
        ).all()
        for batch in batches([row_id for row_id, _ in rows]):
            await self._session.execute(
                update(SpooledPart).where(SpooledPart.id.in_(batch)).values(owner=owner)
            )
        return [size for _, size in rows]
