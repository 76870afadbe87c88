"""Encryption at rest, on demand (admin keys only): `POST
/api/admin/encryption/migrate` seals the chunks stored before encryption was
turned on, in the background of the running service (it owns the bots); `GET`
says how it goes. `teleuploader encryption migrate --wait` drives these."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import AdminKey, ServicesDep
from app.http.api.errors import ApiError

router = APIRouter(tags=["encryption"], route_class=SmallBodyRoute)


class MigrationPass(BaseModel):
    running: bool
    started_at: datetime
    finished_at: datetime | None
    sealed: int
    skipped: int
    error: str | None


class MigrationStatus(BaseModel):
    # The last pass asked for (None: none since the start).
    last_pass: MigrationPass | None
    # Live plaintext chunks left (counted up to 1,000).
    plaintext_chunks: int


async def _status(services: ServicesDep) -> MigrationStatus:
    migration = services.sealing_migration
    current = migration.current
    return MigrationStatus(
        last_pass=MigrationPass.model_validate(current.as_dict()) if current else None,
        plaintext_chunks=await migration.left(),
    )


@router.post("/api/admin/encryption/migrate", response_model=MigrationStatus, status_code=202)
async def start_migration(services: ServicesDep, _key: AdminKey) -> MigrationStatus:
    """Seal every plaintext chunk now (or join the pass running): each is read,
    sent again as sealed copies through the bots' pacing, and its plaintext
    copies deleted. Poll `GET /api/admin/encryption/migrate` until it is done."""
    if not services.store.encryption_enabled:
        raise ApiError(
            409,
            "encryption_off",
            "no master key is configured (ENCRYPTION_KEYS): nothing to seal with",
        )
    services.sealing_migration.start()
    return await _status(services)


@router.get("/api/admin/encryption/migrate", response_model=MigrationStatus)
async def migration_status(services: ServicesDep, _key: AdminKey) -> MigrationStatus:
    """The last migration pass (running or done) and the plaintext chunks left."""
    return await _status(services)
