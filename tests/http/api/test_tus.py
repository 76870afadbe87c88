"""tus 1.0 at /api/tus/ end to end: real HTTP, a real database (SQLite and
Postgres through pgbouncer), the Telegram simulator behind the bots; the
tuspy client as users run it, and raw HTTP for every status code."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import func, select
from tusclient.client import TusClient

from app.cli.demo import create_api_key
from app.db.engine import create_engine
from app.db.models import Chunk, MultipartUpload, SpooledPart, TusUpload
from app.store import resumable
from app.store.resumable_protocol import UploadState
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

TUS = {"Tus-Resumable": "1.0.0"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def tuspy_upload(service: Service, data: bytes, *, chunk_size: int, **options: object) -> str:
    """Upload with tuspy (blocking: run in a thread); returns the upload URL."""
    client = TusClient(f"{service.url}/api/tus/", headers=service.auth)
    uploader = client.uploader(
        file_stream=io.BytesIO(data),
        chunk_size=chunk_size,
        metadata={"filename": "report.pdf", "filetype": "application/pdf"},
        **options,
    )
    uploader.upload()
    assert uploader.url is not None
    return str(uploader.url)


async def head(service: Service, url: str) -> httpx.Response:
    async with service.client() as http:
        return await http.head(url, headers={**service.auth, **TUS})


async def download(service: Service, url: str) -> bytes:
    async with service.client() as http:
        response = await http.get(url)
    assert response.status_code == 200, response.text
    return response.content


@pytest.mark.smoke  # ./scripts/test --quick runs it
async def test_tuspy_upload_becomes_a_native_file(service: Service) -> None:
    data = payload(5 * CHUNK + 123, seed=1)

    url = await asyncio.to_thread(tuspy_upload, service, data, chunk_size=2 * CHUNK + 7)

    response = await head(service, url)
    assert response.status_code == 200
    assert response.headers["upload-offset"] == str(len(data))
    assert response.headers["upload-length"] == str(len(data))
    public_id = response.headers["x-file-id"]
    assert response.headers["x-file-url"].endswith(f"/f/{public_id}")
    assert await download(service, response.headers["x-file-url"]) == data
    async with service.client() as http:
        info = (await http.get(f"/file/{public_id}/info")).json()
    assert info["file_name"] == "report.pdf"
    assert info["mime_type"] == "application/pdf"
    assert info["size_bytes"] == len(data)


# --- raw HTTP: the protocol, status code by status code ---------------------------

OCTETS = {"Content-Type": "application/offset+octet-stream"}


def tus_headers(service: Service, **extra: str) -> dict[str, str]:
    return {**service.auth, **TUS, **extra}


async def create(service: Service, length: int | None, **extra: str) -> str:
    headers = tus_headers(service, **extra)
    if length is not None:
        headers["Upload-Length"] = str(length)
    async with service.client() as http:
        response = await http.post("/api/tus/", headers=headers)
    assert response.status_code == 201, response.text
    return response.headers["location"]


async def patch(
    service: Service, url: str, offset: int, data: bytes, **extra: str
) -> httpx.Response:
    headers = tus_headers(service, **{**OCTETS, "Upload-Offset": str(offset), **extra})
    async with service.client() as http:
        return await http.patch(url, content=data, headers=headers)


def digest(algorithm: str, data: bytes) -> str:
    return f"{algorithm} {base64.b64encode(hashlib.new(algorithm, data).digest()).decode()}"


async def test_options_announces_version_extensions_and_limits(service: Service) -> None:
    async with service.client() as http:
        response = await http.options("/api/tus/")

    assert response.status_code == 204
    assert response.headers["tus-version"] == "1.0.0"
    assert response.headers["tus-resumable"] == "1.0.0"
    assert set(response.headers["tus-extension"].split(",")) == {
        "creation",
        "creation-with-upload",
        "creation-defer-length",
        "termination",
        "checksum",
        "expiration",
        "concatenation",
    }
    assert response.headers["tus-max-size"] == str(service.settings.max_upload_size)
    assert set(response.headers["tus-checksum-algorithm"].split(",")) == {"sha1", "sha256", "md5"}


@pytest.mark.parametrize(
    "filetype", ["t\u00ebxt/pl\u2713in", "text/plain\r\nX-Evil: 1", "a/" + "b" * 300]
)
async def test_a_filetype_no_header_can_carry_is_replaced_by_a_guess(
    service: Service, filetype: str
) -> None:
    """Upload-Metadata is base64: any text. The type is served back in a
    Content-Type header, so one that cannot be is not kept."""
    data = b"plain words"
    metadata = f"filename {b64('notes.txt')},filetype {b64(filetype)}"
    url = await create(service, len(data), **{"Upload-Metadata": metadata})
    done = await patch(service, url, 0, data)
    assert done.status_code == 204, done.text
    async with service.client() as http:
        response = await http.get(done.headers["x-file-url"])
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"].startswith("text/plain")
    assert "x-evil" not in response.headers


async def test_create_then_head_then_patch_to_completion(service: Service) -> None:
    data = payload(3 * CHUNK + 5, seed=2)
    metadata = f"filename {b64('notes.txt')},filetype {b64('text/plain')},empty"

    url = await create(service, len(data), **{"Upload-Metadata": metadata})
    response = await head(service, url)
    assert response.status_code == 200
    assert response.headers["upload-offset"] == "0"
    assert response.headers["upload-length"] == str(len(data))
    assert response.headers["upload-metadata"] == metadata
    assert response.headers["cache-control"] == "no-store"
    assert "upload-expires" in response.headers
    assert "x-file-id" not in response.headers

    first = await patch(service, url, 0, data[:CHUNK])
    assert first.status_code == 204, first.text
    assert first.headers["upload-offset"] == str(CHUNK)
    assert "x-file-id" not in first.headers
    last = await patch(service, url, CHUNK, data[CHUNK:])
    assert last.status_code == 204, last.text
    assert last.headers["upload-offset"] == str(len(data))

    assert await download(service, last.headers["x-file-url"]) == data
    async with service.client() as http:
        info = (await http.get(f"/file/{last.headers['x-file-id']}/info")).json()
    assert (info["file_name"], info["mime_type"]) == ("notes.txt", "text/plain")
    # The file is listed by the native API like any other.
    async with service.client() as http:
        listed = (await http.get("/api/files", headers=service.auth)).json()
    assert [item["public_id"] for item in listed["items"]] == [last.headers["x-file-id"]]


async def test_missing_or_wrong_tus_resumable_is_412(service: Service) -> None:
    async with service.client() as http:
        unversioned = await http.post("/api/tus/", headers={**service.auth, "Upload-Length": "1"})
        wrong = await http.post(
            "/api/tus/",
            headers={**service.auth, "Upload-Length": "1", "Tus-Resumable": "0.2.2"},
        )
    url = await create(service, 10)
    async with service.client() as http:
        unversioned_head = await http.head(url, headers=service.auth)

    for response in (unversioned, wrong, unversioned_head):
        assert response.status_code == 412
        assert response.headers["tus-version"] == "1.0.0"


async def test_writes_need_a_key(service: Service) -> None:
    url = await create(service, 10)
    async with service.client() as http:
        created = await http.post("/api/tus/", headers={**TUS, "Upload-Length": "1"})
        patched = await http.patch(
            url, content=b"x", headers={**TUS, **OCTETS, "Upload-Offset": "0"}
        )
        deleted = await http.delete(url, headers=TUS)
    assert [created.status_code, patched.status_code, deleted.status_code] == [401, 401, 401]
    assert (await head(service, url)).headers["upload-offset"] == "0"


async def test_another_keys_upload_does_not_exist_for_it(service: Service) -> None:
    url = await create(service, 10)
    other = await create_api_key(service.settings.database_url, name="other")
    headers = {"Authorization": f"Bearer {other}", **TUS}

    async with service.client() as http:
        looked = await http.head(url, headers=headers)
        patched = await http.patch(
            url, content=b"x", headers={**headers, **OCTETS, "Upload-Offset": "0"}
        )
        deleted = await http.delete(url, headers=headers)

    assert [looked.status_code, patched.status_code, deleted.status_code] == [404, 404, 404]
    assert (await head(service, url)).headers["upload-offset"] == "0"


async def test_unknown_upload_is_404(service: Service) -> None:
    async with service.client() as http:
        looked = await http.head("/api/tus/nosuchupload", headers=tus_headers(service))
        patched = await http.patch(
            "/api/tus/nosuchupload",
            content=b"x",
            headers=tus_headers(service, **OCTETS, **{"Upload-Offset": "0"}),
        )
    assert [looked.status_code, patched.status_code] == [404, 404]


async def test_patch_with_the_wrong_content_type_is_415(service: Service) -> None:
    url = await create(service, 10)
    response = await patch(service, url, 0, b"0123456789", **{"Content-Type": "text/plain"})
    assert response.status_code == 415
    assert (await head(service, url)).headers["upload-offset"] == "0"


async def test_patch_at_the_wrong_offset_is_409_and_changes_nothing(service: Service) -> None:
    data = payload(100, seed=3)
    url = await create(service, len(data))
    assert (await patch(service, url, 0, data[:40])).status_code == 204

    behind = await patch(service, url, 0, data[:40])
    ahead = await patch(service, url, 50, data[50:])

    assert [behind.status_code, ahead.status_code] == [409, 409]
    assert (await head(service, url)).headers["upload-offset"] == "40"
    done = await patch(service, url, 40, data[40:])
    assert done.status_code == 204
    assert await download(service, done.headers["x-file-url"]) == data


async def test_method_override_turns_post_into_patch_and_delete(service: Service) -> None:
    data = payload(100, seed=19)
    url = await create(service, len(data))
    async with service.client() as http:
        patched = await http.post(
            url,
            content=data[:60],
            headers=tus_headers(
                service,
                **{**OCTETS, "Upload-Offset": "0", "X-HTTP-Method-Override": "PATCH"},
            ),
        )
        plain = await http.post(url, headers=tus_headers(service))
        deleted = await http.post(
            url, headers=tus_headers(service, **{"X-HTTP-Method-Override": "DELETE"})
        )

    assert patched.status_code == 204, patched.text
    assert patched.headers["upload-offset"] == "60"
    assert plain.status_code == 405
    assert deleted.status_code == 204
    assert (await head(service, url)).status_code == 404


async def test_two_patches_racing_at_one_offset_one_wins_whole(service: Service) -> None:
    first, second = payload(2 * CHUNK, seed=14), payload(2 * CHUNK, seed=15)
    url = await create(service, 2 * CHUNK)

    responses = await asyncio.gather(patch(service, url, 0, first), patch(service, url, 0, second))

    assert sorted(response.status_code for response in responses) == [204, 409]
    winner = next(r for r in responses if r.status_code == 204)
    body = await download(service, winner.headers["x-file-url"])
    assert body in (first, second)
    await eventually(lambda: _spool_is_empty(service))


async def test_a_patch_overtaken_by_one_that_completes_the_upload_is_409(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race above, in its rarer order, made certain: the late PATCH has
    landed its bytes when the other one completes the upload."""
    first, second = payload(2 * CHUNK, seed=18), payload(2 * CHUNK, seed=19)
    url = await create(service, 2 * CHUNK)
    landed, overtaken = asyncio.Event(), asyncio.Event()
    record = resumable.ResumableStore._record

    async def record_the_first_late(
        uploads: resumable.ResumableStore, *args: Any, **kwargs: Any
    ) -> UploadState:
        if not landed.is_set():
            landed.set()
            await overtaken.wait()
        return await record(uploads, *args, **kwargs)

    monkeypatch.setattr(resumable.ResumableStore, "_record", record_the_first_late)
    late = asyncio.create_task(patch(service, url, 0, second))
    try:
        # Bounded: a late PATCH answered before it records would never set it.
        await asyncio.wait_for(landed.wait(), timeout=10)
        winner = await patch(service, url, 0, first)
    finally:
        overtaken.set()  # never leave the held handler waiting
    loser = await late

    assert winner.status_code == 204
    assert loser.status_code == 409, loser.text
    assert f"offset {2 * CHUNK}" in loser.json()["detail"]
    assert await download(service, winner.headers["x-file-url"]) == first
    await eventually(lambda: _spool_is_empty(service))


