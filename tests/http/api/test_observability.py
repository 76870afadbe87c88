"""Request ids and Prometheus metrics."""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

from app.cli.demo import create_api_key
from app.store.services import Services
from tests.http.api.test_tus import create, patch
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, read
from tests.running_service import (
    CHUNK,
    INLINE,
    Service,
    ServiceFactory,
    eventually,
    parse_metrics,
    payload,
)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_every_response_carries_a_request_id(service: Service) -> None:
    async with service.client() as http:
        fresh = await http.get("/health")
        another = await http.get("/health")
        echoed = await http.get("/health", headers={"X-Request-ID": "abc-123"})
        refused = await http.get("/health", headers={"X-Request-ID": "bad id\twith spaces"})
    assert len(fresh.headers["x-request-id"]) == 32
    assert another.headers["x-request-id"] != fresh.headers["x-request-id"]
    assert echoed.headers["x-request-id"] == "abc-123"
    assert refused.headers["x-request-id"] != "bad id\twith spaces"


async def test_metrics_need_a_key_by_default_and_describe_the_bots(service: Service) -> None:
    async with service.client() as http:
        await http.put("/api/files/m.bin", content=b"z" * (2 * CHUNK), headers=service.auth)
        anonymous = await http.get("/metrics")
        scraped = await http.get("/metrics", headers=service.auth)
    assert anonymous.status_code == 401
    assert scraped.status_code == 200
    text = scraped.text
    put_line = 'teleuploader_http_requests_total{method="PUT",route="/api/files/{name:path}"'
    assert f'{put_line},status="201"}} 1.0' in text
    assert f'teleuploader_uploaded_bytes_total{{api="native"}} {float(2 * CHUNK)}' in text
    sends = [line for line in text.splitlines() if line.startswith("teleuploader_bot_sends_total{")]
    assert len(sends) == 3
    # 2 chunks' worth of known length is cut into 3 equal chunks, one per bot.
    assert sum(float(line.rsplit(" ", 1)[1]) for line in sends) == 3
    assert 'teleuploader_telegram_call_duration_seconds_count{bot_id="' in text
    assert "teleuploader_gc_backlog" in text
    assert not any(token.split(":")[1] in text for token in service.sim.tokens)


async def test_with_metrics_off_no_key_sees_the_bots_on_the_status_screen(
    start_service: ServiceFactory,
) -> None:
    """/api/status follows METRICS_ACCESS as /ready does: `off` hides the
    bots' ids, usernames and queues from every key, an admin's included; the
    rest of the status screen stays."""
    shown = await start_service(metrics_access="key")
    off = await start_service(metrics_access="off")
    reader = await create_api_key(off.settings.database_url, name="reader", scope="read")

    async def status(service: Service, auth: dict[str, str]) -> dict[str, Any]:
        async with service.client() as http:
            answer: dict[str, Any] = (await http.get("/api/status", headers=auth)).json()
        return answer

    visible = await status(shown, shown.auth)
    assert len(visible["bots"]) == 3 and visible["bots_hidden"] is False
    for hidden in (await status(off, off.auth), await status(off, bearer(reader))):
        assert (hidden["bots"], hidden["bots_hidden"]) == ([], True)
        for token in off.sim.tokens:
            assert token.split(":")[0] not in json.dumps(hidden)  # no bot id
        assert hidden["upload_budget"]["buffers"] > 0
    async with off.client() as http:
        assert "bots" not in (await http.get("/ready", headers=off.auth)).json()


async def test_metrics_can_be_public_or_off(start_service: ServiceFactory) -> None:
    public = await start_service(metrics_access="public")
    off = await start_service(metrics_access="off")
    async with public.client() as http:
        await http.put("/api/files/p.bin", content=b"p" * INLINE, headers=public.auth)
        scraped = await http.get("/metrics")  # no key
    async with off.client() as http:
        refused = await http.get("/metrics", headers=off.auth)  # not even with a key

    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    # What a Prometheus scrape reads: this service's own counters, in the text format.
    text = scraped.text
    assert "# TYPE teleuploader_http_requests_total counter" in text
    assert f'teleuploader_uploaded_bytes_total{{api="native"}} {float(INLINE)}' in text
    assert not any(token.split(":")[1] in text for token in public.sim.tokens)

    assert refused.status_code == 404
    assert refused.json() == {
        "error": "not_found",
        "detail": "metrics are turned off (METRICS_ACCESS=off)",
    }
    assert "teleuploader_" not in refused.text


async def scrape(service: Service) -> dict[str, float]:
    async with service.client() as http:
        return parse_metrics((await http.get("/metrics", headers=service.auth)).text)


def services_of(service: Service) -> Services:
    services: Services = service.app.state.services
    return services


