"""Signing the web page in and out: the cookie, the CSRF token, and what a
session may do (real HTTP, both database backends)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.cli.demo import create_api_key
from app.db.api_keys import ApiKeyRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import ApiKey, WebSession
from app.db.session import session_scope
from app.db.types import utcnow
from app.db.web_sessions import MAX_SESSIONS_PER_KEY
from app.http.api.web_session import CSRF_HEADER, SESSION_COOKIE
from app.store.key_failures import CREDENTIAL_PREFIX, FAILURES_PER_CREDENTIAL, WINDOW_SECONDS
from tests.running_service import Service, payload


async def sign_in(http: httpx.AsyncClient, key: str) -> tuple[httpx.Response, str]:
    response = await http.post("/api/session", json={"key": key})
    return response, response.json().get("csrf_token", "")


async def put_file(service: Service, name: str, size: int = 10) -> dict[str, str]:
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=payload(size), headers=service.auth)
    assert response.status_code == 201, response.text
    return response.json()


async def test_sign_in_sets_an_httponly_strict_cookie_that_is_not_the_key(
    service: Service,
) -> None:
    async with service.client() as http:
        response, csrf = await sign_in(http, service.key)

        assert response.status_code == 200, response.text
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert "Secure" not in cookie  # plain http: the browser would drop it
        assert service.key not in cookie
        assert service.key not in response.text
        assert csrf and csrf not in cookie
        assert response.json()["key_name"].startswith("test-")
        # The cookie alone lists files and says who is signed in.
        listing = await http.get("/api/files")
        assert listing.status_code == 200, listing.text
        who = await http.get("/api/session")
        assert who.status_code == 200 and who.json()["csrf_token"] == csrf


async def test_a_wrong_key_is_refused_and_sets_no_cookie(service: Service) -> None:
    async with service.client() as http:
        response, _ = await sign_in(http, service.key + "x")

        assert response.status_code == 401
        assert response.json()["detail"] == "the API key is unknown or revoked"
        assert "set-cookie" not in response.headers
        assert (await http.get("/api/files")).status_code == 401


async def test_the_cookie_is_secure_behind_https(service: Service) -> None:
    # Caddy (a trusted proxy on 127.0.0.1) says the client came over https.
    async with service.client(headers={"X-Forwarded-Proto": "https"}) as http:
        response, _ = await sign_in(http, service.key)

    assert response.status_code == 200
    assert "Secure" in response.headers["set-cookie"]


async def test_writes_with_the_cookie_need_the_csrf_token(service: Service) -> None:
    stored = await put_file(service, "keep.txt")
    async with service.client() as http:
        _, csrf = await sign_in(http, service.key)

        refused = await http.delete(f"/api/files/{stored['public_id']}")
        wrong = await http.delete(
            f"/api/files/{stored['public_id']}", headers={CSRF_HEADER: "0" * 64}
        )
        assert refused.status_code == 403
        assert refused.json()["error"] == "csrf_token_invalid"
        assert CSRF_HEADER in refused.json()["detail"]
        assert wrong.status_code == 403
        assert (await http.get(f"/f/{stored['public_id']}")).status_code == 200

        deleted = await http.delete(
            f"/api/files/{stored['public_id']}", headers={CSRF_HEADER: csrf}
        )
        assert deleted.status_code == 204
        assert (await http.get(f"/f/{stored['public_id']}")).status_code == 404


async def test_sign_out_ends_the_session_for_good(service: Service) -> None:
    async with service.client() as http:
        _, csrf = await sign_in(http, service.key)
        cookie = http.cookies[SESSION_COOKIE]

        out = await http.delete("/api/session", headers={CSRF_HEADER: csrf})

        assert out.status_code == 204
        assert 'teleuploader_session=""' in out.headers["set-cookie"]
    # The old cookie, kept by someone, opens nothing any more.
    async with service.client(cookies={SESSION_COOKIE: cookie}) as http:
        response = await http.get("/api/files")
    assert response.status_code == 401
    assert "sign in again" in response.json()["detail"]


async def test_revoking_the_key_ends_its_sessions(service: Service) -> None:
    async with service.client() as http:
        await sign_in(http, service.key)
        assert (await http.get("/api/files")).status_code == 200
        engine = create_engine(service.settings.database_url)
        try:
            async with session_scope(create_sessionmaker(engine)) as session:
                repo = ApiKeyRepository(session)
                (key,) = [k for k in await repo.list() if k.name.startswith("test-")]
                assert await repo.revoke(key.name)
        finally:
            await engine.dispose()

        assert (await http.get("/api/files")).status_code == 401


async def test_an_expired_session_is_refused(service: Service) -> None:
    async with service.client() as http:
        response, _ = await sign_in(http, service.key)
        assert response.status_code == 200
        assert (await http.get("/api/files")).status_code == 200
        # WEB_SESSION_HOURS later:
        engine = create_engine(service.settings.database_url)
        try:
            async with session_scope(create_sessionmaker(engine)) as session:
                await session.execute(
                    update(WebSession).values(expires_at=utcnow() - timedelta(seconds=1))
                )
        finally:
            await engine.dispose()

        listing = await http.get("/api/files")

    assert listing.status_code == 401
    assert "expired" in listing.json()["detail"]


async def test_the_sign_in_body_is_checked(service: Service) -> None:
    async with service.client() as http:
        empty = await http.post("/api/session", json={"key": ""})
        huge = await http.post("/api/session", json={"key": "k" * 10_000})
        not_json = await http.post("/api/session", content=b"key=abc")

    for response in (empty, huge, not_json):
        assert 400 <= response.status_code < 500, response.text
        assert "set-cookie" not in response.headers


async def test_sign_in_holds_when_another_write_lands_between_its_key_read_and_its_session_row(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sign-in reads the key, then writes the session row. On SQLite a
    transaction that has read may not write once another connection has
    written (SQLITE_BUSY at once, whatever busy_timeout says): the page said
    "the database cannot be reached" (seen in CI, a lease heartbeat landing in
    between). Here another connection writes right after the key is read;
    the sign-in succeeds, and so does the other write."""
    engine = create_engine(service.settings.database_url)
    other_writes = create_sessionmaker(engine)
    verify = ApiKeyRepository.verify
    landed: list[asyncio.Task[None]] = []

    async def write_elsewhere() -> None:
        async with session_scope(other_writes) as session:
            await session.execute(update(ApiKey).values(last_used_at=utcnow()))

    async def verify_then_another_write(self: ApiKeyRepository, *args: Any, **kwargs: Any) -> Any:
        key = await verify(self, *args, **kwargs)
        other = asyncio.create_task(write_elsewhere())
        landed.append(other)
        # Committed at once where the sign-in holds no lock yet; otherwise it
        # waits for the sign-in's commit.
        await asyncio.wait([other], timeout=0.5)
        return key

    try:
        async with service.client() as http:
            # The first sign-in records the key's use (a write, which takes
            # the lock); the second finds it recorded and only reads the key.
            first, _ = await sign_in(http, service.key)
            assert first.status_code == 200, first.text
            monkeypatch.setattr(ApiKeyRepository, "verify", verify_then_another_write)
            response, csrf = await sign_in(http, service.key)
            monkeypatch.undo()
            assert response.status_code == 200, response.text
            who = await http.get("/api/session")
            assert who.status_code == 200 and who.json()["csrf_token"] == csrf
        # One write after each key read (the memory of refused keys reads it
        # first, then the sign-in's transaction): none was lost.
        assert len(landed) == 2
        await asyncio.gather(*landed)
    finally:
        await engine.dispose()


