"""S3 GET and HEAD keep the stored Content-Type (clients expect it back) and
add the headers that stop a stored page from running script on the
service's origin, presigned browser links included (real boto3, SQLite and
Postgres through pgbouncer)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.running_service import Service, ServiceFactory

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
HTML = b"<html><script>alert(1)</script></html>"


@pytest.fixture
async def s3(start_service: ServiceFactory) -> S3:
    service: Service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    client = S3(service)
    await client("create_bucket", Bucket="site")
    return client


def headers_of(response: dict[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = response["ResponseMetadata"]["HTTPHeaders"]
    return headers


@pytest.mark.parametrize(
    ("key", "data", "content_type"),
    [("index.html", HTML, "text/html; charset=utf-8"), ("logo.svg", SVG, "image/svg+xml")],
)
async def test_get_and_head_of_an_active_object_are_sandboxed_with_its_type_kept(
    s3: S3, key: str, data: bytes, content_type: str
) -> None:
    await s3("put_object", Bucket="site", Key=key, Body=data, ContentType=content_type)

    got = await s3("get_object", Bucket="site", Key=key)
    body = await asyncio.to_thread(got["Body"].read)
    head = await s3("head_object", Bucket="site", Key=key)

    assert body == data
    for response in (got, head):
        assert response["ContentType"] == content_type
        headers = headers_of(response)
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["content-security-policy"] == "sandbox"
        # S3 keeps the object's own Content-Disposition (none was stored).
        assert "content-disposition" not in headers


async def test_a_passive_object_gets_nosniff_and_no_sandbox(s3: S3) -> None:
    await s3("put_object", Bucket="site", Key="a.txt", Body=HTML, ContentType="text/plain")

    got = await s3("get_object", Bucket="site", Key="a.txt", Range="bytes=0-3")

    assert got["ContentType"] == "text/plain"
    headers = headers_of(got)
    assert headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" not in headers


async def test_a_presigned_link_asking_for_html_gets_the_sandbox(s3: S3) -> None:
    await s3("put_object", Bucket="site", Key="a.txt", Body=HTML, ContentType="text/plain")
    url = await asyncio.to_thread(
        s3.client.generate_presigned_url,
        "get_object",
        Params={"Bucket": "site", "Key": "a.txt", "ResponseContentType": "text/html"},
    )

    async with httpx.AsyncClient() as http:
        response = await http.get(url)

    assert response.status_code == 200 and response.content == HTML
    assert response.headers["content-type"] == "text/html"
    assert response.headers["content-security-policy"] == "sandbox"
    assert response.headers["x-content-type-options"] == "nosniff"
