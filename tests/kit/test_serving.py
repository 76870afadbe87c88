"""`teleuploader serve`'s two-step stop (app/kit/serving.py), on a real socket:
told to stop, the server serves on, unready, for the delay it is given, then
closes its listener; a second signal cuts the delay short."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import uvicorn
from fastapi import FastAPI, Request
from hypothesis import given
from hypothesis import strategies as st

from app.kit.head_limits import HeadMeter
from app.kit.serving import _DrainingServer, serve_in_task

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


# --- limits on the request head (app/kit/head_limits.py) ---------------------------


async def _exchange(url: str, *pieces: bytes) -> tuple[bytes, bool]:
    """Send `pieces` on one raw connection (as far as the server lets), then
    read until it closes: (what it answered, whether it closed)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        with contextlib.suppress(ConnectionError):
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
        answer = b""
        closed = False
        async with asyncio.timeout(10):
            while not closed:
                try:
                    data = await reader.read(65536)
                except ConnectionError:
                    data = b""
                answer += data
                closed = not data
                kept_alive = b"connection: close" not in answer.lower()
                if answer.count(b"HTTP/1.1 ") >= len(pieces) and kept_alive:
                    break  # every request answered on a connection kept alive
        return answer, closed
    finally:
        writer.close()


def _get(path: str, *, header_bytes: int = 0, end: bool = True) -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: test\r\nX-Filler: {'a' * header_bytes}"
    return head.encode() + (b"\r\n\r\n" if end else b"")


async def test_a_request_head_over_64_kib_gets_431_and_one_under_it_is_served() -> None:
    async with serve_in_task(_app(), lifespan="off") as url:
        under, _ = await _exchange(url, _get("/state", header_bytes=60_000))
        # The limit counts from each request's start: two big heads on one connection.
        twice, _ = await _exchange(
            url, _get("/state", header_bytes=40_000), _get("/state", header_bytes=40_000)
        )
        over, closed = await _exchange(url, _get("/state", header_bytes=70_000))
    assert under.startswith(b"HTTP/1.1 200 ")
    assert twice.count(b"HTTP/1.1 200 ") == 2
    assert over.startswith(b"HTTP/1.1 431 ")
    assert b"over 65536 bytes" in over
    assert closed


async def test_an_unfinished_head_is_refused_before_it_is_kept() -> None:
    # A 16 MiB header that never ends: refused once 64 KiB have arrived, so
    # the server never holds the rest; the client sees the 431 and the close.
    async with serve_in_task(_app(), lifespan="off") as url:
        pieces = [_get("/state", end=False)] + [b"a" * 65536] * 256
        answer, closed = await _exchange(url, *pieces)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert closed


async def test_a_head_that_takes_too_long_gets_408_and_the_connection_closes() -> None:
    async with serve_in_task(_app(), lifespan="off", head_timeout=0.3) as url:
        slow, closed = await _exchange(url, _get("/state", end=False))
        silent, silent_closed = await _exchange(url)  # connects, sends nothing
    assert slow.startswith(b"HTTP/1.1 408 ")
    assert b"took longer than 0.3 s" in slow
    assert closed
    assert silent.startswith(b"HTTP/1.1 408 ")
    assert silent_closed


@given(
    head_lines=st.lists(
        # A header line is never empty: an empty line ends the head.
        st.binary(min_size=1, max_size=40)
        .map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
        .filter(bool),
        max_size=8,
    ),
    after=st.binary(max_size=50),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=12),
)
def test_a_head_is_measured_alike_however_its_reads_are_cut(
    head_lines: list[bytes], after: bytes, cuts: list[int]
) -> None:
    head = b"GET / HTTP/1.1\r\n" + b"".join(line + b"\r\n" for line in head_lines) + b"\r\n"
    wire = head + after
    edges = sorted({0, len(wire), *(min(cut, len(wire)) for cut in cuts)})
    meter = HeadMeter()
    sizes = [meter.add(wire[start:end]) for start, end in itertools.pairwise(edges)]
    assert meter.ended
    assert sizes[-1] == len(head)  # nothing after the blank line counts
    # Before its end, every byte counts.
    unfinished = HeadMeter()
    for start, end in itertools.pairwise(edges):
        if end < len(head):
            assert unfinished.add(wire[start:end]) == end
