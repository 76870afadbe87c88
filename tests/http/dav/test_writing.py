"""PUT, MKCOL, DELETE and PROPPATCH through /dav/ (app/http/dav/writing.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime

import pytest

from tests.http.dav.conftest import DavService
from tests.running_service import payload

pytestmark = pytest.mark.asyncio(loop_scope="module")

D = "{DAV:}"
MS = "urn:schemas-microsoft-com:"


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_put_takes_a_chunked_body_with_no_length_as_finder_sends(
    dav_service: DavService,
) -> None:
    body = payload(300_000, seed=11)
    async with dav_service.client() as http:
        put = await http.put("/dav/wr-chunked.bin", content=_chunks(body, 7000))
        again = await http.put("/dav/wr-chunked.bin", content=b"short")
        got = await http.get("/dav/wr-chunked.bin")
    assert put.status_code == 201
    assert put.headers["etag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert again.status_code == 204, "a replacement is no new resource"
    assert got.content == b"short"


async def test_put_keeps_the_native_link_and_the_old_version_in_the_trash(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        await http.put("/dav/wr-link.txt", content=b"one")
        await http.put("/dav/wr-link.txt", content=b"two")
    async with dav_service.service.client(headers=dav_service.service.auth) as native:
        listed = (await native.get("/api/files", params={"prefix": "wr-link"})).json()["items"]
        (item,) = listed
        assert (await native.get(f"/f/{item['public_id']}")).content == b"two"
        trashed = (await native.get("/api/trash")).json()["items"]
    assert "wr-link.txt" in [entry["name"] for entry in trashed]


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/dav/wr-nowhere/file.txt", {}, 409),
        ("/dav/wr-folder/", {}, 405),
        ("/dav/wr-exists.txt", {"If-None-Match": "*"}, 412),
        ("/dav/wr-new.txt", {"If-Match": '"abc"'}, 412),
        ("/dav/wr-md5.txt", {"OC-Checksum": "MD5:00000000000000000000000000000000"}, 400),
    ],
)
async def test_put_refusals(
    dav_service: DavService, path: str, headers: dict[str, str], status: int
) -> None:
    async with dav_service.client() as http:
        await http.request("MKCOL", "/dav/wr-folder/")
        await http.put("/dav/wr-exists.txt", content=b"x")
        answer = await http.put(path, content=b"body", headers=headers)
        missing = await http.get(path)
    assert answer.status_code == status, answer.text
    assert missing.status_code in (404, 405) or path == "/dav/wr-exists.txt"


async def test_a_body_declared_over_the_limit_is_a_413_before_it_is_read(
    dav_service: DavService,
) -> None:
    host, port = dav_service.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    credentials = base64.b64encode(f"x:{dav_service.service.key}".encode()).decode()
    writer.write(
        (
            f"PUT /dav/wr-huge.bin HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Basic {credentials}\r\nContent-Length: {10**12}\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    status = await reader.readline()
    writer.close()
    assert status.split()[1] == b"413"


async def test_mkcol_keeps_an_empty_folder_and_refuses_what_rfc_4918_refuses(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        assert (await http.request("MKCOL", "/dav/wr-mk")).status_code == 201
        assert (await http.request("MKCOL", "/dav/wr-mk/")).status_code == 405
        assert (await http.request("MKCOL", "/dav/wr-none/deep/")).status_code == 409
        body = await http.request("MKCOL", "/dav/wr-body/", content=b"x")
        assert body.status_code == 415
        await http.put("/dav/wr-plain", content=b"x")
        assert (await http.request("MKCOL", "/dav/wr-plain")).status_code == 405
        listed = await http.request("PROPFIND", "/dav/wr-mk/", headers={"Depth": "1"})
    assert listed.status_code == 207
    assert listed.text.count("<D:response>") == 1, "empty, and there"


async def test_delete_sends_a_folder_to_the_trash_and_keeps_its_parent(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        await http.request("MKCOL", "/dav/wr-del/")
        await http.request("MKCOL", "/dav/wr-del/inner/")
        await http.put("/dav/wr-del/inner/a.txt", content=b"a")
        await http.put("/dav/wr-del/inner/b.txt", content=b"b")
        assert (await http.delete("/dav/wr-del/inner/", headers={"Depth": "1"})).status_code == 400
        assert (await http.delete("/dav/wr-del/inner")).status_code == 204
        assert (await http.request("PROPFIND", "/dav/wr-del/inner/a.txt")).status_code == 404
        parent = await http.request("PROPFIND", "/dav/wr-del/", headers={"Depth": "0"})
        assert parent.status_code == 207
        assert (await http.delete("/dav/wr-del/inner")).status_code == 404
        assert (await http.delete("/dav/")).status_code == 403
    async with dav_service.service.client(headers=dav_service.service.auth) as native:
        trashed = {item["name"] for item in (await native.get("/api/trash")).json()["items"]}
    assert {"a.txt", "b.txt"} <= trashed


async def test_deleting_a_folders_last_file_keeps_the_folder(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        await http.request("MKCOL", "/dav/wr-last/")
        await http.request("MKCOL", "/dav/wr-last/implicit/")
        await http.put("/dav/wr-last/implicit/only.txt", content=b"x")
        assert (await http.delete("/dav/wr-last/implicit/only.txt")).status_code == 204
        answer = await http.request("PROPFIND", "/dav/wr-last/implicit", headers={"Depth": "0"})
    assert answer.status_code == 207


async def test_proppatch_of_a_live_property_changes_nothing(dav_service: DavService) -> None:
    body = (
        b'<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><D:getetag>"x"</D:getetag>'
        b'<x:note xmlns:x="urn:test">kept?</x:note></D:prop></D:set></D:propertyupdate>'
    )
    async with dav_service.client() as http:
        await http.put("/dav/wr-live.txt", content=b"x")
        answer = await http.request("PROPPATCH", "/dav/wr-live.txt", content=body)
        after = await http.request(
            "PROPFIND",
            "/dav/wr-live.txt",
            headers={"Depth": "0"},
            content=b'<propfind xmlns="DAV:"><prop><note xmlns="urn:test"/></prop></propfind>',
        )
    assert answer.status_code == 207
    statuses = {
        child.tag: propstat.findtext(f"{D}status")
        for propstat in ET.fromstring(answer.text).iter(f"{D}propstat")
        for child in propstat.find(f"{D}prop") or []
    }
    assert statuses == {
        f"{D}getetag": "HTTP/1.1 403 Forbidden",
        "{urn:test}note": "HTTP/1.1 424 Failed Dependency",
    }
    assert "404" in after.text and "kept?" not in after.text


async def test_windows_times_are_kept_and_the_modification_time_shown(
    dav_service: DavService,
) -> None:
    body = (
        f'<D:propertyupdate xmlns:D="DAV:" xmlns:Z="{MS}"><D:set><D:prop>'
        "<Z:Win32CreationTime>Wed, 01 Jan 2025 10:00:00 GMT</Z:Win32CreationTime>"
        "<Z:Win32LastModifiedTime>Thu, 02 Jan 2025 11:30:00 GMT</Z:Win32LastModifiedTime>"
        "<Z:Win32FileAttributes>00000020</Z:Win32FileAttributes>"
        "</D:prop></D:set></D:propertyupdate>"
    ).encode()
    async with dav_service.client() as http:
        await http.put("/dav/wr-windows.docx", content=b"doc")
        assert (
            await http.request("PROPPATCH", "/dav/wr-windows.docx", content=body)
        ).status_code == 207
        answer = await http.request("PROPFIND", "/dav/wr-windows.docx", headers={"Depth": "0"})
    document = ET.fromstring(answer.text)
    assert document.findtext(f".//{{{MS}}}Win32FileAttributes") == "00000020"
    modified = document.findtext(f".//{D}getlastmodified") or ""
    assert parsedate_to_datetime(modified).isoformat() == "2025-01-02T11:30:00+00:00"


async def test_property_limits_have_numbers(dav_service: DavService) -> None:
    big = b"x" * (64 * 1024 + 1)
    many = b"".join(b"<p%d xmlns='urn:m'>v</p%d>" % (n, n) for n in range(201))
    async with dav_service.client() as http:
        await http.put("/dav/wr-limits.txt", content=b"x")
        too_big = await http.request(
            "PROPPATCH",
            "/dav/wr-limits.txt",
            content=b"<propertyupdate xmlns='DAV:'><set><prop><p xmlns='urn:m'>"
            + big
            + b"</p></prop></set></propertyupdate>",
        )
        too_many = await http.request(
            "PROPPATCH",
            "/dav/wr-limits.txt",
            content=b"<propertyupdate xmlns='DAV:'><set><prop>"
            + many
            + b"</prop></set></propertyupdate>",
        )
    assert too_big.status_code == 413 and "65536 bytes" in too_big.text
    assert too_many.status_code == 507 and "200 properties" in too_many.text
