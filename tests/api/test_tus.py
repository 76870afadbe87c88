"""tus 1.0 at /api/tus/ end to end: real HTTP, a real database (SQLite and
Postgres through pgbouncer), the Telegram simulator behind the bots; the
tuspy client as users run it, and raw HTTP for every status code."""

from __future__ import annotations

import asyncio
import base64
import io

import httpx
from tusclient.client import TusClient

from tests.running_service import CHUNK, Service, payload

TUS = {"Tus-Resumable": "1.0.0"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def tuspy_upload(service: Service, data: bytes, *, chunk_size: int, **options: object) -> str:
    """Upload with tuspy (blocking: run in a thread); returns the upload URL."""
    client = TusClient(f"{service.url}/api/tus/", headers=service.auth)
    uploader = client.uploader(
        file_stream=io.BytesIO(data),
        chunk_size=chunk_size,
        metadata={"filename": "report.pdf", "filetype": "application/pdf"},
        **options,
    )
    uploader.upload()
    assert uploader.url is not None
    return str(uploader.url)


async def head(service: Service, url: str) -> httpx.Response:
    async with service.client() as http:
        return await http.head(url, headers={**service.auth, **TUS})


async def download(service: Service, url: str) -> bytes:
    async with service.client() as http:
        response = await http.get(url)
    assert response.status_code == 200, response.text
    return response.content


async def test_tuspy_upload_becomes_a_native_file(service: Service) -> None:
    data = payload(5 * CHUNK + 123, seed=1)

    url = await asyncio.to_thread(tuspy_upload, service, data, chunk_size=2 * CHUNK + 7)

    response = await head(service, url)
    assert response.status_code == 200
    assert response.headers["upload-offset"] == str(len(data))
    assert response.headers["upload-length"] == str(len(data))
    public_id = response.headers["x-file-id"]
    assert response.headers["x-file-url"].endswith(f"/f/{public_id}")
    assert await download(service, response.headers["x-file-url"]) == data
    async with service.client() as http:
        info = (await http.get(f"/file/{public_id}/info")).json()
    assert info["file_name"] == "report.pdf"
    assert info["mime_type"] == "application/pdf"
    assert info["size_bytes"] == len(data)