async def test_a_body_past_the_upload_length_is_400(service: Service) -> None:
    url = await create(service, 10)
    response = await patch(service, url, 0, b"x" * 11)
    assert response.status_code == 400
    assert "past the end" in response.json()["detail"]
    assert (await head(service, url)).headers["upload-offset"] == "0"


async def test_malformed_creation_requests_are_400(service: Service) -> None:
    async with service.client() as http:
        neither = await http.post("/api/tus/", headers=tus_headers(service))
        both = await http.post(
            "/api/tus/",
            headers=tus_headers(service, **{"Upload-Length": "5", "Upload-Defer-Length": "1"}),
        )
        negative = await http.post(
            "/api/tus/", headers=tus_headers(service, **{"Upload-Length": "-5"})
        )
        metadata = await http.post(
            "/api/tus/",
            headers=tus_headers(
                service, **{"Upload-Length": "5", "Upload-Metadata": "filename not-base64!"}
            ),
        )
    for response in (neither, both, negative, metadata):
        assert response.status_code == 400, response.text
        assert response.json()["detail"]


# Headers are read as latin-1: b"\xb2" is "²", which str.isdigit() takes for a
# digit and int() refuses; int() also refuses more than 4,300 digits.
ODD_NUMBERS = [b"\xb2", b"1" * 4301, b"1_0", b"+5", b"0x10", b""]


