"""Requests signed by real SDKs (botocore, minio-py), captured before they are sent.

Nothing here talks to a network: boto3's ``before-send`` hook and a fake
urllib3 pool for minio-py hand over the request as it would go on the wire.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.auth
import botocore.crt.auth
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSPreparedRequest, AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from starlette.datastructures import Headers

from app.http.s3.sigv4 import VerifiedRequest, verify_request

ACCESS_KEY = "AKIDEXAMPLETELEUP"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
CREDENTIALS = {ACCESS_KEY: SECRET_KEY}
REGION = "us-east-1"
#: The moment every frozen signer signs at.
NOW = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
ENDPOINT = "http://s3.test:9000"
#: One session for every client: loading the S3 model is the slow part.
_SESSION = boto3.session.Session()


@dataclass
class WireRequest:
    """A request as the server would receive it (ASGI ``raw_path``/``query_string``)."""

    method: str
    raw_path: bytes
    query: bytes
    header_list: list[tuple[str, str]]
    body: bytes = b""
    url: str = ""

    @property
    def headers(self) -> Headers:
        """Starlette's case-insensitive headers, repeated names kept, as in a route."""
        return Headers(
            raw=[(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.header_list]
        )

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def with_header(self, name: str, value: str) -> WireRequest:
        kept = [(k, v) for k, v in self.header_list if k.lower() != name.lower()]
        return WireRequest(
            self.method, self.raw_path, self.query, [*kept, (name, value)], self.body
        )

    def without_header(self, name: str) -> WireRequest:
        kept = [(k, v) for k, v in self.header_list if k.lower() != name.lower()]
        return WireRequest(self.method, self.raw_path, self.query, kept, self.body)

    def replace(self, **changes: Any) -> WireRequest:
        changes.setdefault("header_list", list(self.header_list))
        return dataclasses.replace(self, **changes)

    def verify(
        self,
        *,
        credentials: dict[str, str] | None = None,
        now: datetime = NOW,
        region: str | None = None,
    ) -> VerifiedRequest:
        return verify_request(
            self.method,
            self.raw_path,
            self.query,
            self.headers,
            CREDENTIALS if credentials is None else credentials,
            now=now,
            region=region,
        )


def _host_header(url: str) -> str:
    return botocore.auth._host_from_url(url)  # type: ignore[no-any-return]


def _read_body(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if hasattr(body, "read"):
        data = body.read()
        return data if isinstance(data, bytes) else bytes(data)
    return b"".join(body)


def from_prepared(prepared: AWSPreparedRequest) -> WireRequest:
    """What urllib3 would send for a botocore prepared request."""
    parts = urlsplit(prepared.url)
    header_list = [
        (str(k), v.decode("latin-1") if isinstance(v, bytes) else str(v))
        for k, v in prepared.headers.items()
    ]
    if not any(k.lower() == "host" for k, _ in header_list):
        header_list.append(("Host", _host_header(prepared.url)))
    body = _read_body(prepared.body)
    return WireRequest(
        prepared.method,
        (parts.path or "/").encode("ascii"),
        parts.query.encode("ascii"),
        header_list,
        body,
        prepared.url,
    )


class _Captured(Exception):
    pass


@dataclass
class CapturingClient:
    """A boto3 S3 client whose requests are captured instead of sent."""

    client: Any
    captured: list[WireRequest] = field(default_factory=list)

    def call(self, operation: str, **kwargs: Any) -> WireRequest:
        before = len(self.captured)
        with contextlib.suppress(_Captured):
            getattr(self.client, operation)(**kwargs)
        assert len(self.captured) == before + 1, f"{operation} sent no request"
        return self.captured[-1]


def boto3_client(
    *,
    endpoint: str = ENDPOINT,
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
    region: str = REGION,
    **config: Any,
) -> CapturingClient:
    client = _SESSION.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
            **config,
        ),
    )
    capturing = CapturingClient(client)

    def capture(request: AWSPreparedRequest, **_: Any) -> None:
        capturing.captured.append(from_prepared(request))
        raise _Captured

    client.meta.events.register("before-send.s3", capture)
    return capturing


class _StreamingSeedAuth(S3SigV4Auth):  # type: ignore[misc]
    """botocore's S3 signer, told that the payload is aws-chunked (seed signature)."""

    def __init__(self, credentials: Credentials, region: str, payload: str) -> None:
        super().__init__(credentials, "s3", region)
        self._payload = payload

    def payload(self, request: AWSRequest) -> str:
        return self._payload


