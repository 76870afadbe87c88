"""Many clients, one upload budget: every upload succeeds, none is refused,
and the budget is in /metrics."""

from __future__ import annotations

import asyncio
import re

from tests.running_service import CHUNK, Service, ServiceFactory, payload


def gauge(metrics: str, name: str, label: str) -> float:
    match = re.search(rf'^{name}\{{state="{label}"\}} (\S+)$', metrics, re.M)
    assert match is not None, f"{name}{{state={label}}} missing"
    return float(match.group(1))


async def test_more_clients_than_buffers_all_succeed(start_service: ServiceFactory) -> None:
    # Two buffers for twelve clients: they take turns, nobody gets an error.
    service: Service = await start_service(upload_buffer_chunks=2)
    bodies = [payload(5 * CHUNK + 123, seed=n) for n in range(12)]

    async with service.client() as http:

        async def put(n: int) -> str:
            response = await http.put(
                f"/api/files/client-{n}.bin", content=bodies[n], headers=service.auth
            )
            assert response.status_code == 201, response.text
            return str(response.json()["public_id"])

        ids = await asyncio.gather(*(put(n) for n in range(12)))
        for n, public_id in enumerate(ids):
            download = await http.get(f"/f/{public_id}")
            assert download.content == bodies[n]
        metrics = (await http.get("/metrics", headers=service.auth)).text

    assert gauge(metrics, "teleuploader_upload_buffers", "size") == 2
    assert gauge(metrics, "teleuploader_upload_buffers", "in_use") == 0
    assert "teleuploader_upload_buffer_waiters 0.0" in metrics
    assert all(bot.max_concurrent_calls <= 1 for bot in service.sim.stats().values())
