"""The Starlette app: HTTP parsing, pacing, faults, in-flight accounting; the
control endpoints (/_sim/...) are in control.py."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.telegram.simulator.bodies import _pace, _read_body
from app.telegram.simulator.config import DOWNLOAD_PIECE, MIN_PACED_PIECE
from app.telegram.simulator.control import control_routes
from app.telegram.simulator.methods import _METHODS, _canonical_method
from app.telegram.simulator.model import ApiError, SimulatedDrop, _Call
from app.telegram.simulator.ranges import Span, Unsatisfiable, requested_span
from app.telegram.simulator.rules import FILE_UNAVAILABLE
from app.telegram.simulator.state import TelegramSimulator

log = structlog.get_logger("app.telegram.simulator.http")

_BAD_GATEWAY_HTML = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
_RANGE_NOT_SATISFIABLE_HTML = (
    b"<html>\r\n<head><title>416 Requested Range Not Satisfiable</title></head>\r\n"
    b"<body>\r\n<center><h1>416 Requested Range Not Satisfiable</h1></center>\r\n"
    b"<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"
)
_WELL_FORMED_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")


# --- responses ------------------------------------------------------------------------


def _ok(result: Any) -> JSONResponse:
    return JSONResponse({"ok": True, "result": result})


def _error(err: ApiError) -> JSONResponse:
    return JSONResponse(err.payload(), status_code=err.status)


def _server_error(*, json_body: bool) -> Response:
    # Telegram's API answers 500 in JSON; its front end's 502 is an HTML page.
    if json_body:
        return _error(ApiError(500, "Internal Server Error"))
    return Response(_BAD_GATEWAY_HTML, status_code=502, media_type="text/html")


class _TruncatedResponse(Response):
    """Announces the whole body, sends half of it, then drops the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        half = self.body[: len(self.body) // 2]
        await send({"type": "http.response.body", "body": half, "more_body": True})
        raise SimulatedDrop("simulated connection drop")


def _truncated(response: Response) -> Response:
    return _TruncatedResponse(
        response.body, status_code=response.status_code, media_type="application/json"
    )


def _range_not_satisfiable(size: int) -> Response:
    # nginx's own page, as the file server sends it.
    return Response(
        _RANGE_NOT_SATISFIABLE_HTML,
        status_code=416,
        media_type="text/html",
        headers={"Content-Range": f"bytes */{size}"},
    )


async def _send_file(
    request: Request,
    send: Send,
    data: bytes,
    *,
    span: Span | None,
    accept_ranges: bool,
    bandwidth: float | None,
    drop: bool,
    on_sent: Callable[[int], None],
) -> None:
    """Stream a file, or one span of it (206), in pieces paced at `bandwidth`;
    with `drop`, stop halfway and fail."""
    first, length = (0, len(data)) if span is None else (span.first, span.length)
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(length).encode()),
    ]
    if accept_ranges:
        headers.append((b"accept-ranges", b"bytes"))
    if span is not None:
        headers.append((b"content-range", span.content_range(len(data)).encode()))
    status = 200 if span is None else 206
    await send({"type": "http.response.start", "status": status, "headers": headers})
    piece_size = DOWNLOAD_PIECE
    if bandwidth is not None:
        # Small enough pieces that pacing is smooth (about 20 per second).
        piece_size = max(MIN_PACED_PIECE, min(DOWNLOAD_PIECE, int(bandwidth / 20)))
    end = length // 2 if drop else length
    view = memoryview(data)[first : first + length]
    started = time.monotonic()
    sent = 0
    while sent < end:
        piece = bytes(view[sent : min(sent + piece_size, end)])
        if bandwidth is not None:
            # A piece leaves when its last byte would have crossed the link.
            await _pace(started, sent + len(piece), bandwidth)
        if await request.is_disconnected():
            return  # nobody is reading: stop pacing bytes into the void
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        sent += len(piece)
        on_sent(len(piece))
    if drop:
        raise SimulatedDrop("simulated connection drop")
    await send({"type": "http.response.body", "body": b"", "more_body": False})


# --- HTTP endpoints -------------------------------------------------------------------


