"""A public link must not run a stored page's script on the service's origin:
nosniff always, a policy of its own on /f/ and a sandbox for active types on S3, the stored
Content-Type kept."""

from __future__ import annotations

import pytest

from app.http.shared.active_content import is_active
from tests.running_service import Service

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.cookie)</script></svg>'
HTML = b"<html><body><script>fetch('/api/files')</script></body></html>"


@pytest.mark.parametrize(
    "content_type",
    [
        "text/html",
        "TEXT/HTML; charset=utf-8",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "application/rss+xml",
        "text/xsl",
        "text/javascript",
        "application/javascript",
        "application/ecmascript",
        "multipart/x-mixed-replace; boundary=x",
        # Browsers take the last valid type of a list.
        "text/plain, text/html",
        # No type a browser can parse: it may sniff one.
        "",
        "html",
        "text/html\x00",
    ],
)
def test_active_types(content_type: str) -> None:
    assert is_active(content_type)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain; charset=utf-8",
        "application/octet-stream",
        "application/pdf",
        "application/json",
        "image/png",
        "image/jpeg",
        "video/mp4",
        "audio/mpeg",
        "text/css",
        "application/zip",
    ],
)
def test_passive_types(content_type: str) -> None:
    assert not is_active(content_type)


FILE_POLICY = "default-src 'none'; sandbox"


async def upload(service: Service, name: str, data: bytes, content_type: str) -> str:
    async with service.client() as http:
        response = await http.post(
            "/api/upload", files={"file": (name, data, content_type)}, headers=service.auth
        )
    assert response.status_code == 201, response.text
    return str(response.json()["public_id"])


@pytest.mark.parametrize(
    ("name", "data", "content_type"),
    [("page.html", HTML, "text/html"), ("logo.svg", SVG, "image/svg+xml")],
)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_public_link_to_an_active_file_is_a_sandboxed_download(
    service: Service, name: str, data: bytes, content_type: str, method: str
) -> None:
    public_id = await upload(service, name, data, content_type)

    async with service.client() as http:
        response = await http.request(method, f"/f/{public_id}")

    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] == content_type
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"] == FILE_POLICY
    assert response.headers["content-disposition"] == f'attachment; filename="{name}"'
    if method == "GET":
        assert response.content == data


async def test_a_passive_file_is_sandboxed_too_and_never_sniffed(service: Service) -> None:
    # Every /f/ answer has a policy of its own: even a file the service takes
    # for passive can never act as a script or a page of the service's origin,
    # whatever `'self'` the page's policy allows.
    public_id = await upload(service, "notes.txt", HTML, "text/plain")

    async with service.client() as http:
        ranged = await http.get(f"/f/{public_id}", headers={"Range": "bytes=0-5"})
        etag = ranged.headers["etag"]
        unchanged = await http.get(f"/f/{public_id}", headers={"If-None-Match": etag})

    assert ranged.status_code == 206 and ranged.content == HTML[:6]
    assert ranged.headers["content-type"].startswith("text/plain")
    assert ranged.headers["x-content-type-options"] == "nosniff"
    assert ranged.headers["content-security-policy"] == FILE_POLICY
    assert unchanged.status_code == 304
    assert unchanged.headers["content-security-policy"] == FILE_POLICY
