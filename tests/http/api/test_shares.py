"""Share links through HTTP, as curl and scripts use them: making, listing,
changing and revoking them (/api/shares), and what a recipient gets from
/s/{token}: expiry, download counts, passwords and revocation, each alone
and together, checked at every request. One service for the module
(tests/http/shares_service.py)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import structlog
from sqlalchemy import select

from app.db.models import ShareSession
from app.db.session import session_scope
from app.kit.logging import configure_logging
from app.store.shares import PASSWORD_FAILURES_ALLOWED
from tests.http.s3.test_api_boto3 import S3
from tests.http.shares_service import (
    client,
    expire,
    forget_wrong_passwords,
    new_key,
    put,
    share,
    share_of,
    shares_service,
    token_of,
)
from tests.running_service import CHAT_ID, CHUNK, Service, eventually, payload

pytestmark = pytest.mark.asyncio(loop_scope="module")
__all__ = ["shares_service"]

BASIC_RIGHT = "Basic " + base64.b64encode(b"anyone:open sesame").decode()
BASIC_WRONG = "Basic " + base64.b64encode(b":not it").decode()


async def test_a_file_share_page_does_not_count_and_curl_oj_saves_it_once(
    shares_service: Service, tmp_path: Path
) -> None:
    service = shares_service
    data = payload(3 * CHUNK + 11, seed=52)
    file = await put(service, "reports/q3 report.pdf", data)
    made = await share(service, file=file["public_id"])
    assert made["kind"] == "file" and made["name"] == "q3 report.pdf"
    assert made["url"].endswith(f"/s/{token_of(made)}")
    assert made["download_url"] == made["url"] + "/download"

    async with client(service) as http:
        for _ in range(3):
            page = await http.get(made["url"])
            assert page.status_code == 200
            assert "q3 report.pdf" in page.text and "Download" in page.text
        head = await http.head(made["download_url"])
        assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    assert (await share_of(service, made["id"]))["downloads"] == 0

    # curl -OJ: the name from Content-Disposition, the bytes as stored.
    done = await asyncio.to_thread(
        subprocess.run,
        ["curl", "-sS", "-f", "-OJ", made["download_url"]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "q3 report.pdf").read_bytes() == data
    after = await share_of(service, made["id"])
    assert after["downloads"] == 1 and after["last_download_at"] is not None


async def test_shared_bytes_carry_the_sandbox_policy_of_f(shares_service: Service) -> None:
    service = shares_service
    page = await put(service, "evil.html", b"<script>alert(1)</script>")
    made = await share(service, file=page["public_id"], disposition="inline")
    async with client(service) as http:
        got = await http.get(made["download_url"])
        shown = await http.get(made["url"] + "/view")
        # The main page's preview of a file: /f/ shown inline, as sandboxed.
        previewed = await http.get(f"/f/{page['public_id']}", params={"disposition": "inline"})
        saved = await http.get(f"/f/{page['public_id']}")
    for answer in (got, shown, previewed):
        assert answer.headers["content-security-policy"] == "default-src 'none'; sandbox"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["content-disposition"].startswith("inline")
    assert saved.headers["content-disposition"].startswith("attachment")


async def test_ten_range_requests_of_one_player_count_as_one(shares_service: Service) -> None:
    service = shares_service
    data = payload(4 * CHUNK, seed=1)
    made = await share(service, file=(await put(service, "movie.mp4", data))["public_id"])
    step = len(data) // 10
    async with client(service, agent="a video player") as http:
        for index in range(10):
            start = index * step
            answer = await http.get(
                made["download_url"], headers={"Range": f"bytes={start}-{start + step - 1}"}
            )
            assert answer.status_code == 206
            assert answer.content == data[start : start + step]
    assert (await share_of(service, made["id"]))["downloads"] == 1
    # Another downloader (another User-Agent from the same address) is another download.
    async with client(service, agent="another player") as http:
        assert (
            await http.get(made["download_url"], headers={"Range": "bytes=0-9"})
        ).status_code == 206
    assert (await share_of(service, made["id"]))["downloads"] == 2


async def test_one_downloader_fetching_the_file_again_and_again_counts_again(
    shares_service: Service,
) -> None:
    service = shares_service
    data = payload(CHUNK + 1, seed=8)
    made = await share(service, file=(await put(service, "again.bin", data))["public_id"])
    async with client(service, agent="a loop") as http:
        for round_ in range(1, 4):
            assert (await http.get(made["download_url"])).content == data
            await eventually(lambda n=round_: _bytes_sent(service, n * len(data)))
        assert (await share_of(service, made["id"]))["downloads"] == 1
        # Three times its size sent: the session is spent, the next is a new download.
        assert (await http.get(made["download_url"])).content == data
    assert (await share_of(service, made["id"]))["downloads"] == 2


async def _bytes_sent(service: Service, expected: int) -> bool:
    services = service.app.state.services
    async with session_scope(services.sessionmaker) as session:
        sent = await session.scalars(select(ShareSession.bytes_sent))
    return expected in set(sent)


async def test_max_downloads_refuses_the_next_download_but_not_the_one_under_way(
    shares_service: Service,
) -> None:
    service = shares_service
    data = payload(2 * CHUNK, seed=2)
    made = await share(
        service, file=(await put(service, "once.bin", data))["public_id"], max_downloads=1
    )
    async with client(service, agent="first") as first, client(service, agent="second") as second:
        assert (
            await first.get(made["download_url"], headers={"Range": "bytes=0-99"})
        ).status_code == 206
        # Used up for anyone else, and its page says so.
        refused = await second.get(made["download_url"])
        assert refused.status_code == 410 and "used up" in refused.text
        assert (await second.get(made["url"])).status_code == 410
        # The download that counted goes on seeking.
        more = await first.get(made["download_url"], headers={"Range": "bytes=100-199"})
        assert more.status_code == 206 and more.content == data[100:200]
    assert (await share_of(service, made["id"]))["state"] == "exhausted"
    # Raising the limit brings it back.
    async with service.client() as http:
        raised = await http.patch(
            f"/api/shares/{made['id']}", json={"max_downloads": 2}, headers=service.auth
        )
    assert raised.status_code == 200 and raised.json()["state"] == "active"
    async with client(service, agent="second") as second:
        assert (await second.get(made["download_url"])).content == data


async def test_expiry_and_revocation_stop_a_download_at_its_next_request(
    shares_service: Service,
) -> None:
    service = shares_service
    data = payload(4 * CHUNK, seed=3)
    file = await put(service, "long.bin", data)
    expiring = await share(service, file=file["public_id"], expires_in=3600)
    revoked = await share(service, file=file["public_id"])
    async with client(service) as http:
        for made, stop, status, words in (
            (expiring, lambda m: expire(service, m["id"]), 410, "expired"),
            (revoked, lambda m: _revoke(service, m["id"]), 404, "revoked"),
        ):
            async with http.stream("GET", made["download_url"]) as answer:
                assert answer.status_code == 200
                first = await anext(answer.aiter_bytes())
                assert first and data.startswith(first)
                await stop(made)
                nxt = await http.get(made["download_url"], headers={"Range": "bytes=1000-"})
                assert nxt.status_code == status and words in nxt.text
            page = await http.get(made["url"])
            assert page.status_code == status and words in page.text
    # An expired share comes back when extended; a revoked one never.
    async with service.client() as http:
        extended = await http.patch(
            f"/api/shares/{expiring['id']}", json={"expires_in": 60}, headers=service.auth
        )
        assert extended.status_code == 200 and extended.json()["state"] == "active"
        gone = await http.patch(
            f"/api/shares/{revoked['id']}", json={"expires_in": 60}, headers=service.auth
        )
        assert gone.status_code == 404
        listed = await http.get("/api/shares", headers=service.auth)
    assert revoked["id"] not in [item["id"] for item in listed.json()["items"]]


async def _revoke(service: Service, share_id: int) -> None:
    async with service.client() as http:
        assert (
            await http.delete(f"/api/shares/{share_id}", headers=service.auth)
        ).status_code == 204


async def test_a_password_is_asked_for_checked_and_never_returned(
    shares_service: Service,
) -> None:
    service = shares_service
    data = b"the password-protected bytes"
    made = await share(
        service, file=(await put(service, "secret.txt", data))["public_id"], password="open sesame"
    )
    assert made["has_password"] is True
    async with service.client() as http:
        listed = await http.get("/api/shares", headers=service.auth)
    text = json.dumps(made) + listed.text
    assert "open sesame" not in text and "argon2" not in text
    assert not any("password_hash" in item or "password" in item for item in listed.json()["items"])

    async with client(service) as http:
        locked = await http.get(made["download_url"])
        assert locked.status_code == 401
        assert locked.headers["www-authenticate"].startswith("Basic")
        assert data not in locked.content
        wrong = await http.get(made["download_url"], headers={"Authorization": BASIC_WRONG})
        assert wrong.status_code == 401
        page = await http.get(made["url"])
        assert page.status_code == 200 and "needs a password" in page.text
        right = await http.get(made["download_url"], headers={"Authorization": BASIC_RIGHT})
        assert right.status_code == 200 and right.content == data
    # The password's form: a cookie for this share's path alone.
    async with client(service, follow_redirects=False) as http:
        token = token_of(made)
        unlocked = await http.post(f"/s/{token}/unlock", data={"password": "open sesame"})
        assert unlocked.status_code == 303
        cookie = unlocked.headers["set-cookie"]
        assert f"Path=/s/{token}" in cookie and "HttpOnly" in cookie
        assert "samesite=lax" in cookie.lower()
        assert (await http.get(made["download_url"])).content == data
        # Another site's form post is refused.
        foreign = await http.post(
            f"/s/{token}/unlock",
            data={"password": "open sesame"},
            headers={"Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403
    # Changing the password ends what the old one unlocked.
    async with service.client() as http:
        await http.patch(
            f"/api/shares/{made['id']}", json={"password": "another"}, headers=service.auth
        )
    async with client(service) as http:
        old = await http.get(made["download_url"], headers={"Authorization": BASIC_RIGHT})
        assert old.status_code == 401


async def test_a_wrong_password_flood_is_limited_per_share_and_per_address(
    shares_service: Service,
) -> None:
    service = shares_service
    await forget_wrong_passwords(service)
    file = await put(service, "guarded.txt", b"guarded")
    target = await share(service, file=file["public_id"], password="open sesame")
    try:
        await _flood(service, target, file)
    finally:
        await forget_wrong_passwords(service)


async def _flood(service: Service, target: dict[str, Any], file: dict[str, Any]) -> None:
    async with client(service) as http:
        for _ in range(PASSWORD_FAILURES_ALLOWED - 1):
            refused = await http.get(target["download_url"], headers={"Authorization": BASIC_WRONG})
            assert refused.status_code == 401
        tenth = await http.get(target["download_url"], headers={"Authorization": BASIC_WRONG})
        assert tenth.status_code == 429 and int(tenth.headers["retry-after"]) > 0
        # Limited, the right password is refused too: a guesser learns nothing.
        right = await http.get(target["download_url"], headers={"Authorization": BASIC_RIGHT})
        assert right.status_code == 429
        form = await http.post(f"/s/{token_of(target)}/unlock", data={"password": "open sesame"})
        assert form.status_code == 429 and "Retry-After" in form.headers
        # The same address is limited on another share too.
        other = await share(service, file=file["public_id"], password="open sesame")
        elsewhere = await http.get(other["download_url"], headers={"Authorization": BASIC_WRONG})
        assert elsewhere.status_code == 429


async def test_expiry_count_and_password_together(shares_service: Service) -> None:
    service = shares_service
    data = payload(CHUNK + 5, seed=4)
    made = await share(
        service,
        file=(await put(service, "all.bin", data))["public_id"],
        password="open sesame",
        max_downloads=2,
        expires_in=3600,
    )
    auth = {"Authorization": BASIC_RIGHT}
    async with client(service, agent="one") as one, client(service, agent="two") as two:
        assert (await one.get(made["download_url"])).status_code == 401  # no password: no count
        assert (await one.get(made["download_url"], headers=auth)).content == data
        assert (await two.get(made["download_url"], headers=auth)).content == data
        async with client(service, agent="three") as three:
            assert (await three.get(made["download_url"], headers=auth)).status_code == 410
        await expire(service, made["id"])
        # Expired beats everything, the session under way included.
        assert (await one.get(made["download_url"], headers=auth)).status_code == 410
    found = await share_of(service, made["id"])
    assert (found["downloads"], found["state"]) == (2, "expired")


async def test_tokens_are_random_and_never_logged(
    shares_service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    service = shares_service
    before = set(service.live_messages())
    file = await put(service, "logged.txt", payload(CHUNK, seed=7))
    made = [await share(service, file=file["public_id"]) for _ in range(20)]
    # Its chunk gone from the chat: serving it fails, and the failure is
    # logged with the request's path.
    for message_id in set(service.live_messages()) - before:
        service.sim.take_down(CHAT_ID, message_id)
    tokens = [token_of(m) for m in made]
    assert len(set(tokens)) == 20
    for token in tokens:
        # 256 bits of the OS's randomness, base64url: nothing of the file in it.
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
        assert file["public_id"] not in token
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    output = io.StringIO()
    configure_logging("INFO", "json", stream=output)
    try:
        token = tokens[0]
        async with client(service) as http:
            await http.get(made[0]["url"])
            failed = await http.get(made[0]["download_url"], headers={"Range": "bytes=0-0"})
            assert failed.status_code >= 500
            await http.get(f"/s/{token}/download/nothing/here")
            await http.get(f"/s/{token}/view", headers={"Range": "bytes=5-1"})  # 416
        # Nothing was sent: nothing counted.
        assert (await share_of(service, made[0]["id"]))["downloads"] == 0
        await _revoke(service, made[0]["id"])
        async with client(service) as http:
            await http.get(made[0]["download_url"])
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        structlog.reset_defaults()
    # The request lines (their logger was bound when the app was made) and
    # the store's: each share request was logged, by its route's template.
    lines = output.getvalue() + capsys.readouterr().out
    assert "route=/s/{token}/download" in lines and "share_revoked" in lines
    # The failure's line names the share by its token's first 4 characters
    # (app/http/shared/route_label.py): enough to find it, not to use it.
    assert f'"path": "/s/{token_of(made[0])[:4]}\\u2026/download"' in lines
    assert token not in lines


async def test_a_folder_is_listed_downloaded_per_file_and_as_one_exact_zip(
    shares_service: Service, tmp_path: Path
) -> None:
    service = shares_service
    files = {
        "trip/a.txt": b"alpha",
        "trip/day 1/b.bin": payload(2 * CHUNK + 3, seed=5),
        "trip/day 1/ü.txt": "ünïcode".encode(),
        "trip/day 2/empty.txt": b"",
        "trip/day 2/deeper/c.bin": payload(CHUNK, seed=6),
    }
    for name, data in files.items():
        await put(service, name, data)
    await put(service, "tripwire.txt", b"not in the folder")
    made = await share(service, folder="trip/")
    assert (made["kind"], made["folder"], made["name"]) == ("folder", "trip/", "trip")
    token = token_of(made)
    async with client(service) as http:
        page = await http.get(made["url"])
        assert page.status_code == 200
        assert "day 1/" in page.text and "a.txt" in page.text and "tripwire" not in page.text
        inner = await http.get(made["url"], params={"path": "day 2/"})
        assert "deeper/" in inner.text and "empty.txt" in inner.text
        assert 'aria-current="page"' in inner.text  # the breadcrumbs end here
        one = await http.get(f"/s/{token}/download/day 1/b.bin")
        assert one.content == files["trip/day 1/b.bin"]
        assert one.headers["content-disposition"] == 'attachment; filename="b.bin"'
        # Keys are names, not paths: ".." climbs nowhere.
        outside = await http.get(f"/s/{token}/download/%2E%2E/tripwire.txt")
        assert outside.status_code == 404
    done = await asyncio.to_thread(
        subprocess.run,
        ["curl", "-sS", "-f", "-OJ", made["download_url"]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    archive = tmp_path / "trip.zip"
    with zipfile.ZipFile(archive) as unzipped:
        assert unzipped.testzip() is None
        got = {info.filename: unzipped.read(info) for info in unzipped.infolist()}
    assert got == files
    tested = await asyncio.to_thread(
        subprocess.run, ["unzip", "-t", str(archive)], capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout
    # Each file, and the zip, is a download of its own.
    assert (await share_of(service, made["id"]))["downloads"] == 2


async def test_a_trashed_file_stops_its_share_and_restoring_it_brings_it_back(
    shares_service: Service,
) -> None:
    service = shares_service
    file = await put(service, "trashed.txt", b"back again")
    live = await share(service, file=file["public_id"])
    expiring = await share(service, file=file["public_id"], expires_in=3600)
    async with service.client() as http:
        deleted = await http.delete(f"/api/files/{file['public_id']}", headers=service.auth)
        assert deleted.status_code == 204
    async with client(service) as http:
        gone = await http.get(live["download_url"])
        assert gone.status_code == 404 and "trash" in gone.text
    assert (await share_of(service, live["id"]))["state"] == "unavailable"
    await expire(service, expiring["id"])
    async with service.client() as http:
        restored = await http.post(f"/api/trash/{file['public_id']}/restore", headers=service.auth)
        assert restored.status_code == 200, restored.text
    async with client(service) as http:
        assert (await http.get(live["download_url"])).content == b"back again"
        assert (await http.get(expiring["download_url"])).status_code == 410


async def test_who_may_share_list_change_and_revoke(shares_service: Service) -> None:
    service = shares_service
    reader, writer, admin = (
        await new_key(service, "read"),
        await new_key(service, "write"),
        await new_key(service, "admin"),
    )
    file = await put(service, "everyone.txt", b"readable")
    by_reader = await share(service, reader, file=file["public_id"])
    assert by_reader["owner"].startswith("read-")
    async with service.client() as http:
        mine = await http.get("/api/shares", headers=writer)
        assert by_reader["id"] not in [item["id"] for item in mine.json()["items"]]
        everyone = await http.get("/api/shares", headers=admin, params={"limit": 1000})
        assert by_reader["id"] in [item["id"] for item in everyone.json()["items"]]
        other = await http.delete(f"/api/shares/{by_reader['id']}", headers=writer)
        assert other.status_code == 404
        assert (
            await http.delete(f"/api/shares/{by_reader['id']}", headers=admin)
        ).status_code == 204
    # An S3 object: only an admin key shares it.
    s3 = S3(service)
    await s3("create_bucket", Bucket="shared-box")
    await s3("put_object", Bucket="shared-box", Key="k.txt", Body=b"s3 bytes")
    services = service.app.state.services
    obj = await services.store.get("shared-box", "k.txt")
    async with service.client() as http:
        refused = await http.post(
            "/api/shares", json={"file": obj.public_id, "bucket": "shared-box"}, headers=writer
        )
        assert refused.status_code == 403
        native_only = await http.post("/api/shares", json={"file": obj.public_id}, headers=admin)
        assert native_only.status_code == 404
    made = await share(service, admin, file=obj.public_id, bucket="shared-box")
    assert made["bucket"] == "shared-box"
    async with client(service) as http:
        assert (await http.get(made["download_url"])).content == b"s3 bytes"


async def test_bad_requests_are_refused_in_words(shares_service: Service) -> None:
    service = shares_service
    file = await put(service, "bad.txt", b"x")
    async with service.client() as http:
        cases = [
            ({"file": file["public_id"], "folder": "a/"}, 400),
            ({}, 400),
            ({"folder": "no-slash"}, 400),
            ({"folder": "empty-folder/"}, 404),
            ({"file": "nope"}, 404),
            ({"file": file["public_id"], "expires_in": 0}, 422),
            ({"file": file["public_id"], "expires_in": 1, "expires_at": "2099-01-01T00:00Z"}, 400),
            ({"file": file["public_id"], "expires_at": "2000-01-01T00:00Z"}, 400),
            ({"file": file["public_id"], "max_downloads": 0}, 422),
            ({"file": file["public_id"], "unknown": 1}, 422),
            ({"file": file["public_id"], "password": "x" * 1025}, 422),
        ]
        for body, status in cases:
            answer = await http.post("/api/shares", json=body, headers=service.auth)
            assert answer.status_code == status, (body, answer.text)
            assert answer.json()["detail"]
        huge = await http.post(
            "/api/shares",
            content=json.dumps({"file": file["public_id"], "pad": "x" * 5000}),
            headers={**service.auth, "Content-Type": "application/json"},
        )
        assert huge.status_code == 413
        anonymous = await http.post("/api/shares", json={"file": file["public_id"]})
        assert anonymous.status_code == 401
        assert (await http.get("/s/not-a-token")).status_code == 404
        assert (await http.get("/s/" + "A" * 43 + "/download")).status_code == 404
