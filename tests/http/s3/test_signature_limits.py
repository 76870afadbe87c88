"""A wrong S3 signature is a failed key check (app/http/s3/signature_limits.py):
counted per client and access key id, whichever form it came in (SigV4,
SigV2, a POST policy), and past the limit the client's signatures with that
access key are answered 503 SlowDown unchecked, the right one included;
the same credential elsewhere is served as ever."""

from __future__ import annotations

from typing import Any

import boto3
import httpx
from botocore.config import Config

from app.store.key_failures import FAILURES_PER_CREDENTIAL, WINDOW_SECONDS
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.http.s3.test_bad_input import error_code
from tests.running_service import Service

WRONG = "not-the-secret-at-all"


def presigned_get(service: Service, secret: str, signature: str) -> str:
    client: Any = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(signature_version=signature, s3={"addressing_style": "path"}),
    )
    url: str = client.generate_presigned_url("get_object", Params={"Bucket": "box", "Key": "k"})
    return url


def policy_post(service: Service, secret: str) -> dict[str, Any]:
    client: Any = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    post: dict[str, Any] = client.generate_presigned_post("box", "k")
    return post


async def test_wrong_signatures_of_every_form_are_limited_per_client_and_access_key(
    s3_service: Service,
) -> None:
    s3 = S3(s3_service)
    await s3("create_bucket", Bucket="box")
    await s3("put_object", Bucket="box", Key="k", Body=b"kept")
    there = {"X-Forwarded-For": "203.0.113.5"}
    post = policy_post(s3_service, WRONG)
    answers = []
    async with httpx.AsyncClient(timeout=30) as http:
        for n in range(FAILURES_PER_CREDENTIAL + 1):
            if n % 3 == 2:
                answers.append(
                    await http.post(
                        post["url"], data=post["fields"], files={"file": ("a", b"x")}, headers=there
                    )
                )
            else:
                url = presigned_get(s3_service, WRONG, "s3v4" if n % 3 == 0 else "s3")
                answers.append(await http.get(url, headers=there))
        right_there = await http.get(presigned_get(s3_service, SECRET, "s3v4"), headers=there)
        right_elsewhere = await http.get(
            presigned_get(s3_service, SECRET, "s3v4"), headers={"X-Forwarded-For": "203.0.113.6"}
        )
    assert [(r.status_code, error_code(r)) for r in answers[:-1]] == [
        (403, "SignatureDoesNotMatch")
    ] * FAILURES_PER_CREDENTIAL
    for limited in (answers[-1], right_there):
        assert (limited.status_code, error_code(limited)) == (503, "SlowDown"), limited.text
        assert 1 <= int(limited.headers["retry-after"]) <= WINDOW_SECONDS
        assert "too many failed key checks" in limited.text
    assert (right_elsewhere.status_code, right_elsewhere.content) == (200, b"kept")
