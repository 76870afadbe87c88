"""S3 requests in /metrics (and their log lines): labelled by the S3
operation that answered them, not all lumped together as `unmatched`."""

from __future__ import annotations

import re

from tests.http.s3.test_api_boto3 import S3, read
from tests.http.s3.test_post_object import presigned_post, submit
from tests.running_service import Service


def requests_by_label(text: str) -> dict[tuple[str, str, str], float]:
    counts = {}
    for line in text.splitlines():
        found = re.fullmatch(
            r'teleuploader_http_requests_total\{method="(\w+)",route="([^"]*)",'
            r'status="(\d+)"\} (\S+)',
            line,
        )
        if found:
            method, route, status, value = found.groups()
            counts[(route, method, status)] = float(value)
    return counts


async def test_each_s3_operation_is_counted_under_its_own_route(
    s3_service: Service,
) -> None:
    s3 = S3(s3_service)
    await s3("create_bucket", Bucket="box")
    await s3("put_object", Bucket="box", Key="a/b.txt", Body=b"hello")
    await s3("head_object", Bucket="box", Key="a/b.txt")
    assert await read(s3, "box", "a/b.txt") == b"hello"
    await s3("list_objects_v2", Bucket="box", Prefix="a/")
    await s3("list_objects_v2", Bucket="box", Prefix="a/")
    forged = await S3(s3_service, secret="not-the-secret-0123456789").error(
        "head_object", Bucket="box", Key="a/b.txt"
    )
    async with s3_service.client() as http:
        scraped = await http.get("/metrics", headers=s3_service.auth)

    assert forged.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    counts = requests_by_label(scraped.text)
    assert counts[("s3:create_bucket", "PUT", "200")] == 1
    assert counts[("s3:put_object", "PUT", "200")] == 1
    assert counts[("s3:get_object", "HEAD", "200")] == 1
    assert counts[("s3:get_object", "GET", "200")] == 1
    assert counts[("s3:list_objects_v2", "GET", "200")] == 2
    # Refused before any operation was chosen.
    assert counts[("s3", "HEAD", "403")] == 1
    assert not any(route == "unmatched" for route, _, _ in counts)


async def test_a_browser_form_post_is_counted_as_post_object(s3_service: Service) -> None:
    s3 = S3(s3_service)
    await s3("create_bucket", Bucket="uploads")
    post = presigned_post(s3_service, "avatars/me.jpg")
    answered = await submit(post, b"a small picture")
    async with s3_service.client() as http:
        scraped = await http.get("/metrics", headers=s3_service.auth)

    assert answered.status_code == 204, answered.text
    counts = requests_by_label(scraped.text)
    assert counts[("s3:post_object", "POST", "204")] == 1
    assert not any(route in ("s3", "unmatched") for route, _, _ in counts)
