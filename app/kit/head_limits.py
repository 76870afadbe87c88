"""The HTTP/1.1 protocol the server runs: uvicorn's httptools protocol, with
limits on the request head (request line and headers) that hold before the
parser keeps a byte of it.

Neither of uvicorn's protocols limits the head as the service needs:
httptools has no size limit at all, and keeps an unfinished header in memory,
growing with every piece; h11 has one (`h11_max_incomplete_event_size`) but
answers it with a 400. Neither has a time limit for the head: a client that
sends a byte now and then keeps its connection forever. An ASGI middleware
cannot help, as the app sees a request only once its head is parsed. So the
head is measured here, as its bytes arrive:

- over `MAX_HEAD_BYTES` before its blank line: 431, and the connection closes;
- not finished `HEAD_TIMEOUT_SECONDS` after the connection opened or the head's
  first byte arrived: 408, and the connection closes.

Bytes that follow a head in the same read (a body, a pipelined request's
start) are not counted; a connection holds at most one read more than the
limit.

After the refusal the connection lingers (`LINGER_SECONDS`), reading and
dropping what the client still sends: closed with unread bytes, the socket
would answer with a reset, and the client would lose the answer before
reading it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import structlog
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = structlog.get_logger("app.http")

#: The largest request head (request line and headers) accepted, in bytes.
MAX_HEAD_BYTES = 64 * 1024
#: How long a request head may take to arrive, in seconds.
HEAD_TIMEOUT_SECONDS = 30.0
#: How long a refused connection goes on taking (and dropping) bytes.
LINGER_SECONDS = 2.0

_END_OF_HEAD = b"\r\n\r\n"


class HeadMeter:
    """The size of one request head, counted as its reads arrive: the bytes
    up to and including its blank line, none of what follows it."""

    def __init__(self) -> None:
        self.size = 0
        self.ended = False
        # The last bytes so far: the blank line may straddle two reads.
        self._tail = b""

    def add(self, data: bytes) -> int:
        """Count the head's bytes in `data`; the head's size so far."""
        if self.ended:
            return self.size
        window = self._tail + data
        end = window.find(_END_OF_HEAD)
        if end < 0:
            self.size += len(data)
            self._tail = window[-(len(_END_OF_HEAD) - 1) :]
        else:
            self.size += end + len(_END_OF_HEAD) - len(self._tail)
            self.ended = True
        return self.size


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes: ClassVar[int] = MAX_HEAD_BYTES
    head_timeout: ClassVar[float] = HEAD_TIMEOUT_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head = HeadMeter()
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: dropped
        if self._in_head and not self._head_fits(data):
            self._refuse(
                431,
                "request_header_fields_too_large",
                f"the request line and headers are over {self.max_head_bytes} bytes",
            )
            return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head = HeadMeter()

    def _head_fits(self, data: bytes) -> bool:
        """Count the head's bytes in `data`: whether the head is still within the limit."""
        if self._head_timer is None:
            self._start_head_timer()  # the first byte of the next request
        return self._head.add(data) <= self.max_head_bytes

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(
                408,
                "request_timeout",
                f"the request line and headers took longer than {self.head_timeout:g} s",
            )

    def _refuse(self, status: int, error: str, detail: str) -> None:
        self._stop_head_timer()
        client = f"{self.client[0]}" if self.client else None
        log.warning("http_request_head_refused", status=status, client=client)
        body = json.dumps({"error": error, "detail": detail}).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"x-content-type-options: nosniff\r\n",
            b"connection: close\r\n\r\n",
        ]
        self._refused = True
        if self.cycle is not None and not self.cycle.response_complete:
            # In the middle of another response on this connection: no answer fits.
            self.transport.close()
            return
        self.transport.write(b"".join(head) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def eof_received(self) -> None:
        # The client has sent everything: a refused connection can close now.
        if self._refused:
            self.transport.close()


def limited_protocol(*, max_head_bytes: int, head_timeout: float) -> type[LimitedHttpToolsProtocol]:
    """The protocol with other limits (tests use a short timeout)."""
    return type(
        "LimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {"max_head_bytes": max_head_bytes, "head_timeout": head_timeout},
    )