@pytest.mark.parametrize("number", ODD_NUMBERS)
async def test_an_odd_number_in_upload_length_or_offset_is_400(
    service: Service, number: bytes
) -> None:
    url = await create(service, 10)
    async with service.client() as http:
        created = await http.post(
            "/api/tus/", headers={**tus_headers(service), "Upload-Length": number}
        )
        patched = await http.patch(
            url, content=b"x", headers={**tus_headers(service, **OCTETS), "Upload-Offset": number}
        )
    for response in (created, patched):
        assert response.status_code == 400, response.text
        assert "must be a non-negative integer" in response.json()["detail"]
    assert (await head(service, url)).headers["upload-offset"] == "0"


async def test_upload_over_the_size_limit_is_413(service: Service) -> None:
    limit = service.settings.max_upload_size
    async with service.client() as http:
        response = await http.post(
            "/api/tus/", headers=tus_headers(service, **{"Upload-Length": str(limit + 1)})
        )
    assert response.status_code == 413
    assert str(limit) in response.json()["detail"]
    assert "MAX_UPLOAD_SIZE" in response.json()["detail"]


async def test_deferred_length_over_the_size_limit_is_413(service: Service) -> None:
    limit = service.settings.max_upload_size
    url = await create(service, None, **{"Upload-Defer-Length": "1"})
    response = await patch(service, url, 0, b"abc", **{"Upload-Length": str(limit + 1)})
    assert response.status_code == 413
    assert (await head(service, url)).headers["upload-defer-length"] == "1"


