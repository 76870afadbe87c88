"""getFile's failed-download answer as the official server means it
(app/store/copy_failures.py, and the locator's retries): "wrong file_id or
the file is temporarily unavailable" is sent for ANY server-side download
that failed, 5xx and 429 of Telegram's data centres included
(telegram-bot-api Client.cpp, on_update_file). So it is asked again, and a
copy is missing only once its failures spread over time."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.db.models import ChunkCopy
from app.db.session import session_scope
from app.store.services import Services
from tests.running_service import CHUNK, Service, ServiceFactory, payload

FILES = 6


def services_of(service: Service) -> Services:
    services: Services = service.app.state.services
    return services


async def upload(service: Service, count: int = FILES) -> dict[str, bytes]:
    stored: dict[str, bytes] = {}
    async with service.client() as http:
        for n in range(count):
            data = payload(3 * CHUNK + n, seed=200 + n)
            response = await http.put(f"/api/files/f{n}.bin", content=data, headers=service.auth)
            assert response.status_code == 201, response.text
            stored[response.json()["public_id"]] = data
    return stored


async def copy_states(service: Service) -> list[str]:
    async with session_scope(services_of(service).sessionmaker) as session:
        return list(await session.scalars(select(ChunkCopy.state).order_by(ChunkCopy.id)))


def unavailable_answers(service: Service) -> int:
    return sum(stats.faults_injected for stats in service.sim.stats().values())


@pytest.mark.parametrize("replicas", [1, 2])
async def test_with_30_percent_of_getfiles_failing_every_download_is_whole_and_nothing_is_lost(
    start_service: ServiceFactory, replicas: int
) -> None:
    """Before, the first such answer marked the copy missing: with one copy
    the object was lost, with two a good copy was retired and deleted."""
    service = await start_service(
        bots=3, replicas=replicas, storage_chat_ids=[-1001000000401, -1001000000402]
    )
    files = await upload(service)
    # Seeded, and the requests run one after another: the same getFiles
    # fail on every run.
    service.sim.configure(fault_file_unavailable_rate=0.3, seed=5)

    async with service.client() as http:
        for public_id, data in files.items():
            whole = await http.get(f"/f/{public_id}")
            assert whole.status_code == 200, whole.text
            assert whole.content == data
            first, last = CHUNK - 100, 2 * CHUNK + 99  # across two chunks
            part = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={first}-{last}"})
            assert part.status_code == 206
            assert part.content == data[first : last + 1]
    report = await services_of(service).scrub.run_pass(deep=True)

    assert unavailable_answers(service) > 0  # the faults did strike
    assert (report.missing, report.corrupt, report.lost_objects) == (0, 0, 0)
    assert report.degraded_objects == 0
    assert set(await copy_states(service)) == {"ok"}


async def test_a_copy_telegram_keeps_failing_to_serve_is_a_503_and_not_missing_at_once(
    start_service: ServiceFactory,
) -> None:
    """One bot (no other to forward through), every getFile failing: each
    read is a retryable 503, and the copy stays intact in the database
    (three failures over an hour make it missing: docs/durability.md)."""
    service = await start_service(bots=1)
    (public_id, data), *_ = (await upload(service, count=1)).items()
    service.sim.configure(fault_file_unavailable_rate=1.0)

    async with service.client() as http:
        for _ in range(3):
            failed = await http.get(f"/f/{public_id}")
            assert failed.status_code == 503, failed.text
            assert failed.json()["error"] == "content_unavailable"
        service.sim.configure(fault_file_unavailable_rate=0.0)
        again = await http.get(f"/f/{public_id}")

    assert again.content == data
    assert set(await copy_states(service)) == {"ok"}
    health = await services_of(service).scrub.health()
    assert health.objects_lost == 0


async def test_failures_that_meet_the_rule_make_the_copy_missing(
    start_service: ServiceFactory,
) -> None:
    """The rule, shortened (two failures, no spacing, no span): the reads'
    failures are counted in the database and the copy is then missing."""
    service = await start_service(
        bots=1,
        copy_missing_failures=2,
        copy_missing_span_seconds=0,
        copy_failure_spacing_seconds=0,
    )
    (public_id, _data), *_ = (await upload(service, count=1)).items()
    service.sim.configure(fault_file_unavailable_rate=1.0)
    await services_of(service).scrub.run_pass(deep=True)
    assert "missing" not in await copy_states(service)  # one failure each

    report = await services_of(service).scrub.run_pass(deep=True)

    assert report.missing == report.unavailable == len(await copy_states(service))
    assert set(await copy_states(service)) == {"missing"}
    assert report.lost_objects == 1
    async with service.client() as http:
        damaged = await http.get(f"/f/{public_id}")
    assert damaged.status_code == 502
