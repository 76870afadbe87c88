"""Signing the web page in and out: the cookie, the CSRF token, and what a
session may do (real HTTP, both database backends)."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import update

from app.api.web_session import CSRF_HEADER, SESSION_COOKIE
from app.db.api_keys import ApiKeyRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import WebSession
from app.db.session import session_scope
from app.db.types import utcnow
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
