"""The page's own files and JSON endpoints over real HTTP: the strict
Content-Security-Policy, nosniff everywhere, name search, the status screen's
data and the read-only bucket browser."""

from __future__ import annotations

import asyncio
import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.client import BaseClient
from hypothesis import example, given
from hypothesis import strategies as st

from app.cli.demo import create_api_key
from app.db.models import KeyScope
from app.http.api.errors import ApiError
from app.http.web.buckets import BROWSE_LINK_SECONDS
from app.http.web.routes import STATIC_DIR, static
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

ACCESS_KEY = "AKIDWEBPAGE"
SECRET = "web-page-test-secret-0123456789"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] == "script":
            self.script_text += data.strip()


@pytest.mark.smoke  # ./scripts/test --quick runs it
async def test_the_page_runs_only_its_own_files(service: Service) -> None:
    async with service.client() as http:
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "frame-ancestors 'none'" in policy

        parsed = _Tags()
        parsed.feed(page.text)
        assert parsed.script_text == "", "an inline script"
        assert not [tag for tag, _ in parsed.tags if tag == "style"], "an inline style sheet"
        for tag, attrs in parsed.tags:
            assert "style" not in attrs, f"a style attribute on <{tag}>"
            assert not [name for name in attrs if name.startswith("on")], f"a handler on <{tag}>"
        # Every script and style sheet is served from here, with its type.
        sources = [a["src"] for t, a in parsed.tags if t == "script"]
        sources += [a["href"] for t, a in parsed.tags if t == "link"]
        assert "/static/vendor/tus.min.js" in sources
        for source in sources:
            assert source and source.startswith("/static/"), source
            response = await http.get(source)
            assert response.status_code == 200, source
            assert response.headers["x-content-type-options"] == "nosniff"
            if source.endswith(".js"):
                assert response.headers["content-type"].startswith("text/javascript")
            if source.endswith(".css"):
                assert response.headers["content-type"].startswith("text/css")


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
async def test_the_api_docs_load_only_files_served_here_under_a_csp(
    service: Service, path: str
) -> None:
    # No CDN: the docs work offline, and no third party's script runs on the
    # origin of the session cookie.
    async with service.client() as http:
        page = await http.get(path)
        assert page.status_code == 200
        policy = page.headers["content-security-policy"]
        script_policy = next(p for p in policy.split(";") if p.strip().startswith("script-src"))
        assert script_policy.split() == ["script-src", "'self'"]
        assert "frame-ancestors 'none'" in policy
        parsed = _Tags()
        parsed.feed(page.text)
        assert parsed.script_text == "", "an inline script"
        sources = [a.get("src") for t, a in parsed.tags if t == "script"]
        sources += [a.get("href") for t, a in parsed.tags if t == "link"]
        assert sources
        for source in sources:
            assert source and source.startswith("/static/"), source
            response = await http.get(source)
            assert response.status_code == 200, source


def test_the_vendored_files_are_the_ones_their_readme_names() -> None:
    vendor = STATIC_DIR / "vendor"
    readme = (vendor / "README.md").read_text()
    named = dict(re.findall(r"sha256 of `([^`]+)`: `([0-9a-f]{64})`", readme))
    assert set(named) == {p.name for p in vendor.glob("*.js")} | {"swagger-ui.css"}
    for name, digest in named.items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
        assert any(vendor.glob("*.LICENSE")), "a licence beside the files"


def test_no_script_builds_markup_from_strings() -> None:
    # Data reaches the page as text nodes only (el(), textContent): no
    # innerHTML, no document.write, no eval in our own files.
    for path in STATIC_DIR.glob("*.js"):
        source = path.read_text()
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert banned not in source, f"{path.name} uses {banned}"


async def test_static_files_stay_inside_their_folder(service: Service) -> None:
    async with service.client() as http:
        for name in (
            "../routes.py",
            "..%2Froutes.py",
            "nothing.js",
            "vendor",
            "%00",
            "app.js%00",
            "a" * 256,  # over the OS's 255 bytes a name: was a 500
            "vendor/" + "é" * 128 + ".js",
            "x/" * 3000,  # over PATH_MAX
        ):
            response = await http.get(f"/static/{name}")
            assert response.status_code == 404, name
            assert "def " not in response.text


# Path components of any text and length, past the OS's 255 bytes a name.
_COMPONENTS = st.lists(
    st.text(min_size=0, max_size=40) | st.text(alphabet="aé.", min_size=200, max_size=400),
    min_size=1,
    max_size=4,
)


