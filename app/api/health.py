"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.api.deps import ServicesDep, verify_key
from app.api.errors import ApiError
from app.api.schemas import BotReadiness, Readiness
from app.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, str]:
    """The process is up and its event loop answers."""
    return {"status": "ok"}


@router.get("/ready", response_model=Readiness, responses={503: {"model": Readiness}})
async def ready(services: ServicesDep) -> JSONResponse:
    """The database answers and at least one bot can work (checked with getMe at
    startup; a bot leaves the pool as soon as Telegram rejects its token)."""
    database = await services.database_ok()
    bots = [
        BotReadiness(
            bot_id=status.bot_id,
            username=info.username if (info := services.bots.get(status.bot_id)) else None,
            usable=status.usable,
            cooling_down_seconds=round(status.cooling_down_for, 1),
            queued=status.queued,
            running=status.running,
        )
        for status in services.dispatcher.status()
    ]
    usable = sum(1 for bot in bots if bot.usable)
    is_ready = database and usable > 0
    body = Readiness(
        status="ready" if is_ready else "not_ready",
        database=database,
        usable_bots=usable,
        bots=bots,
    )
    return JSONResponse(body.model_dump(), status_code=200 if is_ready else 503)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus metrics. METRICS_ACCESS: `key` (default; send an API key),
    `public`, or `off`."""
    access = services.settings.metrics_access
    if access == "off":
        raise ApiError(404, "not_found", "metrics are turned off (METRICS_ACCESS=off)")
    if access == "key":
        await verify_key(request, services)
    return Response(services.metrics.render(), media_type=CONTENT_TYPE)
