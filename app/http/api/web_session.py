"""The web page's sign-in cookie and its CSRF token.

The cookie holds a random session token (never the API key). Writes made with
the cookie must also send the CSRF token in `X-CSRF-Token`: it is derived from
the session token, so a page on another origin, which the browser lets send
the cookie but not read anything, cannot know it.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from app.http.api.errors import ApiError

SESSION_COOKIE = "teleuploader_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def csrf_token(session_token: str) -> str:
    return hashlib.sha256(b"csrf:" + session_token.encode("utf-8")).hexdigest()


def session_token(request: Request) -> str | None:
    return request.cookies.get(SESSION_COOKIE) or None


def check_csrf(request: Request, token: str) -> None:
    """A write signed in by cookie must carry the session's CSRF token."""
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), csrf_token(token).encode()):
        raise ApiError(
            403,
            "csrf_token_invalid",
            f"a write signed in with the page's cookie needs the {CSRF_HEADER} header "
            "given at sign-in; reload the page",
        )
