"""Liveness, readiness and metrics.

`/health` answers as long as the event loop does: from the moment the service
listens, before any bot has been checked. `/ready` answers 200 once the
service can store files (database reachable, a usable bot), its status
`degraded` (with the reason) while the spool's oldest byte has waited past
FLUSH_LAG_ALERT for Telegram; in public it says only that, and the bots'
ids, usernames and queues only to whom may read `/metrics` (METRICS_ACCESS).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ServicesDep, verify_key
from app.http.api.errors import ApiError
from app.http.api.schemas import BotReadiness, Readiness
from app.store.metrics import CONTENT_TYPE
from app.store.services import Services

router = APIRouter(tags=["health"], route_class=SmallBodyRoute)


@router.get("/health")
async def health() -> dict[str, str]:
    """The process is up and its event loop answers."""
    return {"status": "ok"}


@router.get(
    "/ready",
    response_model=Readiness,
    response_model_exclude_none=True,
    responses={503: {"model": Readiness}},
)
async def ready(request: Request, services: ServicesDep) -> JSONResponse:
    """200 when the database answers, at least one bot passed its getMe
    check and is still usable (here, or held by another instance), and the
    instance was not told to stop, else 503.
    The body is `{"status": ...}` ("ready", "degraded" with a `reason`:
    spooled bytes wait past FLUSH_LAG_ALERT, or "not_ready"); the details
    (database, bots) come with the access `/metrics` needs."""
    database = await services.database_ok()
    usable = len(services.dispatcher.usable_bots())
    # From the moment it is told to stop, a proxy in front of several
    # instances should send new requests elsewhere (deploy/Caddyfile.instances).
    stopping = bool(getattr(request.app.state, "stopping", False))
    # With several instances, bots another instance holds count too: this
    # one gets bots when it gets work (an instance holding none is ready).
    is_ready = database and services.dispatcher.pool_size() > 0 and not stopping
    body = Readiness(status="ready" if is_ready else "not_ready")
    if is_ready:
        # Still 200: the service stores and serves; the spool's flush lags
        # (Telegram unreachable or slow) and the operator should know.
        reason = services.flush_lag.degraded_reason(await services.flush_lag.measure())
        if reason is not None:
            body.status, body.reason = "degraded", reason
    if await _may_see_details(request, services):
        body.database = database
        body.usable_bots = usable
        body.bots = [
            BotReadiness(
                bot_id=status.bot_id,
                username=info.username if (info := services.bots.get(status.bot_id)) else None,
                usable=status.usable,
                checking=status.probing,
                chats=list(status.chats),
                cooling_down_seconds=round(status.cooling_down_for, 1),
                queued=status.queued,
                running=status.running,
            )
            for status in services.dispatcher.status()
        ]
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if is_ready else 503)


async def _may_see_details(request: Request, services: Services) -> bool:
    access = services.settings.metrics_access
    if access == "public":
        return True
    if access == "off" or "authorization" not in request.headers:
        return False
    try:
        await verify_key(request, services)
    except ApiError:
        # A load balancer's check with a stale key still learns the status.
        return False
    except Exception:
        # The key cannot be checked (the database is down): the status is
        # still the answer.
        return False
    return True


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
