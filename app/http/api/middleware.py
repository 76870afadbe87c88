"""Pure ASGI middleware (no BaseHTTPMiddleware: it buffers and breaks
cancellation on streaming routes).

Every request gets a request id (the client's `X-Request-ID` when it is sane,
else a new one) that is bound to every log line of the request and returned in
the response; the request is counted and timed for /metrics by its route
template, and logged once when its response ends. A request cut off by the
shutdown's grace period is logged as `cancelled` (a warning) and, if no
answer had begun, with status 499 rather than 500. Every response says
`X-Content-Type-Options: nosniff`: no browser may guess a type we did not send;
and, when PUBLIC_BASE_URL is https, `Strict-Transport-Security`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
import time
from collections.abc import Callable

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http.shared.route_label import route_label
from app.kit.logging import REQUEST_ID
from app.store.metrics import Metrics

log = structlog.get_logger("app.http")

_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


# (scope, request id) -> (media type, body) of the 503 that refuses a write
# during shutdown, or None for the native API's JSON. The S3 API answers in XML.
DrainingRefusal = Callable[[Scope, str], tuple[str, bytes] | None]


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Callable[[Scope], Metrics | None],
        draining_refusal: DrainingRefusal | None = None,
        hsts: bool = False,
    ) -> None:
        self.app = app
        self._metrics = metrics
        self._draining_refusal = draining_refusal
        # Added to every answer: nosniff, and HSTS where the service is public over https.
        self._headers = [_NOSNIFF, _HSTS] if hsts else [_NOSNIFF]
        # Bound once, with the logging configuration in force when the app
        # is built (`serve` configures logging first): a module logger is a
        # lazy proxy that builds a bound logger on every call, ~3 % of a
        # small request's CPU even when INFO is filtered out.
        self._log = log.bind()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        if scope["method"] in _WRITES and _draining(scope):
            refusal = None
            if self._draining_refusal is not None:
                refusal = self._draining_refusal(scope, request_id)
            await _refuse_while_draining(request_id, send, refusal)
            return
        status = 500
        started = time.perf_counter()
        body_read = not _has_body(scope)

        async def receive_tracking() -> Message:
            nonlocal body_read
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read = True
            return message

        answered = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status = message["status"]
                answered = True
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                for always in self._headers:
                    if not any(name.lower() == always[0] for name, _ in headers):
                        headers.append(always)
                if not body_read:
                    # Answered before the body was read (an error, usually): the
                    # rest of the body must not be taken for the next request.
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        bound = REQUEST_ID.set(request_id)
        cancelled = False
        try:
            await self.app(scope, receive_tracking, send_with_id)
        except asyncio.CancelledError:
            # Cut off by the shutdown's grace period: no server error, so no
            # 500 in the metrics and the log (every deploy that cuts an upload
            # would set off 5xx alerts); the client saw its connection close.
            cancelled = True
            if not answered:
                status = CANCELLED_STATUS
            raise
        finally:
            try:
                seconds = time.perf_counter() - started
                route = route_label(scope)
                method = scope["method"]
                metrics = self._metrics(scope)
                if metrics is not None:
                    metrics.observe_request(route, method, status, seconds)
                emit = self._log.warning if cancelled else self._log.info
                emit(
                    "http_request",
                    method=method,
                    route=route,
                    status=status,
                    seconds=round(seconds, 4),
                    **(_CANCELLED if cancelled else {}),
                )
            finally:
                REQUEST_ID.reset(bound)


# WebDAV's writes too (app/http/dav).
_WRITES = frozenset(
    {"POST", "PUT", "DELETE", "PATCH", "MKCOL", "COPY", "MOVE", "PROPPATCH", "LOCK", "UNLOCK"}
)
#: The status logged and counted for a request cut off before its answer
#: began (nginx's "client closed request": the connection closed unanswered).
CANCELLED_STATUS = 499
_CANCELLED = {"cancelled": True}
_NOSNIFF = (b"x-content-type-options", b"nosniff")
# A year: browsers then reach the service over https only, even from an
# http:// link. Subdomains are left alone (they may be other services).
_HSTS = (b"strict-transport-security", b"max-age=31536000")


def _draining(scope: Scope) -> bool:
    app = scope.get("app")
    return bool(getattr(getattr(app, "state", None), "draining", False))


async def _refuse_while_draining(
    request_id: str, send: Send, refusal: tuple[str, bytes] | None
) -> None:
    """Shutdown has begun: in-flight requests finish, new writes go elsewhere."""
    media_type, body = refusal or (
        "application/json",
        json.dumps(
            {"error": "shutting_down", "detail": "the service is shutting down; retry shortly"}
        ).encode(),
    )
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", media_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"5"),
                (b"connection", b"close"),
                (b"x-request-id", request_id.encode()),
                _NOSNIFF,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return True
    return False


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if _SANE_ID.match(text):
                return text
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


# A new id is unique, not secret: a random prefix per process and a counter
# (uuid4 read the kernel's random source on every request, ~10 % of the CPU
# of a small S3 HEAD).
_ID_PREFIX = secrets.token_hex(8)
_ID_COUNTER = itertools.count()
