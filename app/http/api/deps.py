"""FastAPI dependencies, as `Annotated` aliases.

Who is calling: `resolve_key` finds the caller's API key (the Bearer header,
or else the web page's session cookie), and one alias per required scope
checks it (`ReadKey`, `WriteKey`; `ReadAccess` for downloads, public unless
REQUIRE_KEY_FOR_DOWNLOADS). What a key may do to a
particular file (its owner) is decided by the route, which knows the file.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.config.settings import Settings
from app.http.api.errors import ApiError
from app.http.api.web_session import check_csrf, session_token
from app.http.shared.client import client_address
from app.store.callers import Caller, KeyScope
from app.store.service import ObjectStore
from app.store.services import Services


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


async def resolve_key(request: Request, services: Services) -> Caller | None:
    """The caller's API key: from `Authorization: Bearer`, or else from the
    web page's session cookie (whose writes need the CSRF token); None when
    the request carries neither.

    A key or sign-in that is sent but unknown, revoked or expired is a 401,
    not None: the client must learn that it is wrong rather than be treated
    as anonymous. A client past the limits on failed key checks gets
    TooManyFailedChecks (429) instead, its key unchecked.
    """
    key = _bearer(request)
    if key is not None:
        # Failed checks are limited per client (app/store/key_failures.py).
        found = await services.access.verify_key(key, client_address(request))
        if found is None:
            raise ApiError(
                401,
                "unauthorized",
                "the API key is unknown or revoked",
                {"WWW-Authenticate": "Bearer"},
            )
        return found
    cookie = session_token(request)
    if cookie is None:
        return None
    check_csrf(request, cookie)
    signed_in = await services.access.signed_in_key(cookie)
    if signed_in is None:
        raise ApiError(
            401,
            "unauthorized",
            "the sign-in has expired or was ended: sign in again",
            {"WWW-Authenticate": "Bearer"},
        )
    return signed_in


async def verify_key(request: Request, services: Services) -> Caller:
    """The caller's API key, of any scope; 401 without one."""
    found = await resolve_key(request, services)
    if found is None:
        raise ApiError(
            401,
            "unauthorized",
            "an API key is required: send `Authorization: Bearer <key>` "
            "(create one with `teleuploader keys create NAME`) or sign in on the web page",
            {"WWW-Authenticate": "Bearer"},
        )
    return found


def _check_scope(key: Caller, scope: KeyScope) -> Caller:
    if not key.allows(scope):
        raise ApiError(
            403,
            "forbidden",
            f"this needs an API key with the `{scope}` scope (or a wider one); "
            f"the key {key.name!r} has `{key.scope}` "
            f"(create one with `teleuploader keys create NAME --scope {scope}`)",
        )
    return key


async def require_read_key(request: Request, services: ServicesDep) -> Caller:
    return _check_scope(await verify_key(request, services), "read")


async def require_write_key(request: Request, services: ServicesDep) -> Caller:
    return _check_scope(await verify_key(request, services), "write")


async def require_admin_key(request: Request, services: Services) -> Caller:
    return _check_scope(await verify_key(request, services), "admin")


async def _admin_key(request: Request, services: ServicesDep) -> Caller:
    return await require_admin_key(request, services)


async def require_read_access(request: Request, services: ServicesDep) -> Caller | None:
    """Downloads are public (the public id is the capability) unless the
    REQUIRE_KEY_FOR_DOWNLOADS setting says otherwise."""
    if not services.settings.require_key_for_downloads:
        return None
    return await require_read_key(request, services)


ReadKey = Annotated[Caller, Depends(require_read_key)]
WriteKey = Annotated[Caller, Depends(require_write_key)]
ReadAccess = Annotated[Caller | None, Depends(require_read_access)]
AdminKey = Annotated[Caller, Depends(_admin_key)]