def sign_with_botocore(
    method: str,
    url: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
    region: str = REGION,
    payload: str | None = None,
) -> WireRequest:
    """Sign a request with botocore's ``S3SigV4Auth`` (``payload`` overrides its hash)."""
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    credentials = Credentials(access_key, secret_key)
    signer = (
        S3SigV4Auth(credentials, "s3", region)
        if payload is None
        else _StreamingSeedAuth(credentials, region, payload)
    )
    signer.add_auth(request)
    wire = from_prepared(request.prepare())
    return wire.replace(body=body)


def presign_with_botocore(
    method: str,
    url: str,
    *,
    expires: int = 3600,
    headers: Iterable[tuple[str, str]] = (),
    access_key: str = ACCESS_KEY,
    secret_key: str = SECRET_KEY,
    region: str = REGION,
) -> WireRequest:
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    botocore.auth.S3SigV4QueryAuth(
        Credentials(access_key, secret_key), "s3", region, expires=expires
    ).add_auth(request)
    return from_prepared(request.prepare())


def wire_from_url(method: str, url: str, headers: Iterable[tuple[str, str]] = ()) -> WireRequest:
    """A request for a URL as a browser or registry client would send it."""
    parts = urlsplit(url)
    header_list = [("Host", _host_header(url)), *headers]
    return WireRequest(
        method, (parts.path or "/").encode("ascii"), parts.query.encode("ascii"), header_list
    )


# ------------------------------------------------------------------------------ aws-chunked bodies


def _hmac_hex(key: bytes, msg: str) -> str:
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def signing_key(secret: str, date: str, region: str = REGION) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


EMPTY = hashlib.sha256(b"").hexdigest()


def encode_signed_chunks(
    data: bytes,
    *,
    chunk_size: int,
    seed: str,
    key: bytes,
    amz_date: str,
    scope: str,
    trailers: list[tuple[str, str]] | None = None,
    trailer_line_end: bytes = b"\r\n",
) -> tuple[bytes, list[str]]:
    """aws-chunked with chunk signatures, written from the AWS specification.

    Returns the body and the chunk signatures (last: the final zero chunk).
    With ``trailers`` the zero chunk is followed by the trailer lines (ending in
    ``trailer_line_end``) and a signed ``x-amz-trailer-signature`` line.
    """
    out = bytearray()
    previous = seed
    signatures: list[str] = []
    pieces = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)] + [b""]
    for piece in pieces:
        string_to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256-PAYLOAD",
                amz_date,
                scope,
                previous,
                EMPTY,
                hashlib.sha256(piece).hexdigest(),
            ]
        )
        previous = _hmac_hex(key, string_to_sign)
        signatures.append(previous)
        out += f"{len(piece):x};chunk-signature={previous}\r\n".encode()
        if piece or trailers is None:
            out += piece + b"\r\n"
    if trailers is not None:
        canonical = "".join(f"{n}:{v}\n" for n, v in trailers)
        for n, v in trailers:
            out += f"{n}:{v}".encode() + trailer_line_end
        trailer_sig = _hmac_hex(
            key,
            "\n".join(
                [
                    "AWS4-HMAC-SHA256-TRAILER",
                    amz_date,
                    scope,
                    previous,
                    hashlib.sha256(canonical.encode()).hexdigest(),
                ]
            ),
        )
        if trailer_line_end == b"\n":
            out += b"\r\n"
        out += f"x-amz-trailer-signature:{trailer_sig}\r\n\r\n".encode()
    return bytes(out), signatures


def encode_unsigned_chunks(
    data: bytes, *, chunk_size: int, trailers: list[tuple[str, str]], line_end: bytes = b"\r\n"
) -> bytes:
    out = bytearray()
    for i in range(0, len(data), chunk_size):
        piece = data[i : i + chunk_size]
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    out += b"0\r\n"
    for n, v in trailers:
        out += f"{n}:{v}".encode() + line_end
    out += b"\r\n"
    return bytes(out)


async def stream_of(data: bytes, piece: int = 65536) -> AsyncIterator[bytes]:
    """``data`` as an async stream of ``piece``-byte pieces."""
    for i in range(0, len(data), piece):
        yield data[i : i + piece]


async def collect(stream: AsyncIterator[bytes]) -> bytes:
    out = bytearray()
    async for piece in stream:
        out += piece
    return bytes(out)


def freeze_botocore(monkeypatch: Any, when: datetime = NOW) -> None:
    """Make botocore sign at `when`: its Python signers and, since awscrt is
    installed (we verify crc64nvme with it), the CRT signers botocore then
    prefers for SigV4."""
    moment = when.astimezone(UTC)

    def fake(remove_tzinfo: bool = True) -> datetime:
        return moment.replace(tzinfo=None) if remove_tzinfo else moment

    monkeypatch.setattr(botocore.auth, "get_current_datetime", fake)
    if botocore.auth.HAS_CRT:
        monkeypatch.setattr(botocore.crt.auth, "get_current_datetime", fake)
