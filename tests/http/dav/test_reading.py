"""PROPFIND, GET and HEAD through /dav/ (app/http/dav/reading.py): what a
file manager, rclone and a media player read."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from email.utils import parsedate_to_datetime

import pytest

from app.http.dav import reading
from tests.http.dav.conftest import DavService
from tests.running_service import payload

pytestmark = pytest.mark.asyncio(loop_scope="module")

D = "{DAV:}"
OC = "{http://owncloud.org/ns}"


def responses(text: str) -> dict[str, ET.Element]:
    """A multistatus's responses by href."""
    document = ET.fromstring(text)
    return {
        response.findtext(f"{D}href", ""): response for response in document.iter(f"{D}response")
    }


def prop(response: ET.Element, name: str) -> ET.Element | None:
    """The property `name` from the response's 200 propstat."""
    for propstat in response.iter(f"{D}propstat"):
        if "200" in propstat.findtext(f"{D}status", ""):
            found = propstat.find(f"{D}prop/{name}")
            if found is not None:
                return found
    return None


@pytest.mark.smoke  # ./scripts/test --quick runs it
async def test_depth_1_lists_a_folders_files_and_folders(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        assert (await http.request("MKCOL", "/dav/rd-list/")).status_code == 201
        assert (await http.request("MKCOL", "/dav/rd-list/empty/")).status_code == 201
        assert (await http.put("/dav/rd-list/a b.txt", content=b"abc")).status_code == 201
        answer = await http.request("PROPFIND", "/dav/rd-list/", headers={"Depth": "1"})
    assert answer.status_code == 207
    found = responses(answer.text)
    assert set(found) == {"/dav/rd-list/", "/dav/rd-list/a%20b.txt", "/dav/rd-list/empty/"}
    folder = prop(found["/dav/rd-list/empty/"], f"{D}resourcetype")
    assert folder is not None and folder.find(f"{D}collection") is not None
    file = found["/dav/rd-list/a%20b.txt"]
    assert prop(file, f"{D}getcontentlength").text == "3"  # type: ignore[union-attr]
    assert prop(file, f"{D}getetag").text == f'"{hashlib.md5(b"abc").hexdigest()}"'  # type: ignore[union-attr]
    assert prop(file, f"{D}displayname").text == "a b.txt"  # type: ignore[union-attr]


async def test_a_large_folder_is_listed_whole_a_page_at_a_time(
    dav_service: DavService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reading, "PAGE", 3)
    names = [f"f{n}" for n in range(8)]
    async with dav_service.client() as http:
        await http.request("MKCOL", "/dav/rd-pages/")
        for name in names:
            await http.put(f"/dav/rd-pages/{name}", content=name.encode())
        await http.request("MKCOL", "/dav/rd-pages/sub/")
        answer = await http.request("PROPFIND", "/dav/rd-pages/", headers={"Depth": "1"})
    assert sorted(responses(answer.text)) == sorted(
        ["/dav/rd-pages/", "/dav/rd-pages/sub/", *(f"/dav/rd-pages/{n}" for n in names)]
    )


async def test_depth_infinity_on_a_folder_is_refused_as_rfc_4918_allows(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        for headers in ({"Depth": "infinity"}, {}):
            answer = await http.request("PROPFIND", "/dav/", headers=headers)
            assert answer.status_code == 403
            assert "propfind-finite-depth" in answer.text


async def test_a_missing_resource_is_a_404_and_a_folder_needs_no_slash(
    dav_service: DavService,
) -> None:
    async with dav_service.client() as http:
        missing = await http.request("PROPFIND", "/dav/rd-nothing", headers={"Depth": "0"})
        await http.request("MKCOL", "/dav/rd-noslash/")
        folder = await http.request("PROPFIND", "/dav/rd-noslash", headers={"Depth": "0"})
    assert missing.status_code == 404
    assert folder.status_code == 207, "Windows names folders without the slash: no redirect"
    assert "/dav/rd-noslash/" in responses(folder.text)


async def test_propname_and_allprop_show_dead_properties_too(dav_service: DavService) -> None:
    patch = (
        b'<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop>'
        b'<x:colour xmlns:x="urn:test">blue</x:colour></D:prop></D:set></D:propertyupdate>'
    )
    async with dav_service.client() as http:
        await http.put("/dav/rd-props.txt", content=b"p")
        assert (
            await http.request("PROPPATCH", "/dav/rd-props.txt", content=patch)
        ).status_code == 207
        names = await http.request(
            "PROPFIND",
            "/dav/rd-props.txt",
            headers={"Depth": "0"},
            content=b'<propfind xmlns="DAV:"><propname/></propfind>',
        )
        every = await http.request("PROPFIND", "/dav/rd-props.txt", headers={"Depth": "0"})
    (named,) = responses(names.text).values()
    assert prop(named, "{urn:test}colour") is not None
    assert prop(named, f"{D}getetag") is not None
    (full,) = responses(every.text).values()
    assert prop(full, "{urn:test}colour").text == "blue"  # type: ignore[union-attr]
    assert prop(full, f"{OC}checksums") is None, "ownCloud's checksums are asked for by name"


async def test_rclones_owncloud_properties_give_the_md5_and_the_client_s_mtime(
    dav_service: DavService,
) -> None:
    body = payload(5000, seed=4)
    request = (
        b'<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop>'
        b"<d:getlastmodified/><d:getcontentlength/><oc:checksums/><oc:permissions/>"
        b"</d:prop></d:propfind>"
    )
    async with dav_service.client() as http:
        put = await http.put(
            "/dav/rd-rclone.bin", content=body, headers={"X-OC-Mtime": "1500000000"}
        )
        assert put.headers["x-oc-mtime"] == "accepted"
        answer = await http.request(
            "PROPFIND", "/dav/rd-rclone.bin", headers={"Depth": "0"}, content=request
        )
        got = await http.get("/dav/rd-rclone.bin")
    (found,) = responses(answer.text).values()
    checksum = found.findtext(f".//{OC}checksums/{OC}checksum")
    assert checksum == f"MD5:{hashlib.md5(body).hexdigest()}"
    modified = prop(found, f"{D}getlastmodified")
    assert (
        modified is not None
        and parsedate_to_datetime(modified.text or "").timestamp() == 1500000000
    )
    assert got.headers["last-modified"] == modified.text
    # rclone reads only the first propstat's status: the 200 comes first.
    statuses = [s.findtext(f"{D}status") for s in found.iter(f"{D}propstat")]
    assert statuses[0] == "HTTP/1.1 200 OK"


async def test_quota_of_the_folder_asked_about(dav_service: DavService) -> None:
    request = (
        b'<propfind xmlns="DAV:"><prop><quota-used-bytes/><quota-available-bytes/></prop>'
        b"</propfind>"
    )
    async with dav_service.client() as http:
        await http.request("MKCOL", "/dav/rd-quota/")
        await http.put("/dav/rd-quota/a", content=b"12345")
        await http.put("/dav/rd-quota/sub-a", content=b"123")
        answer = await http.request(
            "PROPFIND", "/dav/rd-quota/", headers={"Depth": "0"}, content=request
        )
    (found,) = responses(answer.text).values()
    assert prop(found, f"{D}quota-used-bytes").text == "8"  # type: ignore[union-attr]
    assert int(prop(found, f"{D}quota-available-bytes").text or 0) > 0  # type: ignore[union-attr]


async def test_get_serves_ranges_and_conditions_as_the_native_download(
    dav_service: DavService,
) -> None:
    body = payload(200_000, seed=5)
    async with dav_service.client() as http:
        await http.put("/dav/rd-get.bin", content=body)
        whole = await http.get("/dav/rd-get.bin")
        part = await http.get("/dav/rd-get.bin", headers={"Range": "bytes=1000-1999"})
        same = await http.get("/dav/rd-get.bin", headers={"If-None-Match": whole.headers["etag"]})
        head = await http.head("/dav/rd-get.bin")
        folder = await http.get("/dav/")
    assert whole.content == body
    assert whole.headers["content-disposition"].startswith("attachment")
    assert whole.headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert part.status_code == 206 and part.content == body[1000:2000]
    assert part.headers["content-range"] == f"bytes 1000-1999/{len(body)}"
    assert same.status_code == 304
    assert head.status_code == 200 and head.headers["content-length"] == str(len(body))
    assert head.content == b""
    assert folder.status_code == 405


async def test_bad_bodies_and_depths_are_a_400(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        for headers, content in [
            ({"Depth": "0"}, b"<propfind"),
            ({"Depth": "2"}, b""),
            ({"Depth": "0"}, b'<propfind xmlns="DAV:"/>'),
        ]:
            answer = await http.request("PROPFIND", "/dav/", headers=headers, content=content)
            assert answer.status_code == 400, (headers, content)
