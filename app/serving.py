"""Running an ASGI app with uvicorn: in the current event loop (the demo, the
tests and the simulator, which talk to real HTTP servers on ephemeral ports),
or as the process's server (`teleuploader serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any, Literal

import structlog
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from app.store.reader import CONSUMER_ABORT

log = structlog.get_logger()


class ServerStartFailed(RuntimeError):
    pass


@asynccontextmanager
async def serve_in_task(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    lifespan: Literal["auto", "on", "off"] = "on",
    graceful_seconds: int | None = None,
) -> AsyncIterator[str]:
    """Serve `app` in the current event loop until the block ends; yields its
    base URL. On the way out, requests still running get `graceful_seconds`
    (None: as long as they take), then the app's lifespan ends."""
    config = uvicorn.Config(
        AbortableConnections(app),
        host=host,
        port=port,
        lifespan=lifespan,
        log_config=None,  # leave the host's logging configuration as it is
        log_level="warning",
        access_log=False,
        ws="none",
        timeout_graceful_shutdown=graceful_seconds,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
                raise ServerStartFailed(f"the server on {host}:{port} did not start")
            await asyncio.sleep(0.002)
        bound = server.servers[0].sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        yield f"http://{shown}:{bound}"
    finally:
        server.stop()
        await task


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server living inside another program's event loop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self.should_exit = True
        self._stopping.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The host program owns SIGINT/SIGTERM.
        yield

    # uvicorn's main loop and shutdown poll and sleep in 0.1 s steps; every test
    # starts and stops servers, so these two wait on events and short polls.

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # on_tick(0) refreshes the Date header
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._stopping.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now, busy ones after their response
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                # uvicorn offers no event for "every connection is closed".
                while state.connections or state.tasks:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
        except TimeoutError:
            log.warning("server_shutdown_cancelled_requests", requests=len(state.tasks))
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


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
