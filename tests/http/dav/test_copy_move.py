"""COPY and MOVE through /dav/ (app/http/dav/copy_move.py): whole folders,
metadata only (no message more in Telegram), atomic, Overwrite and
Destination as RFC 4918 says."""

from __future__ import annotations

from collections.abc import Awaitable

import httpx
import pytest

from tests.http.dav.conftest import DavService
from tests.running_service import payload

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Over the service's inline threshold, and several chunks of its 64 KiB: in Telegram.
BIG = 200_000


async def _public_ids(dav_service: DavService, prefix: str) -> dict[str, str]:
    async with dav_service.service.client(headers=dav_service.service.auth) as native:
        items = (await native.get("/api/files", params={"prefix": prefix})).json()["items"]
    return {item["file_name"]: item["public_id"] for item in items}


async def _tree(dav_service: DavService, root: str) -> None:
    async with dav_service.client() as http:
        for folder in (root, f"{root}/sub", f"{root}/empty"):
            assert (await http.request("MKCOL", f"/dav/{folder}/")).status_code == 201
        assert (
            await http.put(f"/dav/{root}/cm-big.bin", content=payload(BIG, 1))
        ).status_code == 201
        assert (
            await http.put(f"/dav/{root}/sub/cm-small.txt", content=b"small")
        ).status_code == 201


async def test_a_folder_moves_whole_without_a_byte_to_telegram(dav_service: DavService) -> None:
    await _tree(dav_service, "cm-src")
    ids = await _public_ids(dav_service, "cm-")
    messages = dav_service.service.live_messages()
    async with dav_service.client() as http:
        moved = await http.request(
            "MOVE", "/dav/cm-src/", headers={"Destination": f"{dav_service.url}/dav/cm-dst/"}
        )
        gone = await http.request("PROPFIND", "/dav/cm-src/", headers={"Depth": "0"})
        big = await http.get("/dav/cm-dst/cm-big.bin")
        small = await http.get("/dav/cm-dst/sub/cm-small.txt")
        empty = await http.request("PROPFIND", "/dav/cm-dst/empty/", headers={"Depth": "0"})
    assert moved.status_code == 201
    assert gone.status_code == 404
    assert big.content == payload(BIG, 1) and small.content == b"small"
    assert empty.status_code == 207
    assert dav_service.service.live_messages() == messages
    assert await _public_ids(dav_service, "cm-") == ids, "moved files keep their /f/ links"


async def test_a_folder_copy_is_metadata_only(dav_service: DavService) -> None:
    await _tree(dav_service, "cm-orig")
    messages = dav_service.service.live_messages()
    async with dav_service.client() as http:
        copied = await http.request(
            "COPY", "/dav/cm-orig/", headers={"Destination": "/dav/cm-copy/"}
        )
        big = await http.get("/dav/cm-copy/cm-big.bin")
        still = await http.get("/dav/cm-orig/cm-big.bin")
        shallow = await http.request(
            "COPY", "/dav/cm-orig/", headers={"Destination": "/dav/cm-shallow/", "Depth": "0"}
        )
        listing = await http.request("PROPFIND", "/dav/cm-shallow/", headers={"Depth": "1"})
    assert copied.status_code == 201 and shallow.status_code == 201
    assert big.content == still.content == payload(BIG, 1)
    assert dav_service.service.live_messages() == messages
    assert listing.text.count("<D:response>") == 1, "Depth 0 copies the folder alone"


async def test_overwrite_and_destination_rules(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        await http.put("/dav/cm-a.txt", content=b"a")
        await http.put("/dav/cm-b.txt", content=b"b")
        await http.request("MKCOL", "/dav/cm-coll/")

        def move(source: str, destination: str, **headers: str) -> Awaitable[httpx.Response]:
            return http.request("MOVE", source, headers={"Destination": destination, **headers})

        assert (await move("/dav/cm-a.txt", "/dav/cm-b.txt", Overwrite="F")).status_code == 412
        assert (await move("/dav/cm-a.txt", "/dav/cm-b.txt")).status_code == 204
        assert (await http.get("/dav/cm-b.txt")).content == b"a"
        assert (await move("/dav/cm-b.txt", "/dav/cm-b.txt")).status_code == 403
        assert (await move("/dav/cm-coll/", "/dav/cm-coll/inside/")).status_code == 403
        assert (await move("/dav/cm-b.txt", "/dav/cm-nowhere/b.txt")).status_code == 409
        assert (await move("/dav/cm-b.txt", "http://elsewhere.example/dav/b")).status_code == 502
        assert (await move("/dav/cm-b.txt", "/dav/cm-b2.txt", Overwrite="maybe")).status_code == 400
        no_destination = await http.request("COPY", "/dav/cm-b.txt")
        assert no_destination.status_code == 400
        # A file over a folder (litmus's "COPY overwrites collection"), and back.
        assert (await move("/dav/cm-b.txt", "/dav/cm-coll/")).status_code == 204
        assert (await http.get("/dav/cm-coll")).content == b"a"
        shallow_move = await move("/dav/cm-coll", "/dav/cm-x/", Depth="0")
        assert shallow_move.status_code == 201, "a file has no depth to refuse"


async def test_rclones_mtime_on_a_move_is_accepted(dav_service: DavService) -> None:
    async with dav_service.client() as http:
        await http.put("/dav/cm-t.txt", content=b"t", headers={"X-OC-Mtime": "1400000000"})
        moved = await http.request(
            "MOVE",
            "/dav/cm-t.txt",
            headers={"Destination": "/dav/cm-t2.txt", "X-OC-Mtime": "1300000000"},
        )
        head = await http.head("/dav/cm-t2.txt")
    assert moved.headers["x-oc-mtime"] == "accepted"
    assert head.headers["last-modified"] == "Sun, 13 Mar 2011 07:06:40 GMT"
