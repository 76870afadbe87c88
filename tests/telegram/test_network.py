"""The bot clients' sockets (app/telegram/network.py) against real local
servers, plain and TLS, on asyncio's loop and on uvloop: what httpx must still
do over them (whole bodies both ways, timeouts, a keep-alive connection the
server closed, a refused one), and that a slow reader does not pull an answer
into memory."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trustme
import uvloop

from app.telegram.network import LoopStream, LoopTransport

MiB = 1024 * 1024
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def without_loop_errors(test: Coroutine[Any, Any, None]) -> None:
    """`test`, and no error in the loop's callbacks meanwhile (a protocol's
    callback that raises is only logged by the loop)."""
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
    await test
    assert errors == []


def on_both_loops(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """A test run on asyncio's loop and on uvloop's, which the service runs on
    (uvloop's transports are not asyncio's classes). Each run has a loop of
    its own, as with pytest-asyncio, and no error may reach its handler."""

    def on_loop(loop: str, **fixtures: Any) -> None:
        (uvloop.run if loop == "uvloop" else asyncio.run)(without_loop_errors(test(**fixtures)))

    on_loop.__name__, on_loop.__doc__ = test.__name__, test.__doc__
    # pytest reads the fixtures a test wants from its signature.
    signature = inspect.signature(test)
    loop = inspect.Parameter("loop", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    on_loop.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[loop, *signature.parameters.values()]
    )
    return pytest.mark.parametrize("loop", ["asyncio", "uvloop"])(on_loop)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A local server running `handler` per connection; yields its base URL.
    On the way out, every connection still open is ended and its handler
    cancelled, so that nothing of it outlives the test's loop."""
    open_connections: set[tuple[asyncio.Task[None], asyncio.StreamWriter]] = set()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        entry = (task, writer)
        open_connections.add(entry)
        try:
            await handler(reader, writer)
        except asyncio.CancelledError:
            pass  # ended by serving's end, below: not an error of the handler's
        finally:
            open_connections.discard(entry)
            writer.transport.abort()

    server = await asyncio.start_server(connection, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://localhost:{port}"
    finally:
        server.close()
        for task, writer in list(open_connections):
            task.cancel()
            writer.transport.abort()
        await asyncio.gather(*(task for task, _ in open_connections), return_exceptions=True)
        await server.wait_closed()


@asynccontextmanager
async def client(ca: trustme.CA, **timeouts: float) -> AsyncIterator[httpx.AsyncClient]:
    transport = LoopTransport(verify=client_context(ca), limits=httpx.Limits())
    timeout = httpx.Timeout(5.0, **timeouts)
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as http:
        yield http


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's body (Content-Length framing, as the clients send)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return await reader.readexactly(length)


def response(body: bytes, *, close: bool = False) -> bytes:
    connection = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), connection, body)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@on_both_loops
async def test_a_body_sent_in_pieces_arrives_whole_and_a_long_answer_comes_back_whole(
    ca: trustme.CA, tls: bool
) -> None:
    pieces = [bytes([n]) * size for n, size in enumerate([1, 8192, 256_000, MiB, 3 * MiB + 7])]
    sent = b"".join(pieces)
    answer = hashlib.sha256(sent).digest() * 100_000  # 3.2 MB: many socket reads

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        writer.write(response(hashlib.sha256(body).digest() * 100_000))
        writer.close()  # after what was written has gone
        await writer.wait_closed()
        writer.close()

    server_tls = None
    if tls:
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(server_tls)

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async with serving(handler, server_tls) as url, client(ca) as http:
        got = await http.post(url, content=body(), headers={"Content-Length": str(len(sent))})
    assert got.status_code == 200
    assert got.content == answer
    # httpx takes no network backend: LoopTransport replaces the pool httpx
    # built. Were that replacement lost (an httpx release renaming its pool),
    # requests would quietly go through anyio's sockets again.
    assert isinstance(got.extensions["network_stream"], LoopStream)


@on_both_loops
async def test_a_server_that_stops_reading_is_a_write_timeout_not_a_hang(ca: trustme.CA) -> None:
    stalled = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stalled.wait()  # reads nothing

    async with serving(handler) as url, client(ca, write=0.5) as http:
        with pytest.raises(httpx.WriteTimeout):
            await asyncio.wait_for(http.post(url, content=b"x" * (256 * MiB)), 30)
        stalled.set()


@on_both_loops
async def test_a_server_that_never_answers_is_a_read_timeout(ca: trustme.CA) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(10)  # ended by the test's end

    async with serving(handler) as url, client(ca, read=0.3) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(url, content=b"hello")


@on_both_loops
async def test_a_keep_alive_connection_the_server_closed_is_not_reused(ca: trustme.CA) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        body = await read_request(reader)
        writer.write(response(body))  # keep-alive, as far as the client knows...
        await writer.drain()
        writer.close()  # ...but closed at once, as a server's idle timeout does
        await writer.wait_closed()

    async with serving(handler) as url, client(ca) as http:
        first = await http.post(url, content=b"one")
        await asyncio.sleep(0.2)  # the close reaches the client's pooled connection
        second = await http.post(url, content=b"two")
    assert (first.content, second.content) == (b"one", b"two")
    assert connections == 2


@on_both_loops
async def test_a_refused_connection_is_a_connect_error(ca: trustme.CA) -> None:
    async with serving(lambda reader, writer: asyncio.sleep(0)) as url:
        pass  # the port is free again: nothing listens
    async with client(ca) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(url)


@on_both_loops
async def test_a_slow_reader_leaves_a_long_answer_with_the_server(ca: trustme.CA) -> None:
    """Reading waits for the client: a download read slowly is not pulled into
    the process's memory behind its reader's back."""
    size = 64 * MiB
    unsent = asyncio.get_running_loop().create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.transport.set_write_buffer_limits(high=size * 2)  # never waits
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        writer.write(bytes(size))
        await asyncio.sleep(1.0)  # the client reads one piece, then nothing
        unsent.set_result(writer.transport.get_write_buffer_size())

    async with (
        serving(handler) as url,
        client(ca) as http,
        http.stream("POST", url, content=b"") as answer,
    ):
        pieces = answer.aiter_raw()  # held: a dropped iterator closes the response
        assert await anext(pieces)
        held_back = await unsent
    # The kernel's socket buffers take some MiB on loopback; the rest waits.
    assert held_back > size - 24 * MiB
