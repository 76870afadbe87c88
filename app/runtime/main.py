"""The FastAPI application.

`create_app(settings)` wires the routers and error handlers; its lifespan
starts the services (database, bot pool, GC, object store) and stops them on
shutdown, handing them to every request as `request.state.services`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypedDict

from fastapi import FastAPI
from starlette.routing import Mount, Route
from starlette.types import Scope

from app import __version__
from app.config.settings import Settings
from app.config.tuning import Tuning
from app.http.api import (
    encryption,
    files,
    health,
    scrub,
    session,
    shares,
    snapshots,
    status,
    trash,
    tus,
)
from app.http.api.errors import install_error_handlers
from app.http.api.middleware import RequestContextMiddleware
from app.http.dav.app import DavApp
from app.http.dav.paths import DAV_PREFIX
from app.http.s3.gateway import XML, S3Gateway, draining_refusal
from app.http.s3.service import S3Service
from app.http.web import buckets as web_buckets
from app.http.web import routes as web
from app.http.web import shares as share_links
from app.runtime.sdnotify import systemd_notify
from app.runtime.startup import start_services
from app.store.metrics import Metrics
from app.store.services import Services


class State(TypedDict):
    """What every request sees in `request.state`."""

    services: Services
    # The S3 API's operations on the store (its handlers read it, app.http.s3.context).
    s3: S3Service


def create_app(settings: Settings, tuning: Tuning | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        services = await start_services(settings, tuning)
        s3 = S3Service(
            services.store,
            services.buckets,
            services.multipart,
            max_upload_size=settings.max_upload_size,
        )
        # Also on the app, for the server's shutdown (`shutdown_delay`).
        app.state.services = services
        async with systemd_notify(services) as lifecycle:
            try:
                yield {"services": services, "s3": s3}
            finally:
                lifecycle.stopping()
                await services.close()
                del app.state.services

    app = FastAPI(
        title="TeleUploader",
        summary="Files stored in a private Telegram channel through a pool of bots.",
        version=__version__,
        lifespan=lifespan,
        # /docs and /redoc are the web page's (app/http/web/routes.py): FastAPI's
        # load their scripts from a CDN.
        docs_url=None,
        redoc_url=None,
        # FastAPI's native OpenTelemetry looked up the global providers on every
        # request (~3 % of a small S3 HEAD's CPU) to find none: the service has
        # its own /metrics and logs, and nothing here sets up OpenTelemetry.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install_error_handlers(app)
    # Outermost last: request ids and metrics cover the S3 API too.
    app.add_middleware(S3Gateway, services=_services_of, s3=_s3_of)
    app.add_middleware(
        RequestContextMiddleware,
        metrics=_metrics_of,
        draining_refusal=_draining_refusal,
        hsts=(settings.public_base_url or "").lower().startswith("https://"),
    )
    app.include_router(health.router)
    app.include_router(files.router)
    app.include_router(trash.router)
    app.include_router(tus.router)
    app.include_router(session.router)
    app.include_router(status.router)
    app.include_router(scrub.router)
    app.include_router(snapshots.router)
    app.include_router(encryption.router)
    app.include_router(shares.router)
    app.include_router(share_links.router)
    app.include_router(web_buckets.router)
    # WebDAV at /dav/, and at /dav itself: Windows asks for a folder without
    # its slash, and a redirect breaks it. Any method reaches it.
    dav = DavApp()
    app.router.routes.append(Route(DAV_PREFIX, dav))
    app.router.routes.append(Mount(DAV_PREFIX, dav))
    app.include_router(web.router)
    return app


def shutdown_delay(app: FastAPI) -> Awaitable[float] | None:
    """How long the server goes on serving, unready, once told to stop
    (`Services.shutdown_delay`); None when it stops at once without asking:
    the services are not running, or no other instance can share them."""
    services: Services | None = getattr(app.state, "services", None)
    if services is None or not services.may_delay_shutdown():
        return None
    return services.shutdown_delay()


def _services_of(scope: Scope) -> Services | None:
    services: Services | None = scope.get("state", {}).get("services")
    return services


def _s3_of(scope: Scope) -> S3Service | None:
    s3: S3Service | None = scope.get("state", {}).get("s3")
    return s3


def _metrics_of(scope: Scope) -> Metrics | None:
    services = _services_of(scope)
    return services.metrics if services is not None else None


def _draining_refusal(scope: Scope, request_id: str) -> tuple[str, bytes] | None:
    """S3 clients read why a write was refused during shutdown in XML."""
    body = draining_refusal(scope, _services_of(scope), request_id)
    return None if body is None else (XML, body)
