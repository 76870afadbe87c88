"""A download never outlives DOWNLOAD_STALL_SECONDS without a byte, whatever
holds the byte up: here getFile failing on every try, which the dispatcher
and the reader would otherwise retry with backoff for many minutes. The
connection is aborted (no short body passes for a whole one), and the same
file downloads whole once Telegram recovers."""

from __future__ import annotations

import asyncio

import pytest

from tests.running_service import CHUNK, ServiceFactory, payload

# Serial: downloads that must stall, and others that must not, within seconds
# (tests/README.md, "Timing").
pytestmark = [pytest.mark.parametrize("database", ["sqlite"], indirect=True), pytest.mark.serial]


STALL = 1.0
# The retries alone: 10 dispatcher attempts with backoff from 0.5 s, times
# 4 reads, are minutes. A download still running at this point was not
# bounded by the stall timeout.
NOT_BOUNDED = 60


async def test_a_download_whose_getfile_keeps_failing_is_a_503_within_the_stall_timeout(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(download_stall_seconds=STALL)
    data = payload(3 * CHUNK, seed=11)
    async with service.client() as http:
        stored = await http.put("/api/files/f.bin", content=data, headers=service.auth)
        assert stored.status_code == 201, stored.text
        public_id = stored.json()["public_id"]

        service.sim.set_faults(fault_5xx_rate=1.0)  # getFile and downloads fail
        # The first block is read before the headers go out: no byte came
        # within the stall timeout, so the answer is a 503 to retry, with
        # nothing of the file and no filler (not a 200 cut off later).
        async with asyncio.timeout(NOT_BOUNDED):
            failed = await http.get(f"/f/{public_id}")
        assert failed.status_code == 503
        assert failed.headers["retry-after"]
        assert failed.json()["error"] == "content_unavailable"
        assert data[:64] not in failed.content

        service.sim.set_faults(fault_5xx_rate=0.0)
        again = await http.get(f"/f/{public_id}")
        assert again.status_code == 200
        assert again.content == data
