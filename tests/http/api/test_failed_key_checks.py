"""Failed key checks over HTTP (app/store/key_failures.py): an
`Authorization: Bearer` key on any route counts as a sign-in does, and
instances on one database share one count."""

from __future__ import annotations

import httpx

from app.store.key_failures import CREDENTIAL_PREFIX, FAILURES_PER_CREDENTIAL, WINDOW_SECONDS
from tests.running_service import Service, ServiceFactory


def guessing(service: Service, n: int, address: str) -> dict[str, str]:
    """Headers of a guess at the service's key that knows its start."""
    guess = f"{service.key[:CREDENTIAL_PREFIX]}{'z' * 30}{n:04d}"
    # The service believes X-Forwarded-For from 127.0.0.1 (Caddy's address).
    return {"Authorization": f"Bearer {guess}", "X-Forwarded-For": address}


async def test_wrong_bearer_keys_on_any_route_are_limited(service: Service) -> None:
    routes = ["/api/files", "/api/trash", "/api/status", "/api/session", "/metrics"]
    async with service.client() as http:
        answers = [
            await http.get(routes[n % len(routes)], headers=guessing(service, n, "203.0.113.9"))
            for n in range(FAILURES_PER_CREDENTIAL + 1)
        ]
        right_there = await http.get(
            "/api/files", headers={**service.auth, "X-Forwarded-For": "203.0.113.9"}
        )
        right_elsewhere = await http.get(
            "/api/files", headers={**service.auth, "X-Forwarded-For": "203.0.113.10"}
        )
    assert [r.status_code for r in answers[:-1]] == [401] * FAILURES_PER_CREDENTIAL
    for limited in (answers[-1], right_there):
        assert limited.status_code == 429, limited.text
        assert limited.json()["error"] == "too_many_requests"
        assert 1 <= int(limited.headers["retry-after"]) <= WINDOW_SECONDS
    assert right_elsewhere.status_code == 200


async def test_instances_on_one_database_share_the_count(start_service: ServiceFactory) -> None:
    first = await start_service()
    second = await start_service()  # the same database, another process's memory
    half = FAILURES_PER_CREDENTIAL // 2
    answers = []
    async with httpx.AsyncClient(timeout=30) as http:
        for n in range(2 * half + 1):
            service = first if n < half or n == 2 * half else second
            answers.append(
                await http.get(
                    f"{service.url}/api/files", headers=guessing(first, n, "203.0.113.9")
                )
            )
    assert [r.status_code for r in answers] == [401] * (2 * half) + [429]
