"""Request ids and Prometheus metrics."""

from __future__ import annotations

import json
from typing import Any

from app.cli.demo import create_api_key
from tests.running_service import CHUNK, INLINE, Service, ServiceFactory


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
    assert f"teleuploader_uploaded_bytes_total {float(2 * CHUNK)}" in text
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
    assert f"teleuploader_uploaded_bytes_total {float(INLINE)}" in text
    assert not any(token.split(":")[1] in text for token in public.sim.tokens)

    assert refused.status_code == 404
    assert refused.json() == {
        "error": "not_found",
        "detail": "metrics are turned off (METRICS_ACCESS=off)",
    }
    assert "teleuploader_" not in refused.text
