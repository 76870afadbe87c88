"""The base of every link the service hands out (download URLs, tus upload
URLs, POST Object's Location, the page's presigned S3 links).

Once PUBLIC_BASE_URL is set it is the only base: a request's Host header is
the client's to choose, and a link built from it could point anywhere. Until
then the request's own address is used, and the service warns at start.
"""

from __future__ import annotations

from starlette.requests import Request

from app.config.settings import Settings


def public_base(request: Request, settings: Settings) -> str:
    """PUBLIC_BASE_URL once set, else the request's own address; no trailing `/`."""
    base = settings.public_base_url or str(request.base_url)
    return base.rstrip("/")
