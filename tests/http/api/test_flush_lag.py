"""The spool's flush lag, where an operator looks: /metrics, the status
screen's JSON, and /ready, which stays 200 but says `degraded` past
FLUSH_LAG_ALERT."""

from __future__ import annotations

import asyncio
import re

import boto3

from tests.running_service import ServiceFactory, eventually, payload

ACCESS_KEY = "AKIDFLUSHLAG"
SECRET = "flush-lag-test-secret-0123456789"
PART = 40 * 1024  # under half the pool: spooled


def gauge(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


async def test_unflushed_bytes_show_and_ready_says_degraded_past_the_alert(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(
        s3_credentials={ACCESS_KEY: SECRET}, s3_min_part_size=0, flush_lag_alert=0.2
    )
    client = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    async with service.client() as http:
        assert (await http.get("/ready")).json() == {"status": "ready"}
        with service.sim.holding("sendDocument"):
            await asyncio.to_thread(client.create_bucket, Bucket="box")
            upload = await asyncio.to_thread(
                client.create_multipart_upload, Bucket="box", Key="blob"
            )
            await asyncio.to_thread(
                client.upload_part,
                Bucket="box",
                Key="blob",
                UploadId=upload["UploadId"],
                PartNumber=1,
                Body=payload(PART),
            )
            await asyncio.sleep(0.3)  # past FLUSH_LAG_ALERT
            ready = await http.get("/ready")
            status = (await http.get("/api/status", headers=service.auth)).json()
            # /metrics reads the last measure (every 10 s, and at /ready).
            metrics = (await http.get("/metrics", headers=service.auth)).text

        assert ready.status_code == 200
        assert ready.json()["status"] == "degraded"
        assert "FLUSH_LAG_ALERT" in ready.json()["reason"]
        assert status["upload_budget"]["unflushed_bytes"] == PART
        assert status["upload_budget"]["oldest_unflushed_seconds"] >= 0.2
        assert gauge(metrics, "teleuploader_spool_unflushed_bytes") == PART
        assert gauge(metrics, "teleuploader_spool_oldest_unflushed_seconds") >= 0.2

        # Released: the part idles into Telegram, and the alarm ends.
        async def recovered() -> bool:
            return (await http.get("/ready")).json() == {"status": "ready"}

        await eventually(recovered, within=20)
        metrics = (await http.get("/metrics", headers=service.auth)).text
        assert gauge(metrics, "teleuploader_spool_unflushed_bytes") == 0
