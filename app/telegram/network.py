"""The sockets under the bot clients' HTTP: httpcore's network backend, on the
running asyncio loop's own transports (uvloop's, as the service runs).

httpcore's default backend goes through anyio, which costs about 30 us of
Python for every piece of a request body (a cancel scope per write, a write
buffer limit of 0 that stops after each piece until the socket has taken it
all, a checkpoint) and the same per 64 KiB read. An upload sends every byte it
receives again, in pieces of 192 KiB to 1 MiB, so those trips were most of
what httpx cost over writing the same request to a socket
(bench/README.md, send_pieces_bench.py). Here a write is a transport write that waits
only when the transport's buffer is above its high-water mark, and a timeout
is armed only when something waits.

Reading stays paused except while httpcore waits for data, as with anyio: a
download read slowly holds at most one socket read (up to 256 KiB) here, not
whatever Telegram sends meanwhile.

Everything httpx relies on is kept: httpcore's exceptions (which httpx maps
to its own), TLS through the loop's `start_tls`, and `is_readable` for a
pooled connection the server closed.
"""

# ASYNC109 (a `timeout` parameter) is httpcore's interface for network backends.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpx

# The transport holds this much of a request body before a write waits: a few
# of an upload's pieces, so that the socket always has the next one. uvloop
# holds the pieces themselves, which the chunk holds anyway (asyncio's own
# loop would copy them). uvloop's default, 64 KiB, would stop after every
# piece.
WRITE_HIGH_WATER = 2 * 1024 * 1024


class _Protocol(asyncio.Protocol):
    """A connection's state, as the transport reports it: data and EOF for
    the reader, pause and resume for the writer, and how it ended."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.received: deque[bytes] = deque()
        self.offset = 0  # into received[0]: bytes handed out already
        self.at_eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.paused = False
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None

    # --- from the transport -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not derive
        # from asyncio's classes.
        self.attach(cast(asyncio.Transport, transport))

    def attach(self, transport: asyncio.Transport) -> None:
        """`transport` is the connection's from now on (the TCP one, then
        the TLS one over it): not read until asked, writes buffered up to
        WRITE_HIGH_WATER."""
        self.transport = transport
        transport.pause_reading()
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        self.received.append(data)
        # At once, not when the reader runs: the loop may read the socket
        # again within this turn.
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.at_eof = True
        self._wake_reader()
        return False  # the transport closes itself: HTTP/1.1 never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self._wake_reader()
        self._wake_writer()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake_writer()

    # --- for the stream ------------------------------------------------------

    def readable(self) -> asyncio.Future[None]:
        self._reader = asyncio.get_running_loop().create_future()
        return self._reader

    def writable(self) -> asyncio.Future[None]:
        self._writer = asyncio.get_running_loop().create_future()
        return self._writer

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    def _wake_writer(self) -> None:
        if self._writer is not None and not self._writer.done():
            self._writer.set_result(None)


async def _wait(
    waiting: asyncio.Future[None], timeout: float | None, error: type[Exception]
) -> None:
    if timeout is None:
        await waiting
        return
    try:
        async with asyncio.timeout(timeout):
            await waiting
    except TimeoutError as exc:
        raise error(f"no progress in {timeout:g} s") from exc


def _socket_readable(sock: Any) -> bool:
    """Whether an idle connection's socket has something to read: on a
    keep-alive connection, the server's close (or, wrongly, data)."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class LoopStream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        if not protocol.received and not protocol.at_eof and not protocol.lost:
            self._transport.resume_reading()
            try:
                await _wait(protocol.readable(), timeout, httpcore.ReadTimeout)
            finally:
                if not self._transport.is_closing():
                    self._transport.pause_reading()
        if protocol.received:
            return self._take(max_bytes)
        if protocol.error is not None:
            raise httpcore.ReadError(str(protocol.error) or type(protocol.error).__name__)
        return b""  # the server closed the connection

    def _take(self, max_bytes: int) -> bytes:
        """Up to `max_bytes` of what was received, each byte copied at most
        once (a socket read can be 256 KiB; httpcore asks for 64 KiB)."""
        protocol = self._protocol
        first, offset = protocol.received[0], protocol.offset
        if offset == 0 and len(first) <= max_bytes:
            protocol.received.popleft()
            return first
        end = min(len(first), offset + max_bytes)
        piece = first[offset:end]
        if end == len(first):
            protocol.received.popleft()
            protocol.offset = 0
        else:
            protocol.offset = end
        return piece

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self._protocol
        if protocol.lost or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if protocol.paused:
            await _wait(protocol.writable(), timeout, httpcore.WriteTimeout)
            if protocol.lost:
                raise httpcore.WriteError(str(protocol.error or "the connection was closed"))

    async def aclose(self) -> None:
        # A request given up on (a timeout, an error) leaves its unsent body
        # in the buffer: dropped, not flushed to a peer that may never read it.
        if self._transport.get_write_buffer_size():
            self._transport.abort()
        else:
            self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            self._transport.abort()
            raise httpcore.ConnectTimeout(f"no TLS handshake in {timeout:g} s") from exc
        except OSError as exc:  # ssl.SSLError and a reset among them
            self._transport.abort()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:  # the peer closed during the handshake
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._protocol.attach(transport)
        return LoopStream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            protocol = self._protocol
            return bool(
                protocol.received
                or protocol.at_eof
                or protocol.lost
                or _socket_readable(self._transport.get_extra_info("socket"))
            )
        return None


class LoopBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol,
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"no connection in {timeout:g} s") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock: socket.socket = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return LoopStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class LoopTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (its request and response handling, its error
    mapping), over connections made by `LoopBackend`. httpx takes no network
    backend, so the pool it built is replaced by the same pool on ours."""

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        super().__init__(verify=verify, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=LoopBackend(),
        )
