"""LOCK and UNLOCK through /dav/ (app/http/dav/locking.py), and the clients'
flows that need them: Windows' save (PUT of nothing, LOCK, PROPPATCH, PUT
with the token), davfs2's lock of the file it writes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from sqlalchemy import update

from app.db.models import DavLock
from app.db.session import session_scope
from app.db.types import utcnow
from tests.http.dav.conftest import DavService

pytestmark = pytest.mark.asyncio(loop_scope="module")

D = "{DAV:}"
EXCLUSIVE = (
    b'<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope>'
    b"<D:locktype><D:write/></D:locktype><D:owner>tester</D:owner></D:lockinfo>"
)
SHARED = EXCLUSIVE.replace(b"exclusive", b"shared")


def _token(answer_headers: dict[str, str] | object) -> str:
    value = answer_headers["lock-token"]  # type: ignore[index]
    assert value.startswith("<") and value.endswith(">")
    return str(value[1:-1])


async def test_windows_saves_through_a_lock(dav_service: DavService) -> None:
    async with dav_service.client(dav_service.write_key) as http:
        empty = await http.put("/dav/lk-report.docx", content=b"")
        lock = await http.request(
            "LOCK",
            "/dav/lk-report.docx",
            content=EXCLUSIVE,
            headers={"Timeout": "Infinite, Second-4100000000", "Depth": "0"},
        )
        token = _token(lock.headers)
        submitted = {"If": f"(<{token}>)"}
        props = await http.request(
            "PROPPATCH",
            "/dav/lk-report.docx",
            headers=submitted,
            content=b'<D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:schemas-microsoft-com:">'
            b"<D:set><D:prop><Z:Win32FileAttributes>00000020</Z:Win32FileAttributes>"
            b"</D:prop></D:set></D:propertyupdate>",
        )
        refused = await http.put("/dav/lk-report.docx", content=b"content")
        saved = await http.put("/dav/lk-report.docx", content=b"content", headers=submitted)
        unlocked = await http.request(
            "UNLOCK", "/dav/lk-report.docx", headers={"Lock-Token": f"<{token}>"}
        )
        got = await http.get("/dav/lk-report.docx")
    assert empty.status_code == 201 and lock.status_code == 200
    timeout = ET.fromstring(lock.text).findtext(f".//{D}timeout")
    assert timeout == "Second-3600", "the longest lock, whatever was asked"
    assert props.status_code == 207
    assert refused.status_code == 423 and "lock-token-submitted" in refused.text
    assert saved.status_code == 204 and unlocked.status_code == 204
    assert got.content == b"content"


async def test_a_lock_on_a_new_name_makes_an_empty_file(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        lock = await http.request("LOCK", "/dav/lk-new.txt", content=EXCLUSIVE)
        got = await http.get("/dav/lk-new.txt")
        nowhere = await http.request("LOCK", "/dav/lk-none/x.txt", content=EXCLUSIVE)
        unlocked = await http.request(
            "UNLOCK", "/dav/lk-new.txt", headers={"Lock-Token": lock.headers["lock-token"]}
        )
        # davfs2 locks a file it is about to create with If-None-Match: *.
        exists = await http.request(
            "LOCK", "/dav/lk-new.txt", content=EXCLUSIVE, headers={"If-None-Match": "*"}
        )
    assert lock.status_code == 201 and got.status_code == 200 and got.content == b""
    assert nowhere.status_code == 409 and unlocked.status_code == 204
    assert exists.status_code == 412


async def test_a_token_binds_the_key_that_took_it_only(dav_service: DavService) -> None:
    async with dav_service.client(dav_service.write_key) as owner:
        await owner.put("/dav/lk-mine.txt", content=b"x")
        token = _token((await owner.request("LOCK", "/dav/lk-mine.txt", content=EXCLUSIVE)).headers)
    async with dav_service.client() as admin:
        # An admin key may change any file, but not under another key's lock,
        # even holding the token it read from the lock discovery.
        stolen = await admin.put("/dav/lk-mine.txt", content=b"y", headers={"If": f"(<{token}>)"})
        unlock = await admin.request(
            "UNLOCK", "/dav/lk-mine.txt", headers={"Lock-Token": f"<{token}>"}
        )
    assert stolen.status_code == 423 and unlock.status_code == 403
    async with dav_service.client(dav_service.write_key) as owner:
        bogus = await owner.request(
            "UNLOCK", "/dav/lk-mine.txt", headers={"Lock-Token": "<urn:uuid:nothing>"}
        )
        missing = await owner.request("UNLOCK", "/dav/lk-mine.txt")
        done = await owner.request(
            "UNLOCK", "/dav/lk-mine.txt", headers={"Lock-Token": f"<{token}>"}
        )
    assert bogus.status_code == 409 and "lock-token-matches-request-uri" in bogus.text
    assert missing.status_code == 400 and done.status_code == 204


async def test_a_folder_lock_binds_what_is_created_in_it_and_refreshes_from_inside(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        await http.request("MKCOL", "/dav/lk-coll/")
        lock = await http.request(
            "LOCK", "/dav/lk-coll/", content=EXCLUSIVE, headers={"Depth": "infinity"}
        )
        token = _token(lock.headers)
        tagged = {"If": f"<{dav_service.url}/dav/lk-coll/> (<{token}>)"}
        refused = [
            await http.put("/dav/lk-coll/new.txt", content=b"x"),
            await http.request("MKCOL", "/dav/lk-coll/sub/"),
            await http.delete("/dav/lk-coll/"),
        ]
        created = await http.put("/dav/lk-coll/new.txt", content=b"x", headers=tagged)
        refreshed = await http.request("LOCK", "/dav/lk-coll/new.txt", headers=tagged)
        conflict = await http.request("LOCK", "/dav/lk-coll/new.txt", content=SHARED)
        await http.request("UNLOCK", "/dav/lk-coll/", headers={"Lock-Token": f"<{token}>"})
    assert [answer.status_code for answer in refused] == [423, 423, 423]
    assert created.status_code == 201
    assert refreshed.status_code == 200
    assert conflict.status_code == 423 and "no-conflicting-lock" in conflict.text


async def test_shared_locks_share_and_discovery_shows_them(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        await http.put("/dav/lk-shared.txt", content=b"x")
        first = await http.request("LOCK", "/dav/lk-shared.txt", content=SHARED)
        second = await http.request("LOCK", "/dav/lk-shared.txt", content=SHARED)
        exclusive = await http.request("LOCK", "/dav/lk-shared.txt", content=EXCLUSIVE)
        discovery = await http.request(
            "PROPFIND",
            "/dav/lk-shared.txt",
            headers={"Depth": "0"},
            content=b'<propfind xmlns="DAV:"><prop><lockdiscovery/></prop></propfind>',
        )
        for answer in (first, second):
            await http.request(
                "UNLOCK", "/dav/lk-shared.txt", headers={"Lock-Token": answer.headers["lock-token"]}
            )
    assert first.status_code == second.status_code == 200 and exclusive.status_code == 423
    tokens = {
        element.text
        for element in ET.fromstring(discovery.text).iter(f"{D}locktoken")
        for element in element.iter(f"{D}href")
    }
    assert tokens == {_token(first.headers), _token(second.headers)}
    owners = [owner.text for owner in ET.fromstring(discovery.text).iter(f"{D}owner")]
    assert owners == ["tester", "tester"]


async def test_an_expired_lock_binds_nobody(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        await http.put("/dav/lk-old.txt", content=b"x")
        lock = await http.request("LOCK", "/dav/lk-old.txt", content=EXCLUSIVE)
        services = dav_service.service.app.state.services
        async with session_scope(services.sessionmaker) as session:
            await session.execute(
                update(DavLock)
                .where(DavLock.token == _token(lock.headers))
                .values(expires_at=utcnow())
            )
        put = await http.put("/dav/lk-old.txt", content=b"y")
    assert put.status_code == 204


async def test_lock_bodies_and_headers_that_make_no_lock_are_a_4xx(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        await http.put("/dav/lk-bad.txt", content=b"x")
        answers = [
            await http.request("LOCK", "/dav/lk-bad.txt"),
            await http.request("LOCK", "/dav/lk-bad.txt", headers={"If": "(<urn:uuid:x>)"}),
            await http.request("LOCK", "/dav/lk-bad.txt", content=b"<lockinfo"),
            await http.request(
                "LOCK", "/dav/lk-bad.txt", content=EXCLUSIVE, headers={"Depth": "1"}
            ),
            await http.request("LOCK", "/dav/lk-bad.txt", content=EXCLUSIVE, headers={"If": "(("}),
        ]
    assert [answer.status_code for answer in answers] == [400, 412, 400, 400, 400]