@given(name=_COMPONENTS.map("/".join).filter(bool))
@example(name="a" * 256)
def test_any_static_name_is_a_file_or_a_404(name: str) -> None:
    try:
        answer = asyncio.run(static(name))
    except ApiError as refused:
        assert refused.status == 404
    else:
        assert Path(answer.path).resolve().is_relative_to(STATIC_DIR.resolve())


async def test_every_response_says_nosniff(service: Service) -> None:
    async with service.client() as http:
        answers = [
            await http.get("/health"),
            await http.get("/api/files"),  # 401
            await http.get("/no/such/route"),  # 404
            await http.post("/api/session", json={}),  # 4xx
            await http.get("/"),
        ]
    for response in answers:
        assert response.headers.get("x-content-type-options") == "nosniff", response.url


async def test_files_are_searched_by_name_prefix(service: Service) -> None:
    async with service.client() as http:
        for name in ("Report-2024.pdf", "report-2025.pdf", "photo.jpg", "rep.txt"):
            answer = await http.put(f"/api/files/{name}", content=b"x", headers=service.auth)
            assert answer.status_code == 201

        async def names(**params: Any) -> list[str]:
            response = await http.get("/api/files", params=params, headers=service.auth)
            assert response.status_code == 200, response.text
            return sorted(item["file_name"] for item in response.json()["items"])

        assert await names(prefix="report") == ["Report-2024.pdf", "report-2025.pdf"]
        assert await names(prefix="rep") == ["Report-2024.pdf", "rep.txt", "report-2025.pdf"]
        assert await names(prefix="%") == []
        assert len(await names()) == 4
        # Pages of a search follow each other without repeats.
        first = await http.get(
            "/api/files", params={"prefix": "rep", "limit": 2}, headers=service.auth
        )
        body = first.json()
        second = await http.get(
            "/api/files",
            params={"prefix": "rep", "limit": 2, "cursor": body["next_cursor"]},
            headers=service.auth,
        )
        seen = [i["file_name"] for i in body["items"] + second.json()["items"]]
        assert sorted(seen) == ["Report-2024.pdf", "rep.txt", "report-2025.pdf"]
        assert second.json()["next_cursor"] is None


async def test_status_shows_every_bot_what_they_sent_and_the_gc_backlog(
    start_service: ServiceFactory,
) -> None:
    # One attempt per deletion: a refused one goes back to the ledger at once
    # (for a later round) instead of being retried within the GC's round.
    service = await start_service(upload_buffer_chunks=5, max_attempts=1)
    async with service.client() as http:
        assert (await http.get("/api/status")).status_code == 401
        stored = await http.put(
            "/api/files/big.bin", content=payload(6 * CHUNK), headers=service.auth
        )
        assert stored.status_code == 201
        # Deleted while Telegram refuses deletions: its six messages wait in
        # the GC's ledger.
        service.sim.set_method_faults("deleteMessage", fault_5xx_rate=1.0)
        gone = await http.delete(f"/api/files/{stored.json()['public_id']}", headers=service.auth)
        assert gone.status_code == 204

        async def status_now() -> dict[str, Any]:
            response = await http.get("/api/status", headers=service.auth)
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        async def backlog_shown() -> bool:
            return (await status_now())["gc_backlog"] == 6

        await eventually(backlog_shown)
        status = await status_now()

    assert sorted(bot["bot_id"] for bot in status["bots"]) == sorted(
        int(token.split(":")[0]) for token in service.sim.tokens
    )
    assert all(bot["usable"] and bot["username"] for bot in status["bots"])
    assert sum(bot["recent_bytes"] for bot in status["bots"]) == 6 * CHUNK
    assert sum(bot["recent_sends"] for bot in status["bots"]) == 6
    assert status["upload_budget"]["buffers"] == 5
    assert status["upload_budget"]["spool_enabled"] is True
    # The last point runs up to now and saw the upload.
    assert status["throughput"], "no throughput point"
    assert max(p["upload_bytes_per_second"] for p in status["throughput"]) > 0


def _s3(service: Service) -> BaseClient:
    return boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