class _BotApiEndpoint:
    """`/bot{token}/{method}`. A raw ASGI app, so that a call counts as in flight
    until the last byte of its response is sent, not just until a handler returns."""

    def __init__(self, sim: TelegramSimulator) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        token = str(request.path_params["token"])
        method = _canonical_method(str(request.path_params["method"]))
        bot_id = self.sim._bot_for_token(token)
        try:
            if bot_id is None:
                response = await self._refuse(request, token)
                await response(scope, receive, send)
                return
            with (
                self.sim._connection(_CONNECTION_ABORT.get()),
                self.sim._calling(bot_id, method) as call,
            ):
                response = await self._respond(call, request)
                await response(scope, receive, send)
        except ClientDisconnect:
            pass  # the client gave up while sending; nothing was stored

    async def _refuse(self, request: Request, token: str) -> Response:
        await _read_body(request, max_bytes=0, bandwidth=None, on_bytes=lambda _: None)
        if _WELL_FORMED_TOKEN.match(token):
            return _error(ApiError(401, "Unauthorized"))
        return _error(ApiError(404, "Not Found"))

    async def _respond(self, call: _Call, request: Request) -> Response:
        try:
            return await self._handle(call, request)
        except ApiError as err:
            self.sim._count_error(call.bot_id, err.status)
            return _error(err)

    async def _handle(self, call: _Call, request: Request) -> Response:
        config = self.sim.config
        method = _METHODS.get(call.method.lower())
        # The whole body is read before any answer, as Telegram's front end does.
        body = await _read_body(
            request,
            max_bytes=config.max_upload_bytes,
            bandwidth=config.upload_bandwidth if method and method.upload else None,
            on_bytes=lambda size: self.sim._count_received(call.bot_id, size),
        )
        if config.latency:
            # Telegram's work on a whole request: it goes on if the client
            # leaves meanwhile, and the call stays in flight until it is done.
            await asyncio.sleep(config.latency)
        self.sim._check_token(call.bot_id)
        if method is None:
            raise ApiError(404, "Not Found")
        if body.too_large:
            raise ApiError(413, "Request Entity Too Large")
        if call.collided:
            log.warning("sim_concurrent_call_refused", bot_id=call.bot_id, method=call.method)
            raise ApiError.too_many_requests(config.collision_retry_after)
        if method.upload and (files := body.files_size()):
            # Once the whole query is in, as telegram-bot-api's on_cmd does.
            wait = self.sim._space_upload(call.bot_id, files)
            if wait > 0:
                self.sim._count_spacing(call.bot_id, wait)
                await asyncio.sleep(wait)
        if method.faultable:
            early = _fault_before_work(self.sim, call.bot_id, call.method)
            if early is not None:
                return early
        await self.sim._wait_if_held(call.method)
        params = body.params()
        if call.method == "getFile":
            await self._fetch_for_get_file(call.bot_id, params)
        response = _ok(method.handler(self.sim, call.bot_id, params))
        # A drop after the work is done: the message exists, the client never
        # learns it (the orphan case the storage layer must survive).
        drop_rate = self.sim.fault_rate(call.method, "fault_drop_rate")
        if method.faultable and self.sim._inject(call.bot_id, drop_rate):
            return _truncated(response)
        return response

    async def _fetch_for_get_file(self, bot_id: int, params: Any) -> None:
        """What the server does before it answers a getFile: download the
        file (a while: `getfile_bandwidth`), which may fail as a whole
        (`fault_file_unavailable_rate`; the answer: Client.cpp, on_update_file)."""
        seconds = self.sim.getfile_download_seconds(bot_id, params)
        if seconds > 0:
            self.sim._bots[bot_id].stats.getfile_download_seconds += seconds
            await asyncio.sleep(seconds)
        if self.sim._inject(bot_id, self.sim.config.fault_file_unavailable_rate):
            raise ApiError(400, FILE_UNAVAILABLE)


