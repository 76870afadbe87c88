"""Sign-in for the web page: POST /api/session trades an API key for an
HttpOnly session cookie, GET tells the page who is signed in (and the CSRF
token its writes send), DELETE signs out."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ServicesDep, verify_key
from app.http.api.errors import ApiError
from app.http.api.web_session import SESSION_COOKIE, check_csrf, csrf_token, session_token
from app.http.shared.client import client_address
from app.store.callers import Caller
from app.store.services import Services

router = APIRouter(tags=["web page"], route_class=SmallBodyRoute)

# API keys are 46 characters; a body field far longer is not one.
MAX_KEY_FIELD = 256


class SignIn(BaseModel):
    key: str = Field(min_length=1, max_length=MAX_KEY_FIELD)


class SessionOut(BaseModel):
    key_name: str
    csrf_token: str | None
    max_upload_size: int
    s3_enabled: bool
    # Whether the key may browse the S3 buckets (an admin key, with the S3 API on).
    may_browse_buckets: bool


def _session_out(services: Services, key: Caller, token: str | None) -> SessionOut:
    s3_enabled = bool(services.settings.s3_credentials)
    return SessionOut(
        key_name=key.name,
        csrf_token=csrf_token(token) if token else None,
        max_upload_size=services.settings.max_upload_size,
        s3_enabled=s3_enabled,
        may_browse_buckets=s3_enabled and key.allows("admin"),
    )


def _secure(request: Request, services: Services) -> bool:
    """Secure cookies where the page is served over https (behind Caddy the
    proxy headers say so; PUBLIC_BASE_URL says so too)."""
    base = services.settings.public_base_url or ""
    return request.url.scheme == "https" or base.startswith("https://")


@router.post("/api/session", response_model=SessionOut)
async def sign_in(
    body: SignIn, request: Request, response: Response, services: ServicesDep
) -> SessionOut:
    """Sign the page in with an API key; the answer sets the session cookie
    (and ends the browser's previous session). Failed sign-ins count as
    failed key checks, limited per client (429 with Retry-After)."""
    lifetime = timedelta(hours=services.settings.web_session_hours)
    signed_in = await services.access.sign_in(
        body.key.strip(),
        lifetime,
        address=client_address(request),
        replacing=session_token(request),
    )
    if signed_in is None:
        raise ApiError(401, "unauthorized", "the API key is unknown or revoked")
    response.set_cookie(
        SESSION_COOKIE,
        signed_in.token,
        max_age=int(lifetime.total_seconds()),
        path="/",
        secure=_secure(request, services),
        httponly=True,
        samesite="strict",
    )
    return _session_out(services, signed_in.key, signed_in.token)


@router.get("/api/session", response_model=SessionOut)
async def who_am_i(request: Request, services: ServicesDep) -> SessionOut:
    """The signed-in key's name and the CSRF token for the page's writes."""
    key = await verify_key(request, services)
    return _session_out(services, key, session_token(request))


@router.delete("/api/session", status_code=204)
async def sign_out(request: Request, services: ServicesDep) -> Response:
    """End the page's session (its row and its cookie)."""
    token = session_token(request)
    response = Response(status_code=204)
    if token is not None:
        check_csrf(request, token)
        await services.access.sign_out(token)
        response.delete_cookie(
            SESSION_COOKIE,
            path="/",
            secure=_secure(request, services),
            httponly=True,
            samesite="strict",
        )
    return response
