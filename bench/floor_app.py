"""A do-nothing ASGI app, the floor the benches read our numbers against.

GET and HEAD (metadata_bench.py, request_cpu_bench.py) get a fixed 2 KiB
object (HEAD: its headers only), without reading a database or checking a
signature: what uvicorn, the kernel and the event loop cost for one small
request on this machine. PUT and POST (ingest_bench.py) read the body and
hash it with MD5 and SHA-256, the least any upload of ours must do (the
ETag and the stored digest), and answer 201 with both."""

from __future__ import annotations

import hashlib
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
    if scope["method"] in ("PUT", "POST"):
        await _ingest(receive, send)
        return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else _BODY})


async def _ingest(receive: Any, send: Any) -> None:
    md5 = hashlib.md5(usedforsecurity=False)
    sha256 = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        body = message.get("body", b"")
        md5.update(body)
        sha256.update(body)
        size += len(body)
        if not message.get("more_body", False):
            break
    answer = f'{{"size":{size},"md5":"{md5.hexdigest()}","sha256":"{sha256.hexdigest()}"}}'
    await send(
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": answer.encode()})
