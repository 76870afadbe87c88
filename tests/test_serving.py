"""`teleuploader serve`'s two-step stop (app/serving.py), on a real socket:
told to stop, the server serves on, unready, for the delay it is given, then
closes its listener; a second signal cuts the delay short."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import uvicorn
from fastapi import FastAPI, Request

from app.serving import _DrainingServer

DELAY = 0.8


class Server(_DrainingServer):
    # The signals are pytest's: the tests call `handle_exit` themselves.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _app() -> FastAPI:
    app = FastAPI()
    app.state.stopping = app.state.draining = False

    @app.get("/state")
    async def state(request: Request) -> dict[str, bool]:
        return {
            "stopping": request.app.state.stopping,
            "draining": request.app.state.draining,
        }

    return app


@dataclass
class Running:
    server: Server
    app: FastAPI
    url: str
    task: asyncio.Task[None]
    # Set once the server has been given the delay it asked for.
    delay_given: asyncio.Event


@asynccontextmanager
async def running(delay: float | None, answer: bool = True) -> AsyncIterator[Running]:
    """A server whose stop waits `delay` seconds (None: stops without asking).
    The service asks its database for the delay; `answer=False`: the
    database never answers."""
    app = _app()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, log_level="warning", lifespan="off")
    delay_given = asyncio.Event()

    def stopping() -> None:
        app.state.stopping = True

    def draining() -> None:
        app.state.draining = True

    async def asked(delay: float) -> float:
        if not answer:
            await asyncio.Event().wait()
        delay_given.set()
        return delay

    def delay_seconds() -> Awaitable[float] | None:
        return None if delay is None else asked(delay)

    server = Server(config, on_stopping=stopping, on_draining=draining, delay_seconds=delay_seconds)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn has no event for it)
        await asyncio.sleep(0.01)
    try:
        yield Running(server, app, f"http://127.0.0.1:{port}", task, delay_given)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def refused(url: str) -> bool:
    # A fresh connection each time: a kept-alive one would outlive the listener.
    async with httpx.AsyncClient() as client:
        try:
            await client.get(f"{url}/state", timeout=2)
        except httpx.ConnectError:
            return True
    return False


async def test_a_stop_serves_on_unready_for_the_delay_then_closes_the_listener() -> None:
    async with running(DELAY) as run:
        run.server.handle_exit(signal.SIGTERM, None)
        told = time.monotonic()
        async with httpx.AsyncClient() as client:
            state = (await client.get(f"{run.url}/state")).json()
        # Unready (a proxy takes it out of rotation), writes still taken.
        assert state == {"stopping": True, "draining": False}
        while not await refused(run.url):
            assert time.monotonic() - told < DELAY + 5, "the listener never closed"
            await asyncio.sleep(0.05)
        assert time.monotonic() - told >= DELAY
        await asyncio.wait_for(run.task, 10)


async def test_a_second_signal_cuts_the_delay_short() -> None:
    async with running(60) as run:
        run.server.handle_exit(signal.SIGTERM, None)
        async with asyncio.timeout(10):
            await run.delay_given.wait()  # the delay was asked for and began
        assert not await refused(run.url)
        run.server.handle_exit(signal.SIGINT, None)
        await asyncio.wait_for(run.task, 10)
        assert await refused(run.url)


async def test_a_second_signal_does_not_wait_for_the_delay_to_be_known() -> None:
    """Right after the first signal the delay may still be unknown (is another
    instance alive? asks the database); a second signal then stops at once
    instead of waiting for the answer."""
    async with running(60, answer=False) as run:
        run.server.handle_exit(signal.SIGTERM, None)
        run.server.handle_exit(signal.SIGINT, None)
        await asyncio.wait_for(run.task, 10)
        assert await refused(run.url)


async def test_without_a_delay_new_writes_are_refused_from_the_signal_on() -> None:
    async with running(None) as run:
        run.server.handle_exit(signal.SIGTERM, None)
        assert (run.app.state.stopping, run.app.state.draining) == (True, True)
        await asyncio.wait_for(run.task, 2)
        assert await refused(run.url)