async def test_creation_with_upload_and_deferred_length(service: Service) -> None:
    data = payload(2 * CHUNK + 9, seed=4)
    async with service.client() as http:
        response = await http.post(
            "/api/tus/",
            content=data[:CHUNK],
            headers=tus_headers(service, **OCTETS, **{"Upload-Defer-Length": "1"}),
        )
    assert response.status_code == 201, response.text
    assert response.headers["upload-offset"] == str(CHUNK)
    url = response.headers["location"]
    looked = await head(service, url)
    assert looked.headers["upload-defer-length"] == "1"
    assert "upload-length" not in looked.headers

    done = await patch(service, url, CHUNK, data[CHUNK:], **{"Upload-Length": str(len(data))})

    assert done.status_code == 204, done.text
    assert await download(service, done.headers["x-file-url"]) == data


async def test_an_empty_upload_is_a_file_at_once(service: Service) -> None:
    async with service.client() as http:
        response = await http.post(
            "/api/tus/", headers=tus_headers(service, **{"Upload-Length": "0"})
        )
    assert response.status_code == 201
    assert await download(service, response.headers["x-file-url"]) == b""


async def test_checksums_are_checked_and_a_mismatch_keeps_nothing(service: Service) -> None:
    data = payload(3 * CHUNK, seed=5)
    url = await create(service, len(data))
    thirds = [data[:CHUNK], data[CHUNK : 2 * CHUNK], data[2 * CHUNK :]]

    wrong = await patch(service, url, 0, thirds[0], **{"Upload-Checksum": digest("sha1", b"x")})
    assert wrong.status_code == 460
    assert (await head(service, url)).headers["upload-offset"] == "0"
    unknown = await patch(service, url, 0, thirds[0], **{"Upload-Checksum": "crc32 AAAA"})
    assert unknown.status_code == 400

    offset = 0
    for algorithm, third in zip(("sha1", "sha256", "md5"), thirds, strict=True):
        response = await patch(
            service, url, offset, third, **{"Upload-Checksum": digest(algorithm, third)}
        )
        assert response.status_code == 204, response.text
        offset += len(third)
    assert await download(service, response.headers["x-file-url"]) == data


