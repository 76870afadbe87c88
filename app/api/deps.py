"""FastAPI dependencies, as `Annotated` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.errors import ApiError
from app.api.web_session import check_csrf, session_token
from app.config import Settings
from app.db.api_keys import ApiKeyRepository
from app.db.models import ApiKey
from app.db.session import session_scope
from app.db.web_sessions import WebSessionRepository
from app.services import Services
from app.store.service import ObjectStore


def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_store(services: ServicesDep) -> ObjectStore:
    return services.store


StoreDep = Annotated[ObjectStore, Depends(get_store)]


def get_settings(services: ServicesDep) -> Settings:
    return services.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


async def verify_key(request: Request, services: Services) -> ApiKey:
    """The caller's key: from `Authorization: Bearer`, or else from the web
    page's session cookie (whose writes need the CSRF token)."""
    key = _bearer(request)
    cookie = session_token(request) if key is None else None
    if key is None and cookie is None:
        raise ApiError(
            401,
            "unauthorized",
            "an API key is required: send `Authorization: Bearer <key>` "
            "(create one with `teleuploader keys create NAME`) or sign in on the web page",
            {"WWW-Authenticate": "Bearer"},
        )
    if cookie is not None:
        check_csrf(request, cookie)
    # A short session of its own: an upload must not hold a database
    # connection for as long as its body takes to arrive.
    async with session_scope(services.sessionmaker) as session:
        if key is not None:
            found = await ApiKeyRepository(session).verify(key)
        else:
            found = await WebSessionRepository(session).key_of(cookie or "")
    if found is None:
        detail = (
            "the API key is unknown or revoked"
            if key is not None
            else "the sign-in has expired or was ended: sign in again"
        )
        raise ApiError(401, "unauthorized", detail, {"WWW-Authenticate": "Bearer"})
    return found


async def require_write_key(request: Request, services: ServicesDep) -> ApiKey:
    return await verify_key(request, services)


async def require_read_access(request: Request, services: ServicesDep) -> ApiKey | None:
    """Downloads are public (the public id is the capability) unless the
    REQUIRE_KEY_FOR_DOWNLOADS setting says otherwise."""
    if not services.settings.require_key_for_downloads:
        return None
    return await verify_key(request, services)


WriteKey = Annotated[ApiKey, Depends(require_write_key)]
ReadAccess = Annotated[ApiKey | None, Depends(require_read_access)]
