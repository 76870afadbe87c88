"""The WebDAV face as a whole (app/http/dav/app.py, auth.py): where it
answers, who may do what, and how it refuses."""

from __future__ import annotations

import base64

import pytest

from app.store.key_failures import CREDENTIAL_PREFIX, FAILURES_PER_CREDENTIAL
from tests.http.dav.conftest import DavService

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROPFIND_0 = {"Depth": "0"}


async def test_options_says_class_2_without_a_key(dav_service: DavService) -> None:
    async with dav_service.service.client() as http:
        answer = await http.options("/dav/")
    assert answer.status_code == 200
    assert answer.headers["dav"] == "1, 2"
    assert answer.headers["ms-author-via"] == "DAV"
    assert "PROPFIND" in answer.headers["allow"] and "LOCK" in answer.headers["allow"]


async def test_the_root_without_its_slash_answers_and_is_not_redirected(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        answer = await http.request("PROPFIND", "/dav", headers=PROPFIND_0)
    assert answer.status_code == 207
    assert "<D:href>/dav/</D:href>" in answer.text


async def test_a_key_is_the_basic_password_with_any_user_name_or_bearer(
    dav_service: DavService,
) -> None:
    key = dav_service.read_key
    async with dav_service.service.client() as http:
        for user in ("", "alice", "ünïcode"):
            token = base64.b64encode(f"{user}:{key}".encode()).decode()
            basic = await http.request(
                "PROPFIND", "/dav/", headers={**PROPFIND_0, "Authorization": f"Basic {token}"}
            )
            assert basic.status_code == 207, user
        bearer = await http.request(
            "PROPFIND", "/dav/", headers={**PROPFIND_0, "Authorization": f"Bearer {key}"}
        )
        assert bearer.status_code == 207


@pytest.mark.parametrize(
    "authorization",
    [None, "Basic " + base64.b64encode(b"me:tu_wrong").decode(), "Basic !!!", "Digest x=1"],
)
async def test_no_key_or_a_wrong_one_is_a_401_that_asks_for_basic(
    dav_service: DavService, authorization: str | None
) -> None:
    headers = dict(PROPFIND_0)
    if authorization is not None:
        headers["Authorization"] = authorization
    async with dav_service.service.client() as http:
        answer = await http.request("PROPFIND", "/dav/", headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Basic realm=")
    assert "<D:error" in answer.text and "tu_wrong" not in answer.text


async def test_wrong_basic_passwords_are_limited_as_every_key_check_is(
    dav_service: DavService,
) -> None:
    # A drive client retries a wrong password over and over: past the limit
    # its address gets 429 for that key's start, as every route answers
    # (docs/security.md, "Failed key checks"); elsewhere the key works.
    key = dav_service.service.key
    guess = f"{key[:CREDENTIAL_PREFIX]}{'z' * 30}"
    address = {"X-Forwarded-For": "203.0.113.77"}
    async with dav_service.service.client() as http:
        answers = [
            await http.request(
                "PROPFIND", "/dav/", headers=address | PROPFIND_0, auth=("me", f"{guess}{n:04d}")
            )
            for n in range(FAILURES_PER_CREDENTIAL + 1)
        ]
        right_elsewhere = await http.request(
            "PROPFIND",
            "/dav/",
            headers={"X-Forwarded-For": "203.0.113.78"} | PROPFIND_0,
            auth=("me", key),
        )
    assert [a.status_code for a in answers[:-1]] == [401] * FAILURES_PER_CREDENTIAL
    assert answers[-1].status_code == 429, answers[-1].text
    assert int(answers[-1].headers["retry-after"]) >= 1
    assert right_elsewhere.status_code == 207


async def test_a_read_key_reads_and_cannot_write(dav_service: DavService) -> None:
    async with dav_service.client() as admin:
        assert (await admin.put("/dav/app-read.txt", content=b"x")).status_code == 201
    async with dav_service.client(dav_service.read_key) as reader:
        assert (await reader.get("/dav/app-read.txt")).content == b"x"
        for method, extra in [
            ("PUT", {}),
            ("DELETE", {}),
            ("MKCOL", {}),
            ("PROPPATCH", {}),
            ("LOCK", {}),
            ("MOVE", {"Destination": f"{dav_service.url}/dav/y"}),
        ]:
            answer = await reader.request(method, "/dav/app-read.txt", headers=extra)
            assert answer.status_code == 403, method
            assert "`write` scope" in answer.text


async def test_a_write_key_changes_only_its_own_files(dav_service: DavService) -> None:
    async with dav_service.client(dav_service.other_write_key) as owner:
        assert (await owner.put("/dav/app-theirs.txt", content=b"mine")).status_code == 201
    async with dav_service.client(dav_service.write_key) as other:
        assert (await other.put("/dav/app-theirs.txt", content=b"x")).status_code == 403
        assert (await other.delete("/dav/app-theirs.txt")).status_code == 403
        moved = await other.request(
            "MOVE", "/dav/app-theirs.txt", headers={"Destination": "/dav/app-stolen.txt"}
        )
        assert moved.status_code == 403
        copied = await other.request(
            "COPY", "/dav/app-theirs.txt", headers={"Destination": "/dav/app-copied.txt"}
        )
        assert copied.status_code == 201, "reading it is allowed: the copy is the copier's"
        assert (await other.delete("/dav/app-copied.txt")).status_code == 204
        assert (await other.get("/dav/app-theirs.txt")).content == b"mine"
    async with dav_service.client() as admin:
        assert (await admin.delete("/dav/app-theirs.txt")).status_code == 204


async def test_s3_buckets_are_not_shown_even_to_an_admin_key(dav_service: DavService) -> None:
    """docs/security.md: /dav/ is the native files only."""
    async with dav_service.client() as admin:
        answer = await admin.request("PROPFIND", "/dav/", headers={"Depth": "1"})
    assert answer.status_code == 207
    assert "_native" not in answer.text and "/dav/named/" not in answer.text


async def test_an_unknown_method_is_a_405_with_allow(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        answer = await http.request("PATCH", "/dav/x")
    assert answer.status_code == 405
    assert "MKCOL" in answer.headers["allow"]


@pytest.mark.parametrize("path", ["/dav/a%ff", "/dav/a%2F..%2Fb", "/dav/a%01b"])
async def test_paths_no_file_can_have_are_a_400(dav_service: DavService, path: str) -> None:
    async with dav_service.client() as http:
        answer = await http.request("PROPFIND", path, headers=PROPFIND_0)
    assert answer.status_code == 400


async def test_requests_are_counted_by_method(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        await http.request("PROPFIND", "/dav/", headers=PROPFIND_0)
    async with dav_service.service.client(headers=dav_service.service.auth) as http:
        metrics = await http.get("/metrics")
    assert 'route="dav:propfind"' in metrics.text
