"""Unsigned requests: on an S3 path they get S3's XML AccessDenied while the
S3 API is on; the native routes answer as before; with the S3 API off nothing
changes (real HTTP, both databases, the simulator)."""

from __future__ import annotations

import httpx
import pytest

from app.http.s3.gateway import is_native_path
from app.http.s3.names import RESERVED_BUCKETS
from app.runtime.main import create_app
from app.telegram.simulator import make_tokens
from tests.db.helpers import Database
from tests.http.s3.test_api_boto3 import S3, read
from tests.http.s3.test_bad_input import error_code
from tests.running_service import Service, ServiceFactory, make_settings


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    await client("put_object", Bucket="box", Key="key", Body=b"private")
    return client


def is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/box/key"),
        ("HEAD", "/box/key"),
        ("GET", "/box"),
        ("GET", "/no-such-bucket/key"),
        ("PUT", "/box/key"),
        ("DELETE", "/box/key"),
        ("POST", "/box?delete"),
    ],
)
async def test_an_unsigned_request_on_an_s3_path_is_access_denied_in_xml(
    s3: S3, s3_service: Service, method: str, path: str
) -> None:
    async with s3_service.client() as http:
        response = await http.request(method, path, content=b"anonymous")
    assert response.status_code == 403
    if method != "HEAD":  # S3 answers HEAD without a body
        assert error_code(response) == "AccessDenied"
    # Nothing was changed by it.
    assert await read(s3, "box", "key") == b"private"


@pytest.mark.parametrize(
    ("path", "status", "kind"),
    [
        ("/health", 200, "json"),
        ("/f/no-such-file", 404, "json"),
        ("/api/files", 401, "json"),
        ("/file/no-such-file/info", 404, "json"),
        ("/openapi.json", 200, "json"),
        ("/docs", 200, "text/html"),
        ("/", 200, "text/html"),
    ],
)
async def test_native_routes_are_unchanged_with_the_s3_api_on(
    s3_service: Service, path: str, status: int, kind: str
) -> None:
    async with s3_service.client() as http:
        response = await http.get(path)
    assert response.status_code == status, response.text
    if kind == "json":
        assert is_json(response), response.headers
    else:
        assert response.headers["content-type"].startswith(kind)


async def test_with_the_s3_api_off_an_s3_path_is_the_native_json_404(
    start_service: ServiceFactory,
) -> None:
    service = await start_service()
    async with service.client() as http:
        response = await http.get("/box/key")
    assert response.status_code == 404
    assert is_json(response)


def test_every_native_route_lives_under_a_reserved_bucket_name() -> None:
    # A route outside them would shadow an S3 bucket of that name. The app is
    # built, not started (its routes do not depend on the settings); the web
    # page's routes are outside the OpenAPI document.
    unused = Database(backend="sqlite", url="sqlite+aiosqlite://", migration_url="sqlite://")
    app = create_app(make_settings(unused, "http://127.0.0.1:1", make_tokens(1)))
    paths = [
        *app.openapi()["paths"],
        *("/openapi.json", "/docs", "/redoc", "/static/app.js", "/dav", "/dav/a/b.txt"),
    ]
    segments = {path.lstrip("/").split("/", 1)[0] for path in paths}
    assert {"api", "f", "file", "health", "ready", "metrics", "docs", "static", "dav"} <= segments
    assert segments <= RESERVED_BUCKETS
    for path in paths:
        for method in ("GET", "PROPFIND"):
            scope = {"type": "http", "path": path, "root_path": "", "method": method, "app": app}
            assert is_native_path(scope), (method, path)
    scope = {"type": "http", "path": "/box/key", "root_path": "", "method": "GET", "app": app}
    assert not is_native_path(scope)
