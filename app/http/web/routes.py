"""Serving the page: `/` is the one HTML document, `/static/...` its scripts,
styles and images. Every answer carries a strict Content-Security-Policy: the
page runs only its own files, with no inline script or style.

The API's docs, `/docs` (Swagger UI) and `/redoc` (ReDoc), are pages of the
same kind: their libraries are vendored (static/vendor/README.md), so they
work offline and no third party's script runs on the session cookie's origin.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.errors import ApiError

router = APIRouter(include_in_schema=False, route_class=SmallBodyRoute)

STATIC_DIR = Path(__file__).parent / "static"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# The docs' libraries set styles at run time (ReDoc injects style sheets) and
# ReDoc searches in a worker it makes from a blob; scripts stay 'self' only.
DOCS_CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Revalidate (by ETag) on every load, so an upgrade's new files are used at once.
    "Cache-Control": "no-cache",
}
_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/plain"}


@router.get("/")
async def page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)


_DOCS_HEADERS = {**PAGE_HEADERS, "Content-Security-Policy": DOCS_CONTENT_SECURITY_POLICY}


@router.get("/docs")
async def swagger_ui() -> FileResponse:
    return FileResponse(STATIC_DIR / "docs.html", media_type="text/html", headers=_DOCS_HEADERS)


@router.get("/redoc")
async def redoc() -> FileResponse:
    return FileResponse(STATIC_DIR / "redoc.html", media_type="text/html", headers=_DOCS_HEADERS)


@router.get("/static/{name:path}")
async def static(name: str) -> FileResponse:
    missing = ApiError(404, "not_found", f"no page file is named {name[:64]!r}")
    if "\x00" in name or name.startswith("."):
        raise missing  # no file name has a NUL (the OS would refuse it: a 500)
    root = STATIC_DIR.resolve()
    try:
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise missing
    except OSError:
        raise missing from None  # a name the OS refuses (ENAMETOOLONG past 255 bytes)
    suffix = path.suffix.lower()
    media_type = _TYPES.get(suffix) or mimetypes.guess_type(path.name)[0] or "text/plain"
    return FileResponse(path, media_type=media_type, headers=PAGE_HEADERS)
