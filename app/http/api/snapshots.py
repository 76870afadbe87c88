"""Snapshots on demand (admin keys only): `POST /api/admin/snapshot` writes
one now and answers when it is pinned in every storage chat (docs/durability.md).
`teleuploader snapshot` calls it: the running service owns the bots."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import AdminKey, ServicesDep

router = APIRouter(tags=["durability"], route_class=SmallBodyRoute)


class SnapshotTaken(BaseModel):
    # False: another instance holds the writers' lease (it is writing one).
    taken: bool
    taken_at: datetime | None
    rows: dict[str, int]
    pieces: int
    compressed_bytes: int
    # Messages of snapshots older than the last two, handed to the GC.
    pruned_messages: int


@router.post("/api/admin/snapshot", response_model=SnapshotTaken)
async def take_snapshot(services: ServicesDep, _key: AdminKey) -> SnapshotTaken:
    """Write a snapshot of the metadata into the storage chats now; a
    Telegram failure is a 503 and leaves the previous snapshot pinned."""
    result = await services.snapshots.take()
    return SnapshotTaken(
        taken=result.taken_at is not None,
        taken_at=result.taken_at,
        rows=result.counts,
        pieces=result.pieces,
        compressed_bytes=result.compressed_bytes,
        pruned_messages=result.pruned,
    )
