"""The WebDAV face: a plain ASGI app mounted at /dav (and /dav itself, which
Windows asks for without the slash and must not be redirected).

Each request: its path is read from the raw request path, its key checked
(every method but OPTIONS; `read` for the methods that read, `write` for
the others), then its method's handler answers. Whatever a handler raises is
answered here: WebDAV's own refusals with their status and precondition,
the store's through the one error table (app.http.shared.errors), and any
other exception as a 500 whose cause is logged. Requests are counted in
/metrics as `dav:<method>`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.http.dav import copy_move, locking, reading, writing
from app.http.dav.auth import caller
from app.http.dav.context import DavRequest
from app.http.dav.errors import DavError, as_dav_error, error_response
from app.http.dav.paths import href, path_of
from app.http.shared.route_label import set_route_label
from app.store.callers import KeyScope
from app.store.dav_locks import LockConflict, Locked, LockNotHeld, LockOfAnotherKey
from app.store.errors import NotOwner
from app.store.file_tree import Gone, Occupied, TooManyProperties
from app.store.services import Services

Handler = Callable[[DavRequest], Awaitable[Response]]

#: Each method: its handler, and the scope its key needs (None: no key).
METHODS: dict[str, tuple[Handler, KeyScope | None]] = {
    "OPTIONS": (reading.options, None),
    "PROPFIND": (reading.propfind, "read"),
    "GET": (reading.get, "read"),
    "HEAD": (reading.get, "read"),
    "PUT": (writing.put, "write"),
    "MKCOL": (writing.mkcol, "write"),
    "DELETE": (writing.delete, "write"),
    "PROPPATCH": (writing.proppatch, "write"),
    "COPY": (copy_move.copy, "write"),
    "MOVE": (copy_move.move, "write"),
    "LOCK": (locking.lock, "write"),
    "UNLOCK": (locking.unlock, "write"),
}


class DavApp:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        method = request.method.upper()
        set_route_label(scope, f"dav:{method.lower()}" if method in METHODS else "dav")
        raw = scope.get("raw_path") or scope["path"].encode()
        try:
            response = await _answer(request, method, raw)
        except Exception as exc:
            error = as_dav_error(_store_refusal(exc), request.url.path)
            response = error_response(error, method)
        await response(scope, receive, send)


async def _answer(request: Request, method: str, raw_path: bytes) -> Response:
    services: Services | None = request.scope.get("state", {}).get("services")
    if services is None:
        raise DavError(503, "the service is starting", headers={"Retry-After": "5"})
    found = METHODS.get(method)
    if found is None:
        raise DavError(405, f"WebDAV has no method {method[:32]}", headers={"Allow": reading.ALLOW})
    handler, scope = found
    dav = DavRequest(request, services, path_of(raw_path))
    if scope is not None:
        dav.caller = await caller(request, services, scope)
    return await handler(dav)


def _store_refusal(exc: Exception) -> Exception:
    """The store's refusals of a WebDAV change, as WebDAV answers them."""
    if isinstance(exc, Locked):
        return DavError(
            423,
            "a lock covers this, and its token was not submitted in an If header",
            condition=f"<D:lock-token-submitted><D:href>{href(exc.lock.key)}</D:href>"
            "</D:lock-token-submitted>",
        )
    if isinstance(exc, LockConflict):
        return DavError(
            423,
            "a lock that conflicts with this one is held",
            condition=f"<D:no-conflicting-lock><D:href>{href(exc.lock.key)}</D:href>"
            "</D:no-conflicting-lock>",
        )
    if isinstance(exc, LockNotHeld):
        return DavError(409, str(exc), condition="<D:lock-token-matches-request-uri/>")
    if isinstance(exc, LockOfAnotherKey):
        return DavError(403, str(exc))
    if isinstance(exc, NotOwner):
        return writing.foreign()
    if isinstance(exc, Occupied):
        return DavError(412, "the destination exists and Overwrite is F")
    if isinstance(exc, Gone):
        return DavError(404, "no file or folder here any more")
    if isinstance(exc, TooManyProperties):
        return DavError(507, str(exc))
    return exc
