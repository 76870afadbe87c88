"""WebDAV's errors: a status, a message, and where RFC 4918 names one, the
precondition that failed, answered as a `<D:error>` document.

Store, Telegram and database errors are answered from the one table every
face shares (`app.http.shared.errors`); anything else is a 500 whose cause is
logged, never shown.
"""

from __future__ import annotations

import structlog
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from app.http.dav.xml_out import XML_DECLARATION, XML_MEDIA_TYPE, escape
from app.http.shared.errors import INTERNAL_ERROR, failure_for

log = structlog.get_logger("app.http.dav")

#: Our own elements in error bodies (rclone shows `message`).
OWN_NAMESPACE = "urn:teleuploader:dav"


class DavError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        condition: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        # XML of the RFC 4918 precondition element, "" when none applies.
        self.condition = condition
        self.headers = headers or {}


def bad_request(message: str) -> DavError:
    return DavError(400, message)


def as_dav_error(exc: BaseException, path: str) -> DavError:
    """What to answer for `exc` raised while serving `path`."""
    if isinstance(exc, DavError):
        return exc
    if isinstance(exc, ClientDisconnect):
        return DavError(400, "the client went away")
    failure = failure_for(exc, path=path)
    if failure is None:
        log.error("unhandled_error", path=path, exc_info=exc)
        failure = INTERNAL_ERROR
    headers = failure.headers
    if failure.status == 413:
        # The rest of the body is not read: it must not pass for the next request.
        headers["Connection"] = "close"
    return DavError(failure.status, failure.message, headers=headers)


def error_response(error: DavError, method: str) -> Response:
    headers = dict(error.headers)
    if method == "HEAD" or error.status == 304:
        return Response(status_code=error.status, headers=headers)
    body = (
        f'{XML_DECLARATION}<D:error xmlns:D="DAV:" xmlns:tu="{OWN_NAMESPACE}">'
        f"{error.condition}<tu:message>{escape(error.message)}</tu:message></D:error>"
    )
    return Response(body, status_code=error.status, headers=headers, media_type=XML_MEDIA_TYPE)
