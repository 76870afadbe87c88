"""Many clients, one upload budget: every upload succeeds, none is refused,
and the budget is in /metrics."""

from __future__ import annotations

import asyncio
import re

from tests.running_service import (
    CHUNK,
    Service,
    ServiceFactory,
    assert_one_call_per_lane,
    eventually,
    payload,
)


def gauge(metrics: str, name: str, label: str | None = None) -> float:
    labels = "" if label is None else rf'\{{state="{label}"\}}'
    match = re.search(rf"^{name}{labels} (\S+)$", metrics, re.M)
    assert match is not None, f"{name} {label or ''} missing"
    return float(match.group(1))


async def test_more_clients_than_buffers_wait_their_turn_and_all_succeed(
    start_service: ServiceFactory,
) -> None:
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

        async def metrics() -> str:
            return (await http.get("/metrics", headers=service.auth)).text

        # Telegram holds the uploads: the two chunks it holds keep both
        # buffers, and every client waits for one (none is read meanwhile).
        with service.sim.holding("sendDocument"):
            puts = asyncio.gather(*(put(n) for n in range(12)))

            # Both held sends must have reached Telegram: a buffer is taken
            # before its chunk's call arrives, on a busy machine a while before.
            async def all_waiting() -> bool:
                now = await metrics()
                return (
                    gauge(now, "teleuploader_upload_buffer_waiters") == 12
                    and service.sim.held_calls("sendDocument") == 2
                )

            await eventually(all_waiting)
            now = await metrics()
            assert gauge(now, "teleuploader_upload_buffers", "in_use") == 2
            assert service.sim.held_calls("sendDocument") == 2
        ids = await puts

        for n, public_id in enumerate(ids):
            download = await http.get(f"/f/{public_id}")
            assert download.content == bodies[n]
        after = await metrics()

    assert gauge(after, "teleuploader_upload_buffers", "size") == 2
    assert gauge(after, "teleuploader_upload_buffers", "in_use") == 0
    assert gauge(after, "teleuploader_upload_buffer_waiters") == 0
    assert_one_call_per_lane(service.sim.stats())
