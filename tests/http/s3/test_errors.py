"""S3 error responses as a client reads them.

Not a copy of ERROR_TABLE: every code in it must reach an S3 client (botocore)
as that code, with the table's status and message in a well-formed `<Error>`
document; and an unexpected failure inside the service must reach the client
as a bare InternalError or ServiceUnavailable, with nothing of what went wrong.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy.exc import DBAPIError
from starlette.requests import Request

from app.http.s3.errors import ERROR_TABLE, S3Error, redact_signed_text
from app.http.s3.gateway import error_response
from app.http.s3.service import S3Service
from tests.http.s3.test_api_boto3 import ACCESS_KEY, SECRET, client_for
from tests.http.s3.test_xml import answer, parse
from tests.running_service import ServiceFactory

PATH = b"/bucket/some%20key"


def request(method: str = "GET") -> Request:
    return Request(
        {"type": "http", "method": method, "path": "/", "headers": [], "query_string": b""}
    )


def test_every_code_reaches_a_client_as_that_code_with_its_status_and_message() -> None:
    for code, (status, message) in ERROR_TABLE.items():
        response = error_response(S3Error(code), request(), PATH)
        assert response.status_code == status, code
        assert 300 <= status < 600, code
        if status == 304:  # NotModified: a bare status, as S3 sends it
            assert response.body == b"", code
            continue
        assert response.media_type == "application/xml", code
        root = parse(response.body)
        assert root.tag == "Error", code
        assert root.findtext("Code") == code
        assert root.findtext("Message") == message
        assert root.findtext("Resource") == PATH.decode()
        if status == 503:
            assert response.headers["retry-after"] == "5", code

        with pytest.raises(ClientError) as caught:
            if code == "IllegalLocationConstraintException":
                # Only CreateBucket answers it; on any other operation
                # botocore takes it for a region redirect and looks again.
                answer("create_bucket", response.body, status=status, Bucket="bucket")
            else:
                answer("get_object", response.body, status=status, Bucket="bucket", Key="some key")
        seen = caught.value.response
        assert seen["Error"]["Code"] == code
        assert seen["Error"]["Message"] == message
        assert seen["ResponseMetadata"]["HTTPStatusCode"] == status


def test_a_message_resource_details_and_headers_of_its_own_reach_the_client() -> None:
    err = S3Error(
        "NoSuchKey",
        "custom",
        resource="/b/k",
        details={"Key": "k"},
        headers={"x-amz-id-2": "id"},
    )
    response = error_response(err, request(), PATH)
    assert response.status_code == 404
    assert response.headers["x-amz-id-2"] == "id"
    root = parse(response.body)
    assert [child.tag for child in root] == ["Code", "Message", "Key", "Resource", "RequestId"]
    assert (root.findtext("Message"), root.findtext("Key"), root.findtext("Resource")) == (
        "custom",
        "k",
        "/b/k",
    )
    assert str(err) == "NoSuchKey: custom"


def test_head_requests_get_the_status_without_a_body() -> None:
    response = error_response(S3Error("NoSuchKey"), request("HEAD"), PATH)
    assert response.status_code == 404
    assert response.body == b""


SECRET_DETAIL = "postgresql://teleuploader:hunter2@db.internal/teleuploader"


@pytest.mark.parametrize(
    ("failure", "code", "status"),
    [
        (RuntimeError(f"bug near {SECRET_DETAIL}"), "InternalError", 500),
        (
            DBAPIError("SELECT 1", {}, OSError(f"cannot reach {SECRET_DETAIL}")),
            "ServiceUnavailable",
            503,
        ),
    ],
    ids=["unexpected-exception", "database-error"],
)
async def test_a_failure_inside_the_service_leaks_nothing_to_the_client(
    start_service: ServiceFactory,
    monkeypatch: pytest.MonkeyPatch,
    failure: Exception,
    code: str,
    status: int,
) -> None:
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})

    async def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise failure

    monkeypatch.setattr(S3Service, "list_buckets", fail)
    client = client_for(service)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.list_buckets)
    seen = caught.value.response
    assert seen["ResponseMetadata"]["HTTPStatusCode"] == status
    assert seen["Error"]["Code"] == code
    assert "hunter2" not in str(seen) and "db.internal" not in str(seen)
    if code == "InternalError":
        assert seen["Error"]["Message"] == ERROR_TABLE["InternalError"][1]


async def test_an_s3_answer_names_the_request_id_the_client_sent(
    start_service: ServiceFactory,
) -> None:
    # The id a proxy or client put in X-Request-ID is the one its logs,
    # x-amz-request-id and an error's <RequestId> name.
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    client = client_for(service)

    def traced(request: Any, **_kwargs: Any) -> None:
        request.headers["X-Request-ID"] = "trace-7"

    client.meta.events.register("before-sign.s3", traced)
    try:
        await asyncio.to_thread(client.create_bucket, Bucket="traced")
        stored = await asyncio.to_thread(client.put_object, Bucket="traced", Key="k", Body=b"x")
        read = await asyncio.to_thread(client.get_object, Bucket="traced", Key="k")
        read["Body"].close()
        with pytest.raises(ClientError) as caught:
            await asyncio.to_thread(client.get_object, Bucket="traced", Key="missing")
    finally:
        client.close()
    missing = caught.value.response["ResponseMetadata"]
    assert stored["ResponseMetadata"]["HTTPHeaders"]["x-request-id"] == "trace-7"
    assert read["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"] == "trace-7"
    assert missing["HTTPHeaders"]["x-amz-request-id"] == "trace-7"
    assert missing["RequestId"] == "trace-7"  # botocore reads it from <RequestId>


def test_an_unknown_code_without_a_status_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        S3Error("NoSuchThing")
    assert S3Error("Custom", "free-form", 418).status == 418


def test_the_signed_text_an_error_echoes_has_its_secrets_redacted() -> None:
    canonical = "\n".join(
        [
            "GET",
            "/box/k",
            "X-Amz-Credential=AK%2F20261207&x-amz-server-side-encryption-customer-key=S2V5&b=1",
            "host:example",
            "x-amz-copy-source-server-side-encryption-customer-key:S2V5",
            "X-Amz-Security-Token:token",
            "x-amz-meta-note:x-amz-security-token:not a header",
            "",
            "host;x-amz-copy-source-server-side-encryption-customer-key",
            "UNSIGNED-PAYLOAD",
        ]
    )
    redacted = redact_signed_text(canonical, query_line=2).split("\n")
    assert redacted[2] == (
        "X-Amz-Credential=AK%2F20261207&x-amz-server-side-encryption-customer-key=<redacted>&b=1"
    )
    assert redacted[4:7] == [
        "x-amz-copy-source-server-side-encryption-customer-key:<redacted>",
        "X-Amz-Security-Token:<redacted>",
        "x-amz-meta-note:x-amz-security-token:not a header",
    ]
    assert "S2V5" not in "\n".join(redacted) and "token:token" not in "\n".join(redacted)
    assert redacted[8] == canonical.split("\n")[8]  # the signed names stay
