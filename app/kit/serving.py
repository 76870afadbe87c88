"""Running an ASGI app with uvicorn: in the current event loop (the demo, the
tests and the simulator, which talk to real HTTP servers on ephemeral ports),
or as the process's server (`teleuploader serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import math
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any, Literal

import structlog
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from app.kit.consumer_abort import CONSUMER_ABORT
from app.kit.head_limits import (
    HEAD_TIMEOUT_SECONDS,
    MAX_HEAD_BYTES,
    LimitedHttpToolsProtocol,
    limited_protocol,
)

log = structlog.get_logger("app.serving")

#: How long the service keeps an idle keep-alive connection open, in seconds.
#: Longer than the clients in front of it keep theirs (Caddy: `keepalive 2m`
#: in the Caddyfile; httpx: 5 s), so that the client, not the service, closes
#: an idle connection. The other way round, a client can send its next request
#: on a connection the service is closing that instant, and lose it (Caddy
#: answers its own client 502). uvicorn's default is 5 s.
KEEP_ALIVE_SECONDS = 150


class ServerStartFailed(RuntimeError):
    pass


class CannotListen(Exception):
    """The service's address cannot be bound; the message says what to set."""


def bind_listener(host: str, port: int) -> socket.socket:
    """The listening socket for `serve`, bound before anything else starts:
    a port in use is one line, found before the service takes a bot lease
    or calls Telegram. uvicorn is then handed this socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn binds: a restart need not wait out TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise CannotListen(_why_not(host, port, exc)) from None
    sock.set_inheritable(True)
    return sock


def _why_not(host: str, port: int, exc: OSError) -> str:
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{shown} is already in use (another TeleUploader?): stop what listens there, "
            "or set PORT to a free port"
        )
    if exc.errno == errno.EACCES:
        return f"{shown}: ports below 1024 need privileges; set PORT to 1024 or above"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"HOST {host!r} is not an address of this machine: set HOST (127.0.0.1 behind Caddy)"
    return f"cannot listen on {shown} (HOST and PORT): {exc.strerror or exc}"


@asynccontextmanager
async def serve_in_task(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    lifespan: Literal["auto", "on", "off"] = "on",
    graceful_seconds: int | None = None,
    head_timeout: float = HEAD_TIMEOUT_SECONDS,
) -> AsyncIterator[str]:
    """Serve `app` in the current event loop until the block ends; yields its
    base URL. On the way out, requests still running get `graceful_seconds`
    (None: as long as they take), then the app's lifespan ends. Request heads
    are limited as `teleuploader serve` limits them (`head_timeout`: tests)."""
    config = uvicorn.Config(
        AbortableConnections(app),
        host=host,
        port=port,
        http=limited_protocol(max_head_bytes=MAX_HEAD_BYTES, head_timeout=head_timeout),
        lifespan=lifespan,
        log_config=None,  # leave the host's logging configuration as it is
        log_level="warning",
        access_log=False,
        ws="none",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
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
    """uvicorn, stopping in two steps so that a proxy loses no request.

    Told to stop, the server first goes on serving for `delay_seconds()`
    (none for a lone instance) while `/ready` answers 503: the proxy's health
    check takes it out of rotation while it still accepts connections. Then
    uvicorn's own shutdown: the listener closes, new writes on kept-alive
    connections are refused (`draining`), requests in flight get the grace
    period. A second signal skips what is left of the first step.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_stopping: Callable[[], None],
        on_draining: Callable[[], None],
        delay_seconds: Callable[[], Awaitable[float] | None],
    ) -> None:
        super().__init__(config)
        self._on_stopping = on_stopping
        self._on_draining = on_draining
        self._delay_seconds = delay_seconds
        # While serving on, unready: the signal that started it, the delay
        # still to be awaited (it needs the database), and then (monotonic)
        # when the step ends.
        self._stop_signal: int | None = None
        self._delay: Awaitable[float] | None = None
        self._stop_at = math.inf

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._stop_signal is None and not self.should_exit:
            self._on_stopping()
            self._delay = self._delay_seconds()
            if self._delay is not None:
                self._stop_signal = sig  # `on_tick` awaits the delay
                return
        self._stop_signal = None
        if inspect.iscoroutine(self._delay):
            # Still unanswered (it asks the database): not waited for.
            self._delay.close()
        self._delay = None
        self._on_draining()
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._delay is not None:
            delay, self._delay = await self._delay, None
            if delay > 0:
                log.info("shutdown_delayed", seconds=delay)
            self._stop_at = time.monotonic() + delay
        if self._stop_signal is not None and time.monotonic() >= self._stop_at:
            self.handle_exit(self._stop_signal, None)
        return await super().on_tick(counter)


def run_server(
    app: FastAPI,
    *,
    host: str,
    port: int,
    grace_seconds: float,
    sock: socket.socket | None = None,
    delay_seconds: Callable[[], Awaitable[float] | None] = lambda: None,
) -> None:
    """Serve until SIGTERM/SIGINT, then stop as `_DrainingServer` says:
    unready for what `delay_seconds()` gives (None: no delay, without asking),
    then in-flight requests get `grace_seconds` to finish. New writes during
    the drain are refused with 503 (see RequestContextMiddleware). `sock`:
    a socket already listening on host:port (`bind_listener`).
    """
    app.state.stopping = False
    app.state.draining = False

    def stopping() -> None:
        app.state.stopping = True

    def draining() -> None:
        app.state.draining = True

    config = uvicorn.Config(
        AbortableConnections(app),
        host=host,
        port=port,
        # Limits on the request head: app/kit/head_limits.py.
        http=LimitedHttpToolsProtocol,
        # ws stays "auto" although no route is a WebSocket: with "none",
        # uvicorn serves an upgrade request as plain HTTP and logs two warnings,
        # one telling the operator to install a WebSocket library. "auto"
        # answers it 403, for the websockets library's ~0.6 MiB.
        log_config=None,
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=int(grace_seconds) + 5,
        access_log=False,
    )
    # uvicorn re-raises the signal it caught once it has shut down; with the
    # default disposition that kills the process (status 143) after a clean
    # shutdown. A no-op handler makes a clean shutdown exit 0.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    server = _DrainingServer(
        config, on_stopping=stopping, on_draining=draining, delay_seconds=delay_seconds
    )
    server.run(sockets=None if sock is None else [sock])
