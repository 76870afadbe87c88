"""SigV2, as boto3 and older clients sign: the presigned query form that
boto3's default `generate_presigned_url` makes, and the `Authorization: AWS`
header form of botocore's HmacV1Auth (real HTTP, both databases, the
simulator). The unit tests below sign at a fixed time."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx
import pytest
from botocore.auth import HmacV1Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from starlette.datastructures import Headers

from app.http.s3.errors import S3Error
from app.http.s3.sigv2 import verify_sigv2
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, read
from tests.http.s3.test_bad_input import error_code
from tests.running_service import Service


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    await client("put_object", Bucket="box", Key="dir/a file.txt", Body=b"signed v2")
    return client


def default_client(service: Service, secret: str = SECRET) -> object:
    """boto3 as a user makes it: no signature_version, so presigned URLs are SigV2."""
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def presigned(service: Service, method: str, expires: int = 300, **params: str) -> str:
    client = default_client(service)
    url: str = client.generate_presigned_url(  # type: ignore[attr-defined]
        method, Params=params, ExpiresIn=expires
    )
    return url


async def test_boto3_default_presigned_url_is_sigv2_and_downloads(
    s3: S3, s3_service: Service
) -> None:
    url = presigned(s3_service, "get_object", Bucket="box", Key="dir/a file.txt")
    query = parse_qs(urlsplit(url).query)
    assert {"AWSAccessKeyId", "Signature", "Expires"} <= query.keys()
    async with httpx.AsyncClient() as http:
        response = await http.get(url)
    assert response.status_code == 200, response.text
    assert response.content == b"signed v2"


async def test_a_presigned_sigv2_put_uploads_and_a_response_override_is_signed(
    s3: S3, s3_service: Service
) -> None:
    put = presigned(s3_service, "put_object", Bucket="box", Key="up.bin")
    async with httpx.AsyncClient() as http:
        stored = await http.put(put, content=b"uploaded through v2")
        assert stored.status_code == 200, stored.text
        get = presigned(
            s3_service,
            "get_object",
            Bucket="box",
            Key="up.bin",
            ResponseContentType="text/plain",
        )
        got = await http.get(get)
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/plain")
    assert await read(s3, "box", "up.bin") == b"uploaded through v2"


async def test_a_tampered_or_foreign_presigned_url_is_refused(s3: S3, s3_service: Service) -> None:
    url = presigned(s3_service, "get_object", Bucket="box", Key="dir/a file.txt")
    other_key = url.replace("a%20file.txt", "other.txt")
    wrong_secret = default_client(s3_service, secret="another-secret-0123456789")
    forged: str = wrong_secret.generate_presigned_url(  # type: ignore[attr-defined]
        "get_object", Params={"Bucket": "box", "Key": "dir/a file.txt"}
    )
    async with httpx.AsyncClient() as http:
        for bad in (other_key, forged):
            response = await http.get(bad)
            assert response.status_code == 403, bad
            assert error_code(response) == "SignatureDoesNotMatch"


async def test_an_expired_presigned_url_is_access_denied(s3: S3, s3_service: Service) -> None:
    url = presigned(s3_service, "get_object", Bucket="box", Key="dir/a file.txt", expires=-10)
    async with httpx.AsyncClient() as http:
        response = await http.get(url)
    assert response.status_code == 403
    assert error_code(response) == "AccessDenied"
    assert "expired" in response.text


async def test_header_form_with_hmac_v1_auth(s3: S3, s3_service: Service) -> None:
    async def send(
        method: str, path: str, body: bytes = b"", secret: str = SECRET
    ) -> httpx.Response:
        request = AWSRequest(method=method, url=s3_service.url + path, data=body)
        HmacV1Auth(Credentials(ACCESS_KEY, secret)).add_auth(request)
        assert request.headers["Authorization"].startswith(f"AWS {ACCESS_KEY}:")
        prepared = request.prepare()
        async with httpx.AsyncClient() as http:
            return await http.request(
                method, prepared.url, headers=dict(prepared.headers.items()), content=body
            )

    put = await send("PUT", "/box/v2.txt", b"header form")
    assert put.status_code == 200, put.text
    got = await send("GET", "/box/v2.txt")
    assert got.content == b"header form"
    listed = await send("GET", "/box?uploads")
    assert listed.status_code == 200, listed.text
    refused = await send("GET", "/box/v2.txt", secret="another-secret-0123456789")
    assert refused.status_code == 403
    assert error_code(refused) == "SignatureDoesNotMatch"


# --------------------------------------------------------------------- without a server

NOW = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
CREDENTIALS = {ACCESS_KEY: SECRET}


def header_signed(
    date: datetime, url: str = "http://s3.test/box/key?uploadId=u&partNumber=2"
) -> tuple[bytes, bytes, Headers]:
    request = AWSRequest(method="PUT", url=url, headers={"x-amz-meta-a": "1"})
    auth = HmacV1Auth(Credentials(ACCESS_KEY, SECRET))
    auth._get_date = lambda: format_datetime(date, usegmt=True)  # type: ignore[method-assign]
    auth.add_auth(request)
    split = urlsplit(request.url)
    headers = Headers(headers={k: v for k, v in request.headers.items()})
    return split.path.encode(), split.query.encode(), headers


def test_header_form_verifies_with_sub_resources_and_amz_headers() -> None:
    path, query, headers = header_signed(NOW)
    verified = verify_sigv2("PUT", path, query, headers, CREDENTIALS, now=NOW, region=None)
    assert verified.access_key == ACCESS_KEY
    with pytest.raises(S3Error) as caught:
        verify_sigv2(
            "PUT", path, b"uploadId=u&partNumber=3", headers, CREDENTIALS, now=NOW, region=None
        )
    assert caught.value.code == "SignatureDoesNotMatch"


def test_header_form_outside_the_clock_skew_is_refused() -> None:
    path, query, headers = header_signed(datetime(2026, 11, 30, 7, 40, tzinfo=UTC))
    with pytest.raises(S3Error) as caught:
        verify_sigv2("PUT", path, query, headers, CREDENTIALS, now=NOW, region=None)
    assert caught.value.code == "RequestTimeTooSkewed"


def test_presigned_expiry_beyond_a_week_and_garbage_are_refused() -> None:
    far = int(NOW.timestamp()) + 8 * 86400
    for expires, code in (
        (str(far), "AuthorizationQueryParametersError"),
        ("²", "AccessDenied"),
        ("9" * 40, "AccessDenied"),
    ):
        query = f"AWSAccessKeyId={ACCESS_KEY}&Signature=abc&Expires={expires}".encode()
        with pytest.raises(S3Error) as caught:
            verify_sigv2("GET", b"/box/key", query, Headers(), CREDENTIALS, now=NOW, region=None)
        assert caught.value.code == code, expires


def test_an_unknown_access_key_is_invalid_access_key_id() -> None:
    query = f"AWSAccessKeyId=nobody&Signature=abc&Expires={int(NOW.timestamp()) + 60}".encode()
    with pytest.raises(S3Error) as caught:
        verify_sigv2("GET", b"/box/key", query, Headers(), CREDENTIALS, now=NOW, region=None)
    assert caught.value.code == "InvalidAccessKeyId"


def test_virtual_host_requests_sign_the_bucket_in_the_resource() -> None:
    request = AWSRequest(method="GET", url="http://box.s3.test/dir/key")
    request.auth_path = "/box/dir/key"
    auth = HmacV1Auth(Credentials(ACCESS_KEY, SECRET))
    auth._get_date = lambda: format_datetime(NOW, usegmt=True)  # type: ignore[method-assign]
    auth.add_auth(request)
    headers = Headers(headers=dict(request.headers.items()))
    verified = verify_sigv2(
        "GET", b"/dir/key", b"", headers, CREDENTIALS, now=NOW, region=None, virtual_bucket="box"
    )
    assert verified.access_key == ACCESS_KEY
    with pytest.raises(S3Error) as caught:
        verify_sigv2(
            "GET", b"/dir/key", b"", headers, CREDENTIALS, now=NOW, region=None, virtual_bucket="b2"
        )
    assert caught.value.code == "SignatureDoesNotMatch"
