"""What a client reads when Telegram fails an upload, through both APIs, with
the simulator's fault injection: when every attempt went to rate limits or
transient failures the answer is 503 with a Retry-After derived from the bots'
cooldowns (S3: `SlowDown` / `ServiceUnavailable`); a permanent refusal is a
502 carrying Telegram's description, with no token in it; a storage chat no
bot may post in is a 503 that says so."""

from __future__ import annotations

from dataclasses import dataclass

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)

# As many attempts as bots: each attempt after a 429 goes to another bot, so
# the job runs out of attempts while every bot is cooling down. One chunk:
# one job.
BOTS = 2
COOLDOWN = 40
BODY = payload(CHUNK // 2)


@dataclass
class Answer:
    status: int
    code: str  # the native API's `error`, or the S3 <Code>
    message: str
    retry_after: str | None
    text: str  # everything the client received


async def start(start_service: ServiceFactory, **overrides: object) -> Service:
    return await start_service(
        bots=BOTS, max_attempts=BOTS, s3_credentials={ACCESS_KEY: SECRET}, **overrides
    )


async def upload(service: Service, api: str) -> Answer:
    """A failed upload of BODY through `api`, as its client sees it."""
    if api == "native":
        async with service.client() as http:
            response = await http.put("/api/files/f.bin", content=BODY, headers=service.auth)
        assert response.status_code >= 400, response.text
        body = response.json()
        return Answer(
            response.status_code,
            body["error"],
            body["detail"],
            response.headers.get("retry-after"),
            response.text + str(response.headers),
        )
    s3 = S3(service)
    # One attempt: botocore would retry a SlowDown, which then waits out the
    # bots' cooldown.
    s3.client = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )
    await s3("create_bucket", Bucket="box")
    with pytest.raises(ClientError) as caught:
        await s3("put_object", Bucket="box", Key="f.bin", Body=BODY)
    seen = caught.value.response
    return Answer(
        seen["ResponseMetadata"]["HTTPStatusCode"],
        seen["Error"]["Code"],
        seen["Error"]["Message"],
        seen["ResponseMetadata"]["HTTPHeaders"].get("retry-after"),
        str(seen),
    )


@pytest.mark.parametrize(("api", "code"), [("native", "rate_limited"), ("s3", "SlowDown")])
async def test_an_upload_rate_limited_on_every_bot_gets_503_with_the_cooldown_as_retry_after(
    start_service: ServiceFactory, api: str, code: str
) -> None:
    service = await start(start_service)
    service.sim.configure(random_429_retry_after=COOLDOWN)
    service.sim.set_faults(fault_429_rate=1.0)
    answer = await upload(service, api)
    assert (answer.status, answer.code) == (503, code), answer
    # Every bot cools down for Telegram's 40 s (the default would be 5).
    assert answer.retry_after is not None
    assert COOLDOWN - 5 < int(answer.retry_after) <= COOLDOWN


@pytest.mark.parametrize(
    ("api", "code"), [("native", "telegram_unavailable"), ("s3", "ServiceUnavailable")]
)
async def test_an_upload_failing_transiently_on_every_attempt_gets_503_with_retry_after(
    start_service: ServiceFactory, api: str, code: str
) -> None:
    service = await start(start_service)
    service.sim.set_faults(fault_5xx_rate=1.0)
    answer = await upload(service, api)
    assert (answer.status, answer.code) == (503, code), answer
    assert answer.retry_after is not None and int(answer.retry_after) >= 1


@pytest.mark.parametrize(("api", "code"), [("native", "telegram_error"), ("s3", "InternalError")])
async def test_a_permanent_telegram_refusal_is_a_502_with_its_description_and_no_token(
    start_service: ServiceFactory, api: str, code: str
) -> None:
    service = await start(start_service)
    # Telegram refuses the document itself, whichever bot sends it.
    service.sim.configure(max_upload_bytes=len(BODY) // 2)
    answer = await upload(service, api)
    assert (answer.status, answer.code) == (502, code), answer
    assert "Request Entity Too Large" in answer.message
    assert answer.retry_after is None
    for token in service.sim.tokens:
        assert token.split(":", 1)[1] not in answer.text


@pytest.mark.parametrize(
    ("api", "code"), [("native", "storage_unavailable"), ("s3", "ServiceUnavailable")]
)
async def test_a_storage_chat_no_bot_is_in_is_a_503_that_says_why_and_no_token(
    start_service: ServiceFactory, api: str, code: str
) -> None:
    # A storage chat the bots are not in: getChatMember answers "chat not
    # found", so no bot is admitted, and the service is not ready.
    service = await start(start_service, storage_chat_id=-1001000000001, wait_ready=False)

    async def told_why() -> bool:
        async with service.client() as http:
            ready = await http.get("/ready")
            put = await http.put("/api/files/f.bin", content=b"x" * 2048, headers=service.auth)
            return ready.status_code == 503 and "chat not found" in put.text

    await eventually(told_why)
    answer = await upload(service, api)
    assert (answer.status, answer.code) == (503, code), answer
    assert "chat -1001000000001: getChatMember: Bad Request: chat not found" in answer.message
    for token in service.sim.tokens:
        assert token.split(":", 1)[1] not in answer.text


async def test_an_s3_write_refused_during_shutdown_is_an_xml_503(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service)
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    service.app.state.draining = True
    with pytest.raises(ClientError) as caught:
        await s3("put_object", Bucket="box", Key="late.bin", Body=b"late")
    seen = caught.value.response
    assert seen["Error"]["Code"] == "ServiceUnavailable"  # parsed from XML, not JSON
    assert seen["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert seen["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "5"
    assert seen["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/xml"
