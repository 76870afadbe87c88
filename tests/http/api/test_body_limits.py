"""JSON request bodies (app/http/api/body_limits.py): every route of the app that
reads one refuses a body past JSON_BODY_LIMIT with 413, whether its
Content-Length says so or a chunked body passes it, before its key's check
and before any parse; a body within the limit is read as before.

The process's memory under many such bodies at once is measured on a real
process: tests/deploy/test_body_memory.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import params
from fastapi.routing import iter_route_contexts

from app.http.api.body_limits import JSON_BODY_LIMIT
from tests.running_service import Service


def _json_routes(service: Service) -> list[tuple[str, str]]:
    """(method, path) of every route that declares a JSON body."""
    found = []
    # Included routers' routes as FastAPI serves them.
    for route in iter_route_contexts(service.app.routes):
        body = getattr(route, "body_field", None)
        if body is None or isinstance(body.field_info, params.Form):
            continue
        found.extend((method, route.path_format) for method in sorted(route.methods or ()))
    return found


def _array_of_empty_objects(size: int) -> bytes:
    """The audit's body, `[{},{},...]` of at least `size` bytes: cheap to
    send, costly to parse."""
    return b"[" + b"{}," * (size // 3) + b"{}]"


async def _chunked(body: bytes, piece: int = 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(body), piece):
        yield body[start : start + piece]


async def test_every_json_route_refuses_a_body_past_the_limit_before_its_key_check(
    service: Service,
) -> None:
    routes = _json_routes(service)
    # The routes this test was written for; a new one is covered as it comes.
    assert {("POST", "/api/session"), ("POST", "/api/admin/scrub")} <= set(routes)
    body = _array_of_empty_objects(JSON_BODY_LIMIT + 1)
    async with service.client() as http:
        for method, path in routes:
            for content in (body, _chunked(body)):
                # No key: the 413 comes before the 401.
                response = await http.request(
                    method, path, content=content, headers={"Content-Type": "application/json"}
                )
                assert response.status_code == 413, (method, path, response.text)
                assert response.json()["error"] == "payload_too_large"
                assert str(JSON_BODY_LIMIT) in response.json()["detail"]
                # The rest of the body is not read: it must not pass for a request.
                assert response.headers["connection"] == "close"


async def test_a_declared_length_past_the_limit_is_refused_before_a_byte_is_read(
    service: Service,
) -> None:
    # 10 MB announced, none sent: the answer cannot have waited for the body.
    host, port = service.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /api/session HTTP/1.1\r\nHost: test\r\n"
            b"Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
        )
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()  # until the server closes
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in answer.lower()


async def test_a_body_at_the_limit_is_read_and_answered_as_before(service: Service) -> None:
    padded = b'{"key": "' + service.key.encode() + b'"}'
    padded += b" " * (JSON_BODY_LIMIT - len(padded))
    async with service.client() as http:
        signed_in = await http.post(
            "/api/session", content=padded, headers={"Content-Type": "application/json"}
        )
        scrub = await http.post(
            "/api/admin/scrub",
            content=_chunked(b'{"deep": false}' + b" " * (JSON_BODY_LIMIT - 15)),
            headers={"Content-Type": "application/json", **service.auth},
        )
        malformed = await http.post(
            "/api/session", content=b"[{}", headers={"Content-Type": "application/json"}
        )
    assert len(padded) == JSON_BODY_LIMIT
    assert signed_in.status_code == 200, signed_in.text
    assert scrub.status_code == 202, scrub.text
    assert scrub.json()["last_pass"]["deep"] is False
    assert malformed.status_code == 422
