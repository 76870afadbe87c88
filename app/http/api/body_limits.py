"""How much of a JSON request body the native API reads: JSON_BODY_LIMIT
bytes, counted as they arrive, and 413 past it.

FastAPI reads a route's JSON body whole, and parses it, before any
dependency runs, the key's check included: without a limit anyone could make
the process hold and parse megabytes (a 10 MB array of empty objects took it
from 89 to 328 MiB, and kept them; issue 47). Every router of the native API
and the page is made with `route_class=SmallBodyRoute`: a route of theirs
that declares a JSON body reads it here first, refused before a byte is read
when its Content-Length says too much, else as soon as it passes the limit,
and never parsed. The JSON bodies hold a key or a few flags (sign-in, the
scrub's `deep`), so 4 KiB is ample.

Uploads are not JSON: their routes stream the body (forms, raw PUT, tus)
under MAX_UPLOAD_SIZE, after the key's check. A route that reads no body
leaves it unread (the request middleware then closes the connection).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final

from fastapi import params
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive

from app.http.api.errors import ApiError
from app.http.shared.parsing import parse_decimal

#: The most bytes of a JSON request body any route reads.
JSON_BODY_LIMIT: Final = 4 * 1024

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class SmallBodyRoute(APIRoute):
    """An APIRoute whose JSON body, if it declares one, is read under JSON_BODY_LIMIT."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        body = self.body_field
        if body is None or isinstance(body.field_info, params.Form):
            return handler

        async def limited(request: Request) -> Response:
            received = await read_small_body(request, JSON_BODY_LIMIT)
            return await handler(Request(request.scope, _replay(received, request.receive)))

        return limited


async def read_small_body(request: Request, limit: int) -> bytes:
    """The whole body, or ApiError 413 once it is known to pass `limit`
    bytes (from Content-Length before reading, else while reading)."""
    declared = parse_decimal(request.headers.get("content-length", "").strip())
    if declared is not None and declared > limit:
        raise _too_large(limit)
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "payload_too_large",
        f"the JSON body is larger than {limit} bytes, the most this route reads",
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` once, then waits on the connection's own
    (for the client's disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
