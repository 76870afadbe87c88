"""Request ids and Prometheus metrics."""

from __future__ import annotations

from tests.running_service import CHUNK, INLINE, Service, ServiceFactory


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