async def test_buckets_are_browsed_by_folder(start_service: ServiceFactory) -> None:
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    s3 = _s3(service)
    await asyncio.to_thread(s3.create_bucket, Bucket="photos")
    for key in ("2024/a.jpg", "2024/b.jpg", "2025/c.jpg", "top.txt"):
        await asyncio.to_thread(s3.put_object, Bucket="photos", Key=key, Body=key.encode())

    async with service.client(headers=service.auth) as http:
        buckets = await http.get("/api/buckets")
        root = await http.get("/api/buckets/photos")
        inner = await http.get("/api/buckets/photos", params={"prefix": "2024/", "limit": 1})
        rest = await http.get(
            "/api/buckets/photos",
            params={"prefix": "2024/", "limit": 1, "after": inner.json()["next_after"]},
        )
        missing = await http.get("/api/buckets/nope")
        writes = await http.post("/api/buckets/photos")

        assert [b["name"] for b in buckets.json()] == ["photos"]
        assert root.json()["folders"] == ["2024/", "2025/"]
        assert [o["key"] for o in root.json()["objects"]] == ["top.txt"]
        assert [o["key"] for o in inner.json()["objects"]] == ["2024/a.jpg"]
        assert [o["key"] for o in rest.json()["objects"]] == ["2024/b.jpg"]
        assert rest.json()["next_after"] is None
        assert missing.status_code == 404
        assert writes.status_code == 405  # read-only

    # The links are short-lived presigned S3 URLs, never permanent /f/ links:
    # they work without a key or a cookie, and are refused once tampered with.
    link = root.json()["objects"][0]["download_url"]
    assert "/f/" not in link
    assert link.startswith(f"{service.url}/photos/top.txt?")
    query = parse_qs(urlsplit(link).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert int(query["X-Amz-Expires"][0]) == BROWSE_LINK_SECONDS <= 3600
    async with service.client() as anonymous:
        fetched = await anonymous.get(link)
        forged = await anonymous.get(link.replace("top.txt", "2025/c.jpg"))
    assert fetched.status_code == 200
    assert fetched.content == b"top.txt"
    assert fetched.headers["content-disposition"].startswith("attachment")
    assert forged.status_code == 403


async def test_a_key_with_bidi_controls_keeps_them_and_its_link_shows_them(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    s3 = _s3(service)
    await asyncio.to_thread(s3.create_bucket, Bucket="mail")
    spoofed = "invoice\u202egnp.exe"
    await asyncio.to_thread(s3.put_object, Bucket="mail", Key=spoofed, Body=b"x")
    async with service.client(headers=service.auth) as http:
        listed = (await http.get("/api/buckets/mail")).json()["objects"]
    # The key round-trips exactly (S3 clients need it); the saved name spells it out.
    assert [o["key"] for o in listed] == [spoofed]
    async with service.client() as anonymous:
        fetched = await anonymous.get(listed[0]["download_url"])
    assert fetched.status_code == 200
    assert fetched.headers["content-disposition"] == 'attachment; filename="invoice[U+202E]gnp.exe"'


@pytest.mark.parametrize("scope", ["read", "write"])
async def test_buckets_need_an_admin_key(start_service: ServiceFactory, scope: KeyScope) -> None:
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    await asyncio.to_thread(_s3(service).create_bucket, Bucket="registry")
    key = await create_api_key(service.settings.database_url, name=scope, scope=scope)
    async with service.client(headers={"Authorization": f"Bearer {key}"}) as http:
        signed_in = await http.post("/api/session", json={"key": key})
        answers = [await http.get("/api/buckets"), await http.get("/api/buckets/registry")]
        cookie = http.cookies.get("teleuploader_session")
        assert cookie is not None
        http.headers.pop("Authorization")
        answers.append(await http.get("/api/buckets"))  # by the page's cookie

    for response in answers:
        assert response.status_code == 403, response.text
        assert "`admin`" in response.json()["detail"]
        assert "registry" not in response.text
    # The page does not offer what the key may not do.
    assert signed_in.status_code == 200
    assert signed_in.json()["may_browse_buckets"] is False


async def test_an_admin_signed_in_on_the_page_browses_the_buckets(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET})
    await asyncio.to_thread(_s3(service).create_bucket, Bucket="registry")
    async with service.client() as http:
        signed_in = await http.post("/api/session", json={"key": service.key})
        listed = await http.get("/api/buckets")
    assert signed_in.json()["may_browse_buckets"] is True
    assert [b["name"] for b in listed.json()] == ["registry"]


async def test_buckets_answer_404_while_the_s3_api_is_off(service: Service) -> None:
    async with service.client(headers=service.auth) as http:
        response = await http.get("/api/buckets")
    assert response.status_code == 404
    assert "S3_CREDENTIALS" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/api/buckets", "/api/status"])
async def test_page_data_needs_a_key(service: Service, path: str) -> None:
    async with service.client() as http:
        response = await http.get(path)
    assert response.status_code == 401
    assert re.search("API key", response.json()["detail"])
