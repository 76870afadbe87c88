"""The repository's Caddyfile, run by the real `caddy` (Debian's package).

Two upstreams: the real service (`teleuploader serve` + the Telegram simulator)
for a large upload and ranged downloads, and a small recording HTTP server for
what the proxy must not change (Host, the raw path), what it must set
(X-Forwarded-For), and that bodies stream both ways.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config.settings import Settings
from tests.deploy.conftest import (
    CADDY,
    CADDYFILE,
    CaddyStarter,
    ServiceStarter,
    caddy_env,
)

MiB = 1024 * 1024
UPLOAD_SIZE = 40 * MiB
CHUNK_SIZE = 4 * MiB


def run_caddy(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert CADDY is not None, "caddy is not installed: scripts/test installs it"
    return subprocess.run(
        [CADDY, *args, "--config", str(CADDYFILE), "--adapter", "caddyfile"],
        env=caddy_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_caddyfile_validates(tmp_path: Path) -> None:
    result = run_caddy("validate", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Valid configuration" in result.stdout + result.stderr
    # Caddy logs JSON lines; a warning (unformatted file, deprecated option,
    # an unnecessary directive) fails the test too.
    warnings = [line for line in result.stderr.splitlines() if '"level":"warn' in line]
    assert not warnings, warnings


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def test_caddyfile_settings(tmp_path: Path) -> None:
    """What the Caddyfile turns into (`caddy adapt`), with production defaults."""
    result = run_caddy("adapt", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    server = config["apps"]["http"]["servers"]["srv0"]
    assert server["listen"] == [":443"]
    hour = 3600 * 10**9
    assert server["read_timeout"] >= 6 * hour  # read_body: a whole upload
    assert server["write_timeout"] >= 6 * hour
    assert server["idle_timeout"] > 0
    assert 0 < server["read_header_timeout"] <= 60 * 10**9
    handlers = {node["handler"]: node for node in _walk(server) if "handler" in node}
    hosts = [node["host"] for node in _walk(server) if "host" in node]
    assert hosts == [["files.example.com"]]
    # Nothing rewrites the path.
    assert not {"rewrite", "uri", "strip_prefix"} & set(handlers)
    body = handlers["request_body"]
    assert body["max_size"] == Settings.model_fields["max_upload_size"].default
    proxy = handlers["reverse_proxy"]
    assert proxy["upstreams"] == [{"dial": "127.0.0.1:4000"}]
    assert "buffer_requests" not in proxy and "request_buffers" not in proxy
    assert proxy["flush_interval"] == -1
    # Host goes upstream as the client sent it (Caddy's default): no override,
    # least of all `{host}`, which drops the port SigV4 signed.
    assert "Host" not in proxy.get("headers", {}).get("request", {}).get("set", {})
    assert proxy["health_checks"]["active"]["uri"] == "/health"
    transport = proxy["transport"]
    assert transport["read_timeout"] >= 6 * hour  # Go keeps a read pending during uploads
    assert transport["write_timeout"] >= 5 * 60 * 10**9
    assert transport["response_header_timeout"] >= 5 * 60 * 10**9
    assert 0 < transport["dial_timeout"] <= 30 * 10**9


# --- through Caddy to the real service ----------------------------------------------------------


def test_large_upload_and_ranged_download_through_caddy(
    start_service: ServiceStarter, start_caddy: CaddyStarter, migrated_db: Path
) -> None:
    service = start_service(migrated_db, env={"CHUNK_SIZE": str(CHUNK_SIZE)}, api_key=True)
    caddy = start_caddy(f"127.0.0.1:{service.port}")
    data = random.Random(5).randbytes(UPLOAD_SIZE)

    def body() -> Iterator[bytes]:
        for start in range(0, len(data), MiB):
            yield data[start : start + MiB]

    with httpx.Client(base_url=caddy.url, timeout=60) as client:
        response = client.put(
            "/api/files/deploy%20test.bin",
            content=body(),
            headers={**service.auth, "Content-Length": str(len(data))},
        )
        assert response.status_code == 201, response.text
        info = response.json()
        assert info["size_bytes"] == UPLOAD_SIZE
        assert info["sha256"] == hashlib.sha256(data).hexdigest()
        assert info["file_name"] == "deploy test.bin"
        # Built from the Host the client sent to Caddy, not the upstream's.
        assert info["download_url"].startswith(f"{caddy.url}/f/")
        path = f"/f/{info['public_id']}"

        # A range across three chunks.
        first, last = CHUNK_SIZE - 1000, 3 * CHUNK_SIZE + 500
        response = client.get(path, headers={"Range": f"bytes={first}-{last}"})
        assert response.status_code == 206, response.text
        assert response.headers["content-range"] == f"bytes {first}-{last}/{UPLOAD_SIZE}"
        assert response.content == data[first : last + 1]

        response = client.head(path)
        assert response.status_code == 200
        assert response.headers["content-length"] == str(UPLOAD_SIZE)
        assert response.headers["accept-ranges"] == "bytes"
        assert response.content == b""

        digest = hashlib.sha256()
        with client.stream("GET", path) as streamed:
            assert streamed.status_code == 200
            for piece in streamed.iter_bytes():
                digest.update(piece)
        assert digest.hexdigest() == info["sha256"]


# --- through Caddy to a recording upstream --------------------------------------------------------


@dataclass
class Recorded:
    method: str
    target: str
    headers: dict[str, str]


@dataclass
class Recorder:
    """An HTTP upstream that records requests and lets a test pace bodies."""

    requests: list[Recorded] = field(default_factory=list)
    body_started: threading.Event = field(default_factory=threading.Event)
    body_bytes: int = 0
    release_download: threading.Event = field(default_factory=threading.Event)


def make_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> None:
            recorder.requests.append(
                Recorded(self.command, self.path, {k: v for k, v in self.headers.items()})
            )

        def _reply(self, body: bytes, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._record()
            if self.path != "/stream":
                self._reply(b"ok")
                return
            # Half a response, then wait until the client has seen it.
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", "2048")
            self.end_headers()
            self.wfile.write(b"a" * 1024)
            self.wfile.flush()
            recorder.release_download.wait(10)
            self.wfile.write(b"b" * 1024)

        def do_HEAD(self) -> None:
            self._record()
            self._reply(b"")

        def do_PUT(self) -> None:
            self._record()
            left = int(self.headers["Content-Length"])
            while left:
                piece = self.rfile.read1(min(left, 65536))
                if not piece:
                    break
                left -= len(piece)
                recorder.body_bytes += len(piece)
                recorder.body_started.set()
            self._reply(str(recorder.body_bytes).encode(), 201)

    return Handler


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, int]]:
    recorder = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(recorder))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder, server.server_address[1]
    finally:
        recorder.release_download.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_proxy_passes_host_and_raw_path_and_sets_forwarded_for(
    recorder: tuple[Recorder, int], start_caddy: CaddyStarter
) -> None:
    record, port = recorder
    caddy = start_caddy(f"127.0.0.1:{port}")
    # What SigV4 signs must arrive byte for byte: percent-escapes (also of
    # '/'), double slashes, dot segments, the query as written.
    target = "/bucket/a%2Fb/c%20d//e/./f/../g%3Dh.txt?x-id=PutObject&prefix=a%2Fb&empty="
    connection = http.client.HTTPConnection("127.0.0.1", caddy.port, timeout=10)
    try:
        connection.putrequest("GET", target, skip_accept_encoding=True)
        connection.putheader("X-Forwarded-For", "203.0.113.66")  # a client's lie
        connection.putheader("X-Amz-Date", "20260101T000000Z")
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 200
        response.read()
    finally:
        connection.close()
    seen = [r for r in record.requests if r.target == target]
    assert len(seen) == 1, [r.target for r in record.requests]
    headers = seen[0].headers
    assert headers["Host"] == f"127.0.0.1:{caddy.port}"
    assert headers["X-Forwarded-For"] == "127.0.0.1"
    assert headers["X-Forwarded-Proto"] == "http"
    assert headers["X-Amz-Date"] == "20260101T000000Z"
    # The active health check has been asking the upstream.
    assert any(r.method == "GET" and r.target == "/health" for r in record.requests)


def test_proxy_streams_request_and_response_bodies(
    recorder: tuple[Recorder, int], start_caddy: CaddyStarter
) -> None:
    """The upstream sees the start of an upload while the client still holds
    the rest back (no request buffering), and the client sees the start of a
    download while the upstream still holds the rest back (flush_interval -1)."""
    record, port = recorder
    caddy = start_caddy(f"127.0.0.1:{port}")

    def body() -> Iterator[bytes]:
        yield b"x" * MiB
        assert record.body_started.wait(10), "Caddy held the request body back"
        yield b"y" * MiB

    with httpx.Client(base_url=caddy.url, timeout=20) as client:
        response = client.put("/upload", content=body(), headers={"Content-Length": str(2 * MiB)})
        assert response.status_code == 201
        assert response.text == str(2 * MiB)

        with client.stream("GET", "/stream") as streamed:
            assert streamed.status_code == 200
            pieces = streamed.iter_raw()
            received = b""
            while len(received) < 1024:
                received += next(pieces)  # hangs (then times out) if Caddy buffers
            record.release_download.set()
            for piece in pieces:
                received += piece
        assert received == b"a" * 1024 + b"b" * 1024
