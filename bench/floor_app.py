"""A do-nothing ASGI app for metadata_bench.py's floor: it answers every
request with a fixed 2 KiB object (HEAD: its headers only), without reading a
database or checking a signature. What uvicorn, the kernel and the event loop
cost for one small request under the bench's load, on this machine."""

from __future__ import annotations

from typing import Any

_BODY = b"p" * 2048
_HEADERS = [
    (b"content-type", b"application/octet-stream"),
    (b"content-length", b"2048"),
    (b"etag", b'"d41d8cd98f00b204e9800998ecf8427e"'),
    (b"last-modified", b"Tue, 01 Dec 2026 00:00:00 GMT"),
]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else _BODY})
