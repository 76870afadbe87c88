"""The native HTTP API end to end: real HTTP, a real database (SQLite and
Postgres through pgbouncer), and the Telegram simulator behind the bots."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import boto3
import httpx
import pytest

from app.store.chunk_size import plan_chunk_size
from tests.running_service import (
    CHUNK,
    INLINE,
    Service,
    ServiceFactory,
    assert_one_call_per_lane,
    eventually,
    payload,
)


async def put(service: Service, name: str, data: bytes) -> dict[str, object]:
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    return response.json()


async def download(service: Service, public_id: str, **headers: str) -> httpx.Response:
    async with service.client() as http:
        return await http.get(f"/f/{public_id}", headers=headers)


SIZES = [0, 1, INLINE, INLINE + 1, CHUNK, CHUNK + 1, 10 * CHUNK + 123]


# --- round trips ------------------------------------------------------------------


@pytest.mark.smoke  # ./scripts/test --quick runs it
@pytest.mark.parametrize("size", SIZES)
async def test_raw_put_round_trip(service: Service, size: int) -> None:
    data = payload(size, seed=size)

    body = await put(service, "data.bin", data)

    assert body["size_bytes"] == size
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert str(body["download_url"]).endswith(f"/f/{body['public_id']}")
    assert len(str(body["public_id"])) >= 20
    response = await download(service, str(body["public_id"]))
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-length"] == str(size)
    assert response.headers["etag"] == body["etag"]
    # Small content lives in the database; only bigger content reaches Telegram.
    # A body of known length is cut into equal chunks, spread over the 3 bots.
    expected_messages = 0 if size <= INLINE else -(-size // plan_chunk_size(size, CHUNK, 3))
    assert len(service.live_messages()) == expected_messages


@pytest.mark.parametrize("size", [0, 5, CHUNK + 1, 5 * CHUNK])
async def test_multipart_upload_round_trip(service: Service, size: int) -> None:
    data = payload(size, seed=7)
    async with service.client() as http:
        response = await http.post(
            "/api/upload",
            files={"file": ("report.pdf", data, "application/pdf")},
            headers=service.auth,
        )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["file_name"] == "report.pdf"
    assert body["mime_type"] == "application/pdf"
    assert body["size_bytes"] == size
    got = await download(service, body["public_id"])
    assert got.content == data
    assert got.headers["content-type"] == "application/pdf"
    assert got.headers["content-disposition"] == 'attachment; filename="report.pdf"'


async def test_multipart_file_name_field_overrides_and_may_come_after_the_file(
    service: Service,
) -> None:
    # Hand-built body: the fileName field follows the file part.
    boundary = "XyZ123"
    data = payload(3 * CHUNK, seed=3)
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + (
            f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="fileName"\r\n\r\n'
            f"Отчёт 2026.txt\r\n--{boundary}--\r\n"
        ).encode()
    )
    async with service.client() as http:
        response = await http.post(
            "/api/upload",
            content=body,
            headers={**service.auth, "Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
    assert response.status_code == 201, response.text
    info = response.json()
    assert info["file_name"] == "Отчёт 2026.txt"
    assert info["mime_type"] == "text/plain"
    got = await download(service, info["public_id"])
    assert got.content == data
    disposition = got.headers["content-disposition"]
    assert "filename*=UTF-8''%D0%9E%D1%82%D1%87%D1%91%D1%82%202026.txt" in disposition
    assert disposition.isascii()


async def test_chunks_of_one_file_go_to_several_bots_one_call_at_a_time(
    service: Service,
) -> None:
    data = payload(12 * CHUNK, seed=11)

    await put(service, "big.bin", data)

    stats = service.sim.stats()
    senders = [bot_id for bot_id, s in stats.items() if s.calls.get("sendDocument", 0) > 0]
    assert len(senders) >= 2
    assert_one_call_per_lane(stats)


async def test_concurrent_uploads_all_come_back_intact(service: Service) -> None:
    files = {f"file-{i}.bin": payload(3 * CHUNK + i * 1000, seed=100 + i) for i in range(10)}

    results = await asyncio.gather(*(put(service, name, data) for name, data in files.items()))

    for (_name, data), body in zip(files.items(), results, strict=True):
        assert (await download(service, str(body["public_id"]))).content == data
    assert_one_call_per_lane(service.sim.stats())


# --- ranges and conditional requests --------------------------------------------------

RANGE_SIZE = 3 * CHUNK + 500


@pytest.fixture
async def stored(service: Service) -> tuple[Service, str, bytes]:
    data = payload(RANGE_SIZE, seed=42)
    body = await put(service, "ranged.bin", data)
    return service, str(body["public_id"]), data


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-0", 0, 1),
        ("bytes=0-99", 0, 100),
        ("bytes=100-", 100, RANGE_SIZE),
        ("bytes=-10", RANGE_SIZE - 10, RANGE_SIZE),
        (f"bytes={CHUNK - 5}-{CHUNK + 4}", CHUNK - 5, CHUNK + 5),  # across two chunks
        (f"bytes={CHUNK}-{3 * CHUNK}", CHUNK, 3 * CHUNK + 1),  # whole middle chunks
        (f"bytes=10-{RANGE_SIZE + 1000}", 10, RANGE_SIZE),  # end past the size is clipped
        (f"bytes=-{RANGE_SIZE + 10}", 0, RANGE_SIZE),
    ],
)
async def test_single_range_gives_206_with_exact_bytes(
    stored: tuple[Service, str, bytes], header: str, start: int, end: int
) -> None:
    service, public_id, data = stored

    response = await download(service, public_id, Range=header)

    assert response.status_code == 206
    assert response.content == data[start:end]
    assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{RANGE_SIZE}"
    assert response.headers["content-length"] == str(end - start)


@pytest.mark.parametrize(
    "header", [f"bytes={RANGE_SIZE}-", "bytes=-0", "bytes=abc", "bytes=5-2", "items=0-1"]
)
async def test_unsatisfiable_or_malformed_range_gives_416(
    stored: tuple[Service, str, bytes], header: str
) -> None:
    service, public_id, _ = stored

    response = await download(service, public_id, Range=header)

    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{RANGE_SIZE}"
    assert response.json()["error"] == "range_not_satisfiable"


async def test_several_ranges_get_the_whole_file(stored: tuple[Service, str, bytes]) -> None:
    service, public_id, data = stored

    response = await download(service, public_id, Range="bytes=0-1,5-6")

    assert response.status_code == 200
    assert response.content == data


async def test_if_range_with_a_stale_etag_gets_the_whole_file(
    stored: tuple[Service, str, bytes],
) -> None:
    service, public_id, data = stored

    response = await download(service, public_id, Range="bytes=0-9", **{"If-Range": '"stale"'})

    assert response.status_code == 200
    assert response.content == data


async def test_conditional_get_answers_304(stored: tuple[Service, str, bytes]) -> None:
    service, public_id, _ = stored
    first = await download(service, public_id)
    etag, modified = first.headers["etag"], first.headers["last-modified"]

    by_etag = await download(service, public_id, **{"If-None-Match": etag})
    by_date = await download(service, public_id, **{"If-Modified-Since": modified})
    changed = await download(service, public_id, **{"If-None-Match": '"other"'})

    assert by_etag.status_code == 304
    assert by_etag.headers["etag"] == etag
    assert by_etag.content == b""
    assert by_date.status_code == 304
    assert changed.status_code == 200


async def test_head_gives_the_same_headers_without_a_body(
    stored: tuple[Service, str, bytes],
) -> None:
    service, public_id, _ = stored
    async with service.client() as http:
        head = await http.head(f"/f/{public_id}")
        get = await http.get(f"/f/{public_id}")

    assert head.status_code == 200
    assert head.content == b""
    for name in ("content-length", "etag", "last-modified", "accept-ranges", "content-type"):
        assert head.headers[name] == get.headers[name]


# --- replacing, deleting, listing ------------------------------------------------------


async def test_put_again_replaces_the_content_and_keeps_the_link(service: Service) -> None:
    old, new = payload(4 * CHUNK, seed=1), payload(2 * CHUNK + 7, seed=2)
    first = await put(service, "report.bin", old)
    old_messages = set(service.live_messages())

    second = await put(service, "report.bin", new)

    assert second["public_id"] == first["public_id"]
    assert (await download(service, str(first["public_id"]))).content == new

    async def old_chunks_deleted() -> bool:
        return not (old_messages & set(service.live_messages()))

    await eventually(old_chunks_deleted)
    assert len(service.live_messages()) == 3


async def test_delete_removes_the_file_and_its_telegram_messages(service: Service) -> None:
    body = await put(service, "gone.bin", payload(3 * CHUNK))
    async with service.client() as http:
        deleted = await http.delete(f"/api/files/{body['public_id']}", headers=service.auth)
        again = await http.delete(f"/api/files/{body['public_id']}", headers=service.auth)
    assert deleted.status_code == 204
    assert again.status_code == 404
    assert (await download(service, str(body["public_id"]))).status_code == 404

    async def no_messages() -> bool:
        return service.live_messages() == []

    await eventually(no_messages)


async def test_list_pages_through_every_file(service: Service) -> None:
    ids = {str((await put(service, f"f{i:02}.txt", b"x" * i))["public_id"]) for i in range(7)}
    seen: list[str] = []
    cursor = None
    async with service.client() as http:
        for _ in range(10):
            params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
            page = (await http.get("/api/files", params=params, headers=service.auth)).json()
            seen += [item["public_id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    assert sorted(seen) == sorted(ids)
    assert len(seen) == 7


async def _list_all(service: Service, order: str, limit: int = 2) -> list[str]:
    names: list[str] = []
    cursor = None
    async with service.client() as http:
        for _ in range(20):
            params = {"limit": limit, "order": order} | ({"cursor": cursor} if cursor else {})
            response = await http.get("/api/files", params=params, headers=service.auth)
            assert response.status_code == 200, response.text
            page = response.json()
            names += [item["file_name"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return names
    raise AssertionError("the listing did not end")


async def test_list_newest_first_puts_the_file_just_uploaded_on_top(service: Service) -> None:
    # Names in another order than the uploads: key order is not upload order.
    for name in ("m.txt", "b.txt", "z.txt", "a.txt", "q.txt"):
        await put(service, name, b"x")
    async with service.client() as http:
        form = await http.post(
            "/api/upload", files={"file": ("form.txt", b"y")}, headers=service.auth
        )
    assert form.status_code == 201

    assert await _list_all(service, "newest") == [
        "form.txt", "q.txt", "a.txt", "z.txt", "b.txt", "m.txt",
    ]  # fmt: skip
    assert await _list_all(service, "oldest", limit=4) == [
        "m.txt", "b.txt", "z.txt", "a.txt", "q.txt", "form.txt",
    ]  # fmt: skip

    await put(service, "b.txt", b"new content")  # replaced: uploaded just now
    assert (await _list_all(service, "newest"))[:2] == ["b.txt", "form.txt"]


async def test_list_newest_first_with_a_name_prefix(service: Service) -> None:
    for name in ("report-1.pdf", "photo.jpg", "Report-2.pdf", "report-3.pdf"):
        await put(service, name, b"x")
    async with service.client() as http:
        response = await http.get(
            "/api/files", params={"order": "newest", "prefix": "rep"}, headers=service.auth
        )
    assert [f["file_name"] for f in response.json()["items"]] == [
        "report-3.pdf", "Report-2.pdf", "report-1.pdf",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"order": "size"}, "order"),
        ({"order": "newest", "cursor": "upload/abc"}, "cursor"),
        ({"order": "oldest", "cursor": "9" * 30}, "cursor"),
        ({"order": "newest", "cursor": str(2**63)}, "cursor"),
    ],
)
async def test_a_bad_order_or_cursor_is_a_clear_400(
    service: Service, params: dict[str, str], detail: str
) -> None:
    async with service.client() as http:
        response = await http.get("/api/files", params=params, headers=service.auth)
    assert response.status_code in (400, 422), response.text
    assert detail in response.text


async def test_info_describes_the_file(service: Service) -> None:
    body = await put(service, "notes.md", b"# hello\n")
    async with service.client() as http:
        info = (await http.get(f"/file/{body['public_id']}/info")).json()
    assert info["file_name"] == "notes.md"
    assert info["mime_type"] == "text/markdown"
    assert info["size_bytes"] == 8


# --- auth -----------------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer wrong-key", "Basic abc"])
async def test_writes_need_a_valid_key(service: Service, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    async with service.client() as http:
        put_response = await http.put("/api/files/x.txt", content=b"data", headers=headers)
        post_response = await http.post("/api/upload", files={"file": b"x"}, headers=headers)
        list_response = await http.get("/api/files", headers=headers)
    for response in (put_response, post_response, list_response):
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"
    assert service.sim.message_count(-1001987654321) == 0


async def test_downloads_are_public_unless_configured(start_service: ServiceFactory) -> None:
    service = await start_service(require_key_for_downloads=True)
    body = await put(service, "secret.txt", b"top secret")
    async with service.client() as http:
        anonymous = await http.get(f"/f/{body['public_id']}")
        keyed = await http.get(f"/f/{body['public_id']}", headers=service.auth)
    assert anonymous.status_code == 401
    assert keyed.content == b"top secret"


# --- bad input ---------------------------------------------------------------------------


async def test_missing_file_field_is_a_clear_400(service: Service) -> None:
    async with service.client() as http:
        response = await http.post(
            "/api/upload", files={"other": ("a.txt", b"abc")}, headers=service.auth
        )
    assert response.status_code == 400
    assert "`file` is missing" in response.json()["detail"]


async def test_wrong_content_type_is_415(service: Service) -> None:
    async with service.client() as http:
        response = await http.post(
            "/api/upload",
            content=b"{}",
            headers={**service.auth, "Content-Type": "application/json"},
        )
    assert response.status_code == 415
    assert "multipart/form-data" in response.json()["detail"]


async def test_declared_oversized_body_is_refused_before_reading(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(max_upload_size=3 * CHUNK)
    async with service.client() as http:
        response = await http.put(
            "/api/files/big.bin", content=payload(3 * CHUNK + 1), headers=service.auth
        )
    assert response.status_code == 413
    assert str(3 * CHUNK) in response.json()["detail"]
    assert service.sim.message_count(-1001987654321) == 0


async def test_streamed_oversized_body_is_cut_off_and_leaves_nothing(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(max_upload_size=3 * CHUNK)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(8):
            yield payload(CHUNK)

    async with service.client() as http:
        response = await http.put("/api/files/big.bin", content=body(), headers=service.auth)
        listing = (await http.get("/api/files", headers=service.auth)).json()
    assert response.status_code == 413
    assert listing["items"] == []

    async def no_messages() -> bool:
        return service.live_messages() == []

    await eventually(no_messages)


async def test_unknown_id_is_404(service: Service) -> None:
    async with service.client() as http:
        response = await http.get("/f/nope-nope-nope-nope-nope")
        info = await http.get("/file/nope/info")
    assert response.status_code == 404
    assert response.json() == {
        "error": "not_found",
        "detail": "no file has the id 'nope-nope-nope-nope-nope'",
    }
    assert info.status_code == 404


# --- failures in the middle of an upload ---------------------------------------------------


async def test_client_disconnect_mid_upload_leaves_nothing(service: Service) -> None:
    host, port = service.url.removeprefix("http://").split(":")
    _reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        (
            "PUT /api/files/cut.bin HTTP/1.1\r\n"
            f"Host: {host}\r\nAuthorization: Bearer {service.key}\r\n"
            f"Content-Length: {20 * CHUNK}\r\n\r\n"
        ).encode()
    )
    writer.write(payload(5 * CHUNK))
    await writer.drain()

    async def some_chunks_sent() -> bool:
        return service.sim.message_count(-1001987654321) >= 2

    await eventually(some_chunks_sent)
    writer.close()
    await writer.wait_closed()

    async def all_deleted() -> bool:
        return service.live_messages() == []

    await eventually(all_deleted)
    async with service.client() as http:
        listing = (await http.get("/api/files", headers=service.auth)).json()
    assert listing["items"] == []


async def test_telegram_failure_mid_upload_is_a_clean_error_and_leaves_nothing(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(max_attempts=2)
    chat = -1001987654321

    async def body() -> AsyncIterator[bytes]:
        for index in range(10):
            if index == 4:
                # Telegram starts failing after the first chunks went through.
                async def some_sent() -> bool:
                    return service.sim.message_count(chat) >= 2

                await eventually(some_sent)
                service.sim.configure(fault_5xx_rate=1.0)
            yield payload(CHUNK, seed=index)

    async with service.client() as http:
        response = await http.put("/api/files/doomed.bin", content=body(), headers=service.auth)
        listing = (await http.get("/api/files", headers=service.auth)).json()
    # Transient failures used up the attempts: worth retrying later.
    assert response.status_code == 503
    assert response.json()["error"] == "telegram_unavailable"
    assert int(response.headers["retry-after"]) >= 1
    assert listing["items"] == []

    service.sim.configure(fault_5xx_rate=0.0)

    async def all_deleted() -> bool:
        return service.live_messages() == []

    await eventually(all_deleted, within=20)


# --- health, readiness, secrets ------------------------------------------------------------


async def test_health_and_ready(service: Service) -> None:
    async with service.client() as http:
        health = await http.get("/health")
        public = await http.get("/ready")
        wrong_key = await http.get("/ready", headers={"Authorization": "Bearer nope"})
        ready = await http.get("/ready", headers=service.auth)
    assert health.json() == {"status": "ok"}
    # In public only the status: no bot ids, usernames or queues.
    assert (public.status_code, public.json()) == (200, {"status": "ready"})
    assert (wrong_key.status_code, wrong_key.json()) == (200, {"status": "ready"})
    # With the key /metrics needs (METRICS_ACCESS=key), the details.
    body = ready.json()
    assert ready.status_code == 200
    assert body["database"] is True
    assert body["usable_bots"] == 3
    assert {bot["bot_id"] for bot in body["bots"]} == set(service.sim.bot_ids)
    assert all(bot["username"] for bot in body["bots"])
    assert not any(bot["checking"] for bot in body["bots"])


async def test_an_instance_told_to_stop_is_not_ready(service: Service) -> None:
    """From SIGTERM on (while it still serves, for SHUTDOWN_DELAY_SECONDS,
    and while it drains) a proxy in front of several instances must stop
    sending it traffic, and /ready tells it so."""
    service.app.state.stopping = True
    try:
        async with service.client() as http:
            ready = await http.get("/ready")
            health = await http.get("/health")
    finally:
        service.app.state.stopping = False
    assert (ready.status_code, ready.json()) == (503, {"status": "not_ready"})
    assert health.status_code == 200


async def test_no_response_reveals_a_token(service: Service) -> None:
    data = payload(2 * CHUNK)
    body = await put(service, "t.bin", data)
    async with service.client() as http:
        responses = [
            await http.get(f"/f/{body['public_id']}"),
            await http.get("/ready"),
            await http.get(f"/file/{body['public_id']}/info"),
            await http.get("/openapi.json"),
        ]
    secrets = [token.split(":", 1)[1] for token in service.sim.tokens]
    for response in responses:
        text = response.content.decode("latin-1") + str(response.headers)
        assert not any(secret in text for secret in secrets)


# --- the S3 buckets are out of the native API's reach ----------------------------------

S3_ACCESS_KEY = "AKIDNATIVEBOUNDARY"
S3_SECRET = "native-boundary-secret-0123456789"


async def test_native_routes_never_serve_describe_or_delete_an_s3_object(
    start_service: ServiceFactory,
) -> None:
    # S3 objects have public ids too (every object row has one): the native
    # routes must not find them, whoever asks, or a private registry layer
    # becomes a permanent anonymous link.
    service = await start_service(s3_credentials={S3_ACCESS_KEY: S3_SECRET})
    s3 = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    )
    await asyncio.to_thread(s3.create_bucket, Bucket="private")
    secret_bytes = payload(CHUNK + 5, seed=3)
    await asyncio.to_thread(s3.put_object, Bucket="private", Key="layer.tar", Body=secret_bytes)
    stored = await service.app.state.services.store.get("private", "layer.tar")
    public_id = stored.public_id

    async with service.client() as http:
        anonymous = [
            await http.get(f"/f/{public_id}"),
            await http.head(f"/f/{public_id}"),
            await http.get(f"/file/{public_id}/info"),
        ]
        with_admin_key = [
            await http.get(f"/f/{public_id}", headers=service.auth),
            await http.get(f"/file/{public_id}/info", headers=service.auth),
            await http.delete(f"/api/files/{public_id}", headers=service.auth),
        ]
        native = await http.put("/api/files/mine.txt", content=b"mine", headers=service.auth)

    for response in anonymous + with_admin_key:
        assert response.status_code == 404, (response.request.method, response.request.url)
        assert secret_bytes not in response.content
        assert b"layer.tar" not in response.content

    # The object is untouched, and still there for S3 clients.
    def read_back() -> bytes:
        body: bytes = s3.get_object(Bucket="private", Key="layer.tar")["Body"].read()
        return body

    assert await asyncio.to_thread(read_back) == secret_bytes
    # The native API's own files are served as before.
    async with service.client() as http:
        mine = await http.get(f"/f/{native.json()['public_id']}")
    assert mine.content == b"mine"


# --- bidirectional control characters ---------------------------------------------------

# "invoice\u202egnp.exe" displays as "invoiceexe.png": the override reverses what follows.
SPOOFED = "invoice\u202egnp.exe"
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


async def test_bidi_and_other_control_characters_are_stripped_from_native_file_names(
    service: Service,
) -> None:
    async with service.client() as http:
        raw = await http.put(f"/api/files/{SPOOFED}", content=b"raw", headers=service.auth)
        form = await http.post(
            "/api/upload",
            files={"file": ("x.bin", b"form", "application/octet-stream")},
            data={"fileName": f"{BIDI_CONTROLS}a{BIDI_CONTROLS}.txt"},
            headers=service.auth,
        )
        form_name = await http.post(
            "/api/upload",
            files={"file": (SPOOFED, b"form", "application/octet-stream")},
            headers=service.auth,
        )
        only_controls = await http.put(
            "/api/files/\u202e\u202c", content=b"x", headers=service.auth
        )
        # Control characters, C1 too (U+009B: a one-byte CSI to many terminals).
        c1 = await http.put("/api/files/a\x9b2J\x85b.txt", content=b"x", headers=service.auth)
    assert raw.status_code == 201, raw.text
    assert raw.json()["file_name"] == "invoicegnp.exe"
    assert form.json()["file_name"] == "a.txt"
    assert form_name.json()["file_name"] == "invoicegnp.exe"
    assert only_controls.status_code == 400
    assert c1.json()["file_name"] == "a2Jb.txt"
    got = await download(service, raw.json()["public_id"])
    assert got.headers["content-disposition"] == 'attachment; filename="invoicegnp.exe"'
    # The same name again replaces the same file (the key is what was sent).
    async with service.client() as http:
        again = await http.put(f"/api/files/{SPOOFED}", content=b"new", headers=service.auth)
    assert again.json()["public_id"] == raw.json()["public_id"]


# --- links and transport security, once PUBLIC_BASE_URL is set ---------------------------

PUBLIC = "https://files.example.com"
FORGED_HOST = {"Host": "evil.example"}


async def test_links_come_from_public_base_url_never_from_the_host_header(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(public_base_url=PUBLIC, s3_credentials={S3_ACCESS_KEY: S3_SECRET})
    s3 = boto3.client(
        "s3",
        endpoint_url=service.url,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    )
    await asyncio.to_thread(s3.create_bucket, Bucket="forms")
    await asyncio.to_thread(s3.put_object, Bucket="forms", Key="k", Body=b"k")
    post = await asyncio.to_thread(
        s3.generate_presigned_post,
        "forms",
        "up.txt",
        Fields={"success_action_status": "201"},
        Conditions=[{"success_action_status": "201"}],
    )
    async with service.client() as http:
        native = await http.put(
            "/api/files/a.txt", content=b"a", headers={**service.auth, **FORGED_HOST}
        )
        tus = await http.post(
            "/api/tus/",
            headers={
                **service.auth,
                **FORGED_HOST,
                "Tus-Resumable": "1.0.0",
                "Upload-Length": "0",
            },
        )
        browsed = await http.get("/api/buckets/forms", headers={**service.auth, **FORGED_HOST})
        posted = await http.post(
            "/forms",
            data=post["fields"],
            files={"file": ("up.txt", b"up", "text/plain")},
            headers=FORGED_HOST,
        )
    assert native.json()["download_url"].startswith(f"{PUBLIC}/f/")
    assert tus.status_code == 201, tus.text
    assert tus.headers["location"].startswith(f"{PUBLIC}/api/tus/")
    assert tus.headers["x-file-url"].startswith(f"{PUBLIC}/f/")
    assert browsed.json()["objects"][0]["download_url"].startswith(f"{PUBLIC}/forms/k?")
    assert posted.status_code == 201, posted.text
    assert posted.headers["location"] == f"{PUBLIC}/forms/up.txt"
    assert f"<Location>{PUBLIC}/forms/up.txt</Location>" in posted.text
    for response in (native, tus, browsed, posted):
        assert "evil.example" not in response.text + str(response.headers)
