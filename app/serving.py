"""Running an ASGI app with uvicorn inside the current event loop.

Used by the demo (service and simulator in one process) and by the tests, which
talk to real HTTP servers on ephemeral ports.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from app.store.reader import CONSUMER_ABORT


class ServerStartFailed(RuntimeError):
    pass


@asynccontextmanager
async def serve_in_task(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    lifespan: Literal["auto", "on", "off"] = "on",
) -> AsyncIterator[str]:
    """Serve `app` until the block ends; yields its base URL."""
    config = uvicorn.Config(
        AbortableConnections(app),
        host=host,
        port=port,
        lifespan=lifespan,
        log_config=None,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise ServerStartFailed(f"the server on {host}:{port} did not start")
        await asyncio.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        await task


class AbortableConnections:
    """Lets the code serving a request abort its connection (CONSUMER_ABORT).

    An ASGI app can only end a response, and uvicorn then closes the connection
    gracefully: the socket and uvicorn's write buffer stay until the client reads
    them, which a stalled client never does. A dropped download must free them
    at once. uvicorn's `send` is a method of the request's cycle, which holds the
    connection's transport; if `send` is something else (another server,
    uvicorn's trace logging) there is no hook, and a dropped download raises at
    its client's next read instead.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        abort = getattr(transport, "abort", None)
        if scope["type"] == "http":
            # Each request runs in its own task, so this stays with it; set even
            # when None, in case asyncio carried another request's over.
            CONSUMER_ABORT.set(abort if callable(abort) else None)
        await self.app(scope, receive, send)


class _DrainingServer(uvicorn.Server):
    """uvicorn, telling the app when shutdown starts so it can refuse new writes."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_shutdown()
        super().handle_exit(sig, frame)


def run_server(app: FastAPI, *, host: str, port: int, grace_seconds: float) -> None:
    """Serve until SIGTERM/SIGINT; in-flight requests get `grace_seconds` to finish.

    New writes during the drain are refused with 503 (see RequestContextMiddleware).
    """
    app.state.draining = False

    def start_draining() -> None:
        app.state.draining = True

    config = uvicorn.Config(
        AbortableConnections(app),
        host=host,
        port=port,
        log_config=None,
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
        timeout_graceful_shutdown=int(grace_seconds) + 5,
        access_log=False,
    )
    # uvicorn re-raises the signal it caught once it has shut down; with the
    # default disposition that kills the process (status 143) after a clean
    # shutdown. A no-op handler makes a clean shutdown exit 0.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    _DrainingServer(config, start_draining).run()