async def test_object_bytes_are_counted_under_the_api_that_moved_them(
    start_service: ServiceFactory,
) -> None:
    """What the dashboard's bytes-per-second panels read: each API's own."""
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    await s3("put_object", Bucket="box", Key="s3.bin", Body=payload(3 * CHUNK, seed=1))
    tus_body = payload(CHUNK + 5, seed=2)
    location = await create(service, len(tus_body))
    assert (await patch(service, location, 0, tus_body)).status_code == 204
    async with service.client() as http:
        put = await http.put("/api/files/n.bin", content=payload(2 * CHUNK), headers=service.auth)
        got = await http.get(f"/f/{put.json()['public_id']}")
        mounted = await http.put("/dav/d.bin", content=payload(CHUNK, seed=3), headers=service.auth)
        read_back = await http.get("/dav/d.bin", headers=service.auth)
    assert got.content == payload(2 * CHUNK)
    assert mounted.status_code == 201, mounted.text
    assert read_back.content == payload(CHUNK, seed=3)
    assert await read(s3, "box", "s3.bin") == payload(3 * CHUNK, seed=1)

    metrics = await scrape(service)
    uploaded = {
        api: metrics.get(f'teleuploader_uploaded_bytes_total{{api="{api}"}}')
        for api in ("native", "s3", "tus", "dav")
    }
    assert uploaded == {"native": 2 * CHUNK, "s3": 3 * CHUNK, "tus": CHUNK + 5, "dav": CHUNK}
    assert metrics['teleuploader_downloaded_bytes_total{api="native"}'] == 2 * CHUNK
    assert metrics['teleuploader_downloaded_bytes_total{api="s3"}'] == 3 * CHUNK
    assert metrics['teleuploader_downloaded_bytes_total{api="dav"}'] == CHUNK


async def test_a_download_is_timed_to_its_first_byte(service: Service) -> None:
    async with service.client() as http:
        put = await http.put("/api/files/t.bin", content=payload(2 * CHUNK), headers=service.auth)
        got = await http.get(f"/f/{put.json()['public_id']}")
    assert got.status_code == 200

    metrics = await scrape(service)
    assert metrics['teleuploader_http_first_byte_seconds_count{route="/f/{public_id}"}'] == 1
    # No body to wait for: a write is not timed so.
    assert not any(
        name.startswith("teleuploader_http_first_byte_seconds_count") and "/api/files/" in name
        for name in metrics
    )


async def test_the_spool_disk_and_the_flush_lag_alert_are_on_metrics(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(flush_lag_alert=123)
    metrics = await scrape(service)

    assert metrics["teleuploader_spool_flush_lag_alert_seconds"] == 123
    disk = shutil.disk_usage(service.settings.spool_path)
    assert metrics['teleuploader_spool_disk_bytes{state="size"}'] == disk.total
    assert 0 < metrics['teleuploader_spool_disk_bytes{state="free"}'] <= disk.total


async def test_no_spool_no_spool_disk(start_service: ServiceFactory) -> None:
    service = await start_service(spool_max_bytes=0)
    assert not any(name.startswith("teleuploader_spool_disk") for name in await scrape(service))


async def test_snapshots_say_when_they_were_written_and_whether_they_fail(
    service: Service,
) -> None:
    before = await scrape(service)
    assert before["teleuploader_snapshot_failing"] == 0
    assert "teleuploader_snapshot_last_timestamp_seconds" not in before

    started = time.time()
    async with service.client() as http:
        taken = await http.post("/api/admin/snapshot", headers=service.auth)
    assert taken.status_code == 200, taken.text
    after = await scrape(service)
    assert started - 1 <= after["teleuploader_snapshot_last_timestamp_seconds"] <= time.time()

    service.sim.lose_chat(service.settings.chat_ids[0])
    async with service.client() as http:
        failed = await http.post("/api/admin/snapshot", headers=service.auth)
    # Telegram's "chat not found": refused for good, as the error table
    # answers a permanent refusal (docs/http-api.md).
    assert failed.status_code == 502, failed.text
    assert (await scrape(service))["teleuploader_snapshot_failing"] == 1


async def test_the_scrub_reach_is_the_oldest_check(service: Service) -> None:
    started = time.time()
    async with service.client() as http:
        await http.put("/api/files/c.bin", content=payload(2 * CHUNK), headers=service.auth)
    await services_of(service).scrub.health()  # what a scrub round counts

    oldest = (await scrape(service))["teleuploader_copies_oldest_check_timestamp_seconds"]
    # Stored just now, so checked just now.
    assert started - 1 <= oldest <= time.time()


async def test_the_fleet_counts_the_live_instances_on_the_database(
    start_service: ServiceFactory,
) -> None:
    first = await start_service()
    assert (await scrape(first))["teleuploader_fleet_instances"] == 1
    second = await start_service(sim=first.sim)

    async def both_see_two() -> bool:
        seen = [(await scrape(each))["teleuploader_fleet_instances"] for each in (first, second)]
        return seen == [2, 2]

    await eventually(both_see_two)