async def test_termination_deletes_the_upload_and_its_bytes(service: Service) -> None:
    data = payload(CHUNK + 1, seed=6)
    url = await create(service, 2 * len(data))
    assert (await patch(service, url, 0, data)).status_code == 204

    async with service.client() as http:
        response = await http.delete(url, headers=tus_headers(service))

    assert response.status_code == 204
    assert (await head(service, url)).status_code == 404
    assert (await patch(service, url, len(data), data)).status_code == 404
    await eventually(lambda: _spool_is_empty(service))
    await eventually(_no_live_messages(service))


async def test_an_expired_upload_is_410_until_it_is_cleaned(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(tus_expiration_seconds=0.5, tus_cleanup_interval_seconds=3600)
    url = await create(service, 10)

    async def gone() -> bool:
        return (await head(service, url)).status_code == 410

    await eventually(gone)
    assert (await patch(service, url, 0, b"0123456789")).status_code == 410


async def test_expired_uploads_are_cleaned_spool_rows_and_chunks(
    start_service: ServiceFactory,
) -> None:
    # Long enough for the create and the PATCH on a loaded machine (CI once
    # took 1.3 s for the create alone, and the upload expired before its PATCH).
    service = await start_service(tus_expiration_seconds=5, tus_cleanup_interval_seconds=0.1)
    data = payload(2 * CHUNK + 100, seed=8)
    url = await create(service, 4 * CHUNK)
    # Two full chunks go to Telegram at once; the tail waits in the spool.
    assert (await patch(service, url, 0, data)).status_code == 204
    assert await _count(service, TusUpload) == 1

    async def cleaned() -> bool:
        return (
            await _count(service, TusUpload) == 0
            and await _count(service, MultipartUpload) == 0
            and await _count(service, SpooledPart) == 0
            and await _spool_is_empty(service)
            and not service.live_messages()
        )

    await eventually(cleaned, within=25)
    assert (await head(service, url)).status_code == 404


async def test_three_partial_uploads_concatenate_into_one_file(service: Service) -> None:
    pieces = [payload(CHUNK + 17, seed=9), payload(5, seed=10), payload(2 * CHUNK, seed=11)]
    urls = []
    for piece in pieces:
        url = await create(service, len(piece), **{"Upload-Concat": "partial"})
        assert (await head(service, url)).headers["upload-concat"] == "partial"
        assert (await patch(service, url, 0, piece)).status_code == 204
        urls.append(url)
    metadata = f"filename {b64('whole.bin')}"

    # As tus-js-client's parallelUploads sends it: the partials' absolute URLs.
    async with service.client() as http:
        final = await http.post(
            "/api/tus/",
            headers=tus_headers(
                service,
                **{"Upload-Concat": "final;" + " ".join(urls), "Upload-Metadata": metadata},
            ),
        )

    assert final.status_code == 201, final.text
    whole = b"".join(pieces)
    assert final.headers["upload-length"] == str(len(whole))
    assert await download(service, final.headers["x-file-url"]) == whole
    looked = await head(service, final.headers["location"])
    assert looked.headers["upload-offset"] == str(len(whole))
    assert looked.headers["x-file-id"] == final.headers["x-file-id"]
    ids = [urlsplit(url).path.rsplit("/", 1)[-1] for url in urls]
    assert looked.headers["upload-concat"] == "final;" + " ".join(f"/api/tus/{i}" for i in ids)
    appended = await patch(service, final.headers["location"], len(whole), b"x")
    assert appended.status_code == 403
    # The partials were consumed, and no byte went to Telegram twice (the
    # file answered at spool durability: test_tus_concatenation.py).
    assert [(await head(service, url)).status_code for url in urls] == [404, 404, 404]

    async def settled() -> bool:
        return await _count(service, MultipartUpload) == 0

    await eventually(settled, within=20)
    assert await _scalar(service, select(func.sum(Chunk.size))) == len(whole)


async def test_concatenation_refuses_unfinished_or_non_partial_uploads(
    service: Service,
) -> None:
    unfinished = await create(service, 10, **{"Upload-Concat": "partial"})
    single = await create(service, 1)
    assert (await patch(service, single, 0, b"x")).status_code == 204
    finished = await create(service, 1, **{"Upload-Concat": "partial"})
    assert (await patch(service, finished, 0, b"y")).status_code == 204

    async with service.client() as http:
        responses = [
            await http.post(
                "/api/tus/",
                headers=tus_headers(service, **{"Upload-Concat": f"final;{url}"}),
            )
            for url in (unfinished, single, "/api/tus/nosuchupload", f"{finished} {finished}")
        ]

    assert [response.status_code for response in responses] == [400, 400, 400, 400]
    assert (await head(service, unfinished)).status_code == 200
    assert (await head(service, finished)).status_code == 200  # not consumed


async def test_a_patch_cut_off_midway_keeps_what_arrived(service: Service) -> None:
    data = payload(3 * CHUNK, seed=12)
    url = await create(service, len(data))
    sent = CHUNK + 1000
    await send_and_hang_up(service, url, data, sent)

    async def kept() -> bool:
        return (await head(service, url)).headers["upload-offset"] == str(sent)

    await eventually(kept)
    done = await patch(service, url, sent, data[sent:])
    assert done.status_code == 204
    assert await download(service, done.headers["x-file-url"]) == data


@pytest.mark.parametrize("spool_max_bytes", [0, 16 * 1024 * 1024])
async def test_tuspy_with_checksums_with_and_without_the_spool(
    start_service: ServiceFactory, spool_max_bytes: int
) -> None:
    service = await start_service(spool_max_bytes=spool_max_bytes)
    data = payload(4 * CHUNK + 1, seed=13)

    url = await asyncio.to_thread(
        tuspy_upload, service, data, chunk_size=CHUNK + 3, upload_checksum=True
    )

    response = await head(service, url)
    assert await download(service, response.headers["x-file-url"]) == data


async def test_when_telegram_refuses_the_last_patch_is_503_and_head_finishes_later(
    start_service: ServiceFactory,
) -> None:
    # Completion waits for Telegram only when told (the default answers at
    # spool durability: test_completion_answers_before_the_flush).
    service = await start_service(complete_waits_for="telegram")
    data = payload(2 * CHUNK + 3, seed=20)
    url = await create(service, len(data))
    service.sim.configure(max_upload_bytes=1024)  # every chunk is refused

    refused = await patch(service, url, 0, data)

    assert refused.status_code == 503, refused.text
    assert "no usable bot" in refused.json()["detail"]
    looked = await head(service, url)
    assert looked.headers["upload-offset"] == str(len(data))  # the bytes are kept
    assert "x-file-id" not in looked.headers
    service.sim.configure(max_upload_bytes=50 * 1024 * 1024)

    async def finished() -> bool:
        return "x-file-id" in (await head(service, url)).headers

    await eventually(finished, within=30)
    assert await download(service, (await head(service, url)).headers["x-file-url"]) == data


async def test_completion_answers_before_the_flush(service: Service) -> None:
    data = payload(2 * CHUNK + 3, seed=21)
    url = await create(service, len(data))
    with service.sim.holding("sendDocument"):
        async with asyncio.timeout(20):
            done = await patch(service, url, 0, data)
            served = await download(service, done.headers["x-file-url"])
        assert service.live_messages() == []  # nothing in Telegram yet

    assert done.status_code == 204
    assert served == data

    def spooled() -> list[Path]:
        return list(Path(service.settings.spool_path).rglob("*.part"))

    await eventually(lambda: not spooled(), within=20)
    assert await download(service, done.headers["x-file-url"]) == data
    assert len(service.live_messages()) <= -(-len(data) // CHUNK) + 1


# --- a PATCH in several segments -------------------------------------------------

SMALL_SEGMENT = CHUNK // 2 + 1


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> int:
    """Segments smaller than a chunk, so a body spans several (the service
    runs in this process)."""
    monkeypatch.setattr(resumable, "SEGMENT_BYTES", SMALL_SEGMENT)
    return SMALL_SEGMENT


async def test_a_body_is_recorded_segment_by_segment(service: Service, small_segments: int) -> None:
    data = payload(5 * CHUNK + 7, seed=16)
    url = await create(service, len(data))

    done = await patch(service, url, 0, data)

    assert done.status_code == 204
    assert await download(service, done.headers["x-file-url"]) == data
    assert await _scalar(service, select(TusUpload.parts)) == -(-len(data) // small_segments)


async def test_a_cut_off_body_keeps_its_complete_segments_and_the_rest_that_arrived(
    service: Service, small_segments: int
) -> None:
    data = payload(5 * CHUNK, seed=17)
    url = await create(service, len(data))
    sent = 3 * small_segments + 100

    await send_and_hang_up(service, url, data, sent)

    async def kept() -> bool:
        return (await head(service, url)).headers["upload-offset"] == str(sent)

    await eventually(kept)
    assert await _scalar(service, select(TusUpload.parts)) == 4
    done = await patch(service, url, sent, data[sent:])
    assert await download(service, done.headers["x-file-url"]) == data


async def test_a_checksum_covers_every_segment_of_the_body(
    service: Service, small_segments: int
) -> None:
    data = payload(4 * CHUNK, seed=18)
    url = await create(service, len(data))

    # Only the last segment differs from what the checksum was made of.
    wrong = await patch(
        service, url, 0, data, **{"Upload-Checksum": digest("sha256", data[:-1] + b"?")}
    )

    assert wrong.status_code == 460
    assert (await head(service, url)).headers["upload-offset"] == "0"
    assert await _scalar(service, select(TusUpload.parts)) == 0
    await eventually(lambda: _spool_is_empty(service))
    right = await patch(service, url, 0, data, **{"Upload-Checksum": digest("sha256", data)})
    assert right.status_code == 204
    assert await download(service, right.headers["x-file-url"]) == data


# --- helpers ----------------------------------------------------------------------


async def _count(service: Service, table: object) -> int:
    engine = create_engine(service.settings.database_url)
    try:
        async with engine.connect() as connection:
            return int(await connection.scalar(select(func.count()).select_from(table)) or 0)
    finally:
        await engine.dispose()


async def _spool_is_empty(service: Service) -> bool:
    root = Path(str(service.settings.spool_dir))
    files = await asyncio.to_thread(lambda: [p for p in root.rglob("*") if p.is_file()])
    return not files


def _no_live_messages(service: Service) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not service.live_messages()

    return check


async def send_and_hang_up(service: Service, url: str, data: bytes, sent: int) -> None:
    """PATCH all of `data` from offset 0, but close the connection after
    `sent` bytes of the body."""
    address = urlsplit(service.url)
    _, writer = await asyncio.open_connection(address.hostname, address.port)
    request = (
        f"PATCH {urlsplit(url).path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Authorization: Bearer {service.key}\r\nTus-Resumable: 1.0.0\r\n"
        f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    writer.write(request.encode() + data[:sent])
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _scalar(service: Service, query: Any) -> Any:
    engine = create_engine(service.settings.database_url)
    try:
        async with engine.connect() as connection:
            return await connection.scalar(query)
    finally:
        await engine.dispose()


async def test_bidi_controls_are_stripped_from_a_tus_file_name(service: Service) -> None:
    spoofed = b64("invoice\u202egnp.exe")
    url = await create(service, 3, **{"Upload-Metadata": f"filename {spoofed}"})
    finished = await patch(service, url, 0, b"abc")
    assert finished.status_code == 204, finished.text
    async with service.client() as http:
        info = await http.get(f"/file/{finished.headers['x-file-id']}/info")
    assert info.json()["file_name"] == "invoicegnp.exe"