def _fault_before_work(sim: TelegramSimulator, bot_id: int, method: str | None) -> Response | None:
    """A random 429 (raised) or 5xx (returned) instead of doing the work, or None.
    `method` None: a file download."""
    if sim._inject(bot_id, sim.fault_rate(method, "fault_429_rate")):
        raise ApiError.too_many_requests(sim.config.random_429_retry_after)
    if sim._inject(bot_id, sim.fault_rate(method, "fault_5xx_rate")):
        response = _server_error(json_body=sim._coin())
        sim._count_error(bot_id, response.status_code)
        return response
    return None


class _FileEndpoint:
    """`/file/bot{token}/{file_path}`: the bytes behind a getFile path."""

    def __init__(self, sim: TelegramSimulator) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        bot_id = self.sim._bot_for_token(str(request.path_params["token"]))
        # The token is in the path: a revoked one opens no file either.
        if bot_id is None or self.sim._bots[bot_id].revoked:
            await _error(ApiError(401, "Unauthorized"))(scope, receive, send)
            return
        with self.sim._connection(_CONNECTION_ABORT.get()), self.sim._downloading(bot_id):
            await self._serve(bot_id, request, send)

    async def _serve(self, bot_id: int, request: Request, send: Send) -> None:
        config = self.sim.config
        if config.latency:
            await asyncio.sleep(config.latency)
        found = self._lookup(bot_id, str(request.path_params["file_path"]))
        if isinstance(found, Response):
            await found(request.scope, request.receive, send)
            return
        span = None
        if config.honour_range:
            try:
                span = requested_span(request.headers.get("range"), len(found))
            except Unsatisfiable:
                self.sim._count_error(bot_id, 416)
                await _range_not_satisfiable(len(found))(request.scope, request.receive, send)
                return
        drop = self.sim._inject(bot_id, config.fault_drop_rate) or self.sim._inject(
            bot_id, config.fault_download_drop_rate
        )
        await _send_file(
            request,
            send,
            found,
            span=span,
            accept_ranges=config.honour_range,
            bandwidth=config.download_bandwidth,
            drop=drop,
            on_sent=lambda size: self.sim._count_sent(bot_id, size),
        )

    def _lookup(self, bot_id: int, file_path: str) -> bytes | Response:
        """The file's bytes, or the response that refuses them."""
        try:
            self.sim._check_token(bot_id)
            fault = _fault_before_work(self.sim, bot_id, None)
            if fault is not None:
                return fault
            return self.sim._file_for_download(bot_id, file_path)
        except ApiError as err:
            self.sim._count_error(bot_id, err.status)
            return _error(err)


# What drops the current request's connection at once (for `kill`); each
# request runs in a task of its own, so this stays with it.
_CONNECTION_ABORT: ContextVar[Callable[[], None] | None] = ContextVar(
    "sim_connection_abort", default=None
)


class _DroppableConnections:
    """The outermost layer: uvicorn's `send` is a method of the request's cycle,
    which holds the connection's transport (inner layers wrap `send`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        abort = getattr(transport, "abort", None)
        _CONNECTION_ABORT.set(abort if callable(abort) else None)
        await self.app(scope, receive, send)


async def _not_found(request: Request) -> Response:
    """Any path the server does not serve: the Bot API server answers every
    path not under /bot with a JSON 404 (HttpConnection.cpp, handle)."""
    return _error(ApiError(404, "Not Found"))


def create_simulator_app(sim: TelegramSimulator) -> ASGIApp:
    _hide_simulated_drops()
    routes = [Route("/bot{token}/{method}", _BotApiEndpoint(sim), methods=["GET", "POST"])]
    if not sim.config.local:
        # api.telegram.org's file front end; a `--local` server serves no
        # files (its getFile answers a path on its disk instead).
        routes.append(
            Route("/file/bot{token}/{file_path:path}", _FileEndpoint(sim), methods=["GET"])
        )
    routes += control_routes(sim)
    routes.append(Route("/{path:path}", _not_found, methods=["GET", "POST", "HEAD"]))
    return _DroppableConnections(Starlette(routes=routes))


class _HideSimulatedDrops(logging.Filter):
    """uvicorn logs every exception escaping the app; the drops are on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimulatedDrop)


def _hide_simulated_drops() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _HideSimulatedDrops) for f in logger.filters):
        logger.addFilter(_HideSimulatedDrops())
