"""SigV4-signed S3 requests through the repository's Caddyfile, run by the real
`caddy`, to `teleuploader serve` (with S3_CREDENTIALS) and the Telegram
simulator.

SigV4 signs the Host header (port included) and the raw path: if Caddy
rewrote either, the service would answer SignatureDoesNotMatch. boto3 signs for
Caddy's address; the service must see exactly that.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.config import Config

from tests.deploy.conftest import CaddyStarter, ServiceStarter

MiB = 1024 * 1024
CHUNK_SIZE = 1 * MiB
ACCESS_KEY = "AKIDCADDYTEST"
SECRET = "caddy-test-secret-0123456789abcdef"
# Characters that SigV4 percent-encodes in the canonical path: a proxy that
# decoded or normalised them would break the signature.
KEY = "dir with space/a+b=c&d;e,(f)!~'*%41 ünï//x.bin"


def s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
        ),
    )


def test_sigv4_put_and_get_through_caddy(
    start_service: ServiceStarter, start_caddy: CaddyStarter, migrated_db: Path
) -> None:
    service = start_service(
        migrated_db,
        env={"S3_CREDENTIALS": f"{ACCESS_KEY}:{SECRET}", "CHUNK_SIZE": str(CHUNK_SIZE)},
    )
    caddy = start_caddy(f"127.0.0.1:{service.port}")
    assert caddy.port != service.port
    s3 = s3_client(caddy.url)
    data = random.Random(3).randbytes(3 * CHUNK_SIZE + 123)

    s3.create_bucket(Bucket="through-caddy")
    put = s3.put_object(
        Bucket="through-caddy",
        Key=KEY,
        Body=data,
        ContentType="application/x-test",
        Metadata={"origin": "caddy"},
    )
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'

    got = s3.get_object(Bucket="through-caddy", Key=KEY)
    assert got["Body"].read() == data
    assert got["ContentType"] == "application/x-test"
    # Go's HTTP/1.1 server writes header names in canonical form, so through
    # Caddy boto3 sees "X-Amz-Meta-Origin" and reports the key as "Origin"
    # (MinIO, also in Go, does the same); the service itself sends lowercase.
    assert {k.lower(): v for k, v in got["Metadata"].items()} == {"origin": "caddy"}
    ranged = s3.get_object(
        Bucket="through-caddy", Key=KEY, Range=f"bytes={CHUNK_SIZE - 5}-{CHUNK_SIZE + 4}"
    )
    assert ranged["Body"].read() == data[CHUNK_SIZE - 5 : CHUNK_SIZE + 5]
    listed = s3.list_objects_v2(Bucket="through-caddy", Prefix="dir with space/")
    assert [o["Key"] for o in listed["Contents"]] == [KEY]

    # A presigned URL for Caddy's address works through Caddy...
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": "through-caddy", "Key": KEY}, ExpiresIn=300
    )
    assert url.startswith(caddy.url)
    presigned = httpx.get(url, timeout=30)
    assert presigned.status_code == 200, presigned.text
    assert presigned.content == data
    # ...and the service checks the Host it was signed for: the same URL sent
    # straight to the service (another Host) is refused.
    direct = httpx.get(url.replace(caddy.url, service.url), timeout=30)
    assert direct.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in direct.content

    # Straight to the service, signed for it, the object is the same.
    direct_s3 = s3_client(service.url)
    assert direct_s3.get_object(Bucket="through-caddy", Key=KEY)["Body"].read() == data
    assert direct_s3.head_object(Bucket="through-caddy", Key=KEY)["Metadata"] == {"origin": "caddy"}