# --- limits on signing in -----------------------------------------------------------


def from_address(address: str) -> dict[str, str]:
    # The service believes X-Forwarded-For from 127.0.0.1 (Caddy's address).
    return {"X-Forwarded-For": address}


async def test_failed_sign_ins_are_limited_per_client_and_key_start(service: Service) -> None:
    """Guesses that start as the owner's key does (its first 8 characters)
    are limited at the guesser's address, the right key included there (no
    oracle); the owner elsewhere, and other keys there, sign in as ever."""
    start = service.key[:CREDENTIAL_PREFIX]
    other_key = await create_api_key(service.settings.database_url, name="other")
    async with service.client() as http:
        wrong = [
            await http.post(
                "/api/session",
                json={"key": f"{start}{'x' * 30}{n:04d}"},
                headers=from_address("203.0.113.7"),
            )
            for n in range(FAILURES_PER_CREDENTIAL + 1)
        ]
        right_there = await http.post(
            "/api/session", json={"key": service.key}, headers=from_address("203.0.113.7")
        )
        right_elsewhere = await http.post(
            "/api/session", json={"key": service.key}, headers=from_address("203.0.113.8")
        )
        other_there = await http.post(
            "/api/session", json={"key": other_key}, headers=from_address("203.0.113.7")
        )
    assert [r.status_code for r in wrong[:-1]] == [401] * FAILURES_PER_CREDENTIAL
    for limited in (wrong[-1], right_there):
        assert limited.status_code == 429, limited.text
        assert 1 <= int(limited.headers["retry-after"]) <= WINDOW_SECONDS
        assert "too many failed key checks" in limited.json()["detail"]
        assert "set-cookie" not in limited.headers
    assert right_elsewhere.status_code == 200
    assert other_there.status_code == 200


async def test_guesses_from_many_addresses_cannot_lock_the_owner_out(service: Service) -> None:
    """Five characters of a key, tried from as many addresses as it takes,
    lock nobody out: each address is limited alone (the limiter of the
    previous release refused the key everywhere)."""
    start = service.key[:CREDENTIAL_PREFIX]
    async with service.client() as http:
        answers = [
            await http.post(
                "/api/session",
                json={"key": f"{start}{'y' * 30}{n:04d}"},
                headers=from_address(f"198.51.100.{n}"),
            )
            for n in range(2 * FAILURES_PER_CREDENTIAL)
        ]
        owner = await http.post(
            "/api/session", json={"key": service.key}, headers=from_address("192.0.2.1")
        )
    assert [r.status_code for r in answers] == [401] * (2 * FAILURES_PER_CREDENTIAL)
    assert owner.status_code == 200, owner.text


async def test_sessions_are_bounded_per_key_and_the_oldest_ends(service: Service) -> None:
    cookies = []
    for _ in range(MAX_SESSIONS_PER_KEY + 2):
        async with service.client() as http:  # a new browser each time
            response, _ = await sign_in(http, service.key)
            assert response.status_code == 200, response.text
            cookies.append(response.cookies[SESSION_COOKIE])
    works = []
    for cookie in cookies:
        async with service.client(cookies={SESSION_COOKIE: cookie}) as http:
            works.append((await http.get("/api/session")).status_code == 200)
    assert works == [False, False] + [True] * MAX_SESSIONS_PER_KEY


async def test_signing_in_again_ends_the_browsers_old_session(service: Service) -> None:
    async with service.client() as http:
        first, _ = await sign_in(http, service.key)
        old = first.cookies[SESSION_COOKIE]
        second, _ = await sign_in(http, service.key)  # the browser sends its cookie
        new = second.cookies[SESSION_COOKIE]
    assert old != new
    async with service.client(cookies={SESSION_COOKIE: old}) as http:
        assert (await http.get("/api/session")).status_code == 401
    async with service.client(cookies={SESSION_COOKIE: new}) as http:
        assert (await http.get("/api/session")).status_code == 200
