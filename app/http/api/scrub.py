"""The scrub, on demand (admin keys only): `POST /api/admin/scrub` runs a full
pass now, in the background; `GET /api/admin/scrub` says how it goes, and how
the stored data stands. `teleuploader scrub --wait --json` drives these: the
running service owns the bots, so the CLI never calls Telegram itself."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import AdminKey, ServicesDep

router = APIRouter(tags=["durability"], route_class=SmallBodyRoute)


class ScrubRequest(BaseModel):
    # Read every copy whole and check its bytes (else: ask Telegram whether
    # it still holds each one, which finds missing copies, not corrupt ones,
    # and still costs Telegram a download of each: getFile is one).
    deep: bool = True


class ScrubPass(BaseModel):
    running: bool
    deep: bool
    started_at: datetime
    finished_at: datetime | None
    error: str | None
    checked: int
    missing: int
    corrupt: int
    # Copies Telegram could not serve this time: counted, not yet missing
    # (docs/durability.md, "When Telegram cannot serve a copy").
    unavailable: int
    repaired: int
    read: int
    read_bytes: int
    degraded_objects: int
    lost_objects: int
    # Copies this instance did not check: other instances hold their bots.
    skipped: int = 0


class ScrubStatus(BaseModel):
    replicas: int
    # The last full pass asked for (None: none since the start).
    last_pass: ScrubPass | None
    degraded_objects: int
    lost_objects: int
    degraded_chunks: int
    lost_chunks: int
    copies: int
    repaired_since_start: int


async def _status(services: ServicesDep) -> ScrubStatus:
    scrub = services.scrub
    health = await scrub.health()
    full = scrub.full_pass
    return ScrubStatus(
        replicas=scrub.replicas,
        last_pass=ScrubPass.model_validate(full.as_dict()) if full is not None else None,
        degraded_objects=health.objects_degraded,
        lost_objects=health.objects_lost,
        degraded_chunks=health.chunks_degraded,
        lost_chunks=health.chunks_lost,
        copies=health.copies,
        repaired_since_start=scrub.repaired,
    )


@router.post("/api/admin/scrub", response_model=ScrubStatus, status_code=202)
async def start_scrub(
    services: ServicesDep, _key: AdminKey, request: ScrubRequest | None = None
) -> ScrubStatus:
    """Run a full scrub pass now (or join the one running): every chunk copy
    checked (`deep`: read whole against its hashes), then every chunk short
    of REPLICAS repaired. Poll `GET /api/admin/scrub` until it is done."""
    services.scrub.start_full_pass(deep=(request or ScrubRequest()).deep)
    return await _status(services)


@router.get("/api/admin/scrub", response_model=ScrubStatus)
async def scrub_status(services: ServicesDep, _key: AdminKey) -> ScrubStatus:
    """The last full pass (running or done) and how the stored data stands."""
    return await _status(services)
