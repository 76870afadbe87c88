"""API key scopes and owners through the native API, end to end (SQLite and
Postgres through pgbouncer, Telegram simulator): a `write` key changes only
what it uploaded, `admin` changes anything, `read` lists and downloads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from app.cli.demo import create_api_key
from app.db.models import KeyScope
from app.store.key_failures import FAILURES_PER_CREDENTIAL
from tests.db.helpers import key_queries
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload


async def new_key(service: Service, name: str, scope: KeyScope) -> dict[str, str]:
    key = await create_api_key(service.settings.database_url, name=name, scope=scope)
    return {"Authorization": f"Bearer {key}"}


async def put(service: Service, name: str, data: bytes, auth: dict[str, str]) -> httpx.Response:
    async with service.client() as http:
        return await http.put(f"/api/files/{name}", content=data, headers=auth)


async def fetch(service: Service, public_id: str, **headers: str) -> httpx.Response:
    async with service.client() as http:
        return await http.get(f"/f/{public_id}", headers=headers)


async def delete(service: Service, public_id: str, auth: dict[str, str]) -> httpx.Response:
    async with service.client() as http:
        return await http.delete(f"/api/files/{public_id}", headers=auth)


# --- owners ---------------------------------------------------------------------------


async def test_a_write_key_cannot_replace_or_delete_another_keys_file(service: Service) -> None:
    alice = await new_key(service, "alice", "write")
    bob = await new_key(service, "bob", "write")
    alices = payload(3 * CHUNK, seed=1)
    created = await put(service, "report.bin", alices, alice)
    assert created.status_code == 201, created.text
    public_id = created.json()["public_id"]
    messages = service.live_messages()

    replaced = await put(service, "report.bin", payload(2 * CHUNK, seed=2), bob)
    deleted = await delete(service, public_id, bob)

    assert replaced.status_code == 403
    assert replaced.json()["detail"] == (
        "the file 'report.bin' belongs to another API key: a `write` key may replace or "
        "delete only the files it uploaded (an `admin` key may change any file)"
    )
    assert deleted.status_code == 403
    assert "belongs to another API key" in deleted.json()["detail"]
    # The public link still serves Alice's bytes, and Bob's upload left nothing in Telegram.
    got = await fetch(service, public_id)
    assert got.status_code == 200 and got.content == alices
    assert service.live_messages() == messages


async def test_a_write_key_replaces_and_deletes_its_own_file(service: Service) -> None:
    alice = await new_key(service, "alice", "write")
    first = await put(service, "notes.txt", b"first", alice)
    second = await put(service, "notes.txt", b"second", alice)
    assert first.status_code == second.status_code == 201
    public_id = first.json()["public_id"]
    assert second.json()["public_id"] == public_id
    assert (await fetch(service, public_id)).content == b"second"

    assert (await delete(service, public_id, alice)).status_code == 204
    assert (await fetch(service, public_id)).status_code == 404


async def test_an_admin_key_replaces_and_deletes_any_file(service: Service) -> None:
    alice = await new_key(service, "alice", "write")
    admin = await new_key(service, "ops", "admin")
    public_id = (await put(service, "shared.bin", payload(2 * CHUNK, seed=3), alice)).json()[
        "public_id"
    ]

    replaced = await put(service, "shared.bin", b"from the admin", admin)

    assert replaced.status_code == 201 and replaced.json()["public_id"] == public_id
    assert (await fetch(service, public_id)).content == b"from the admin"
    # The admin's upload is the admin's now: Alice may no longer change it.
    assert (await delete(service, public_id, alice)).status_code == 403
    assert (await delete(service, public_id, admin)).status_code == 204
    await eventually(lambda: _no_messages(service))


async def test_an_owner_taking_the_name_during_an_upload_wins_and_the_upload_leaves_nothing(
    service: Service,
) -> None:
    """The check before the body is advisory; the one under the object's lock
    decides. Bob's upload passes the first (no file yet), Alice creates the
    file while Bob's body is still arriving, and Bob's commit is refused."""
    alice = await new_key(service, "alice", "write")
    bob = await new_key(service, "bob", "write")
    carry_on = asyncio.Event()

    async def bobs_body() -> AsyncIterator[bytes]:
        yield payload(2 * CHUNK, seed=5)
        await carry_on.wait()
        yield payload(CHUNK, seed=6)

    async def bobs_upload() -> httpx.Response:
        async with service.client() as http:
            return await http.put("/api/files/race.bin", content=bobs_body(), headers=bob)

    bobs = asyncio.create_task(bobs_upload())
    # Bob's first chunk reached Telegram: his request is past the first check.
    await eventually(lambda: _has_messages(service))
    alices = await put(service, "race.bin", b"alice was first", alice)
    assert alices.status_code == 201
    carry_on.set()
    refused = await bobs

    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("the file 'race.bin' belongs to another API key")
    assert (await fetch(service, alices.json()["public_id"])).content == b"alice was first"
    # Alice's file is inline; Bob's chunks are deleted from Telegram.
    await eventually(lambda: _no_messages(service))


# --- scopes ---------------------------------------------------------------------------


async def test_a_read_key_lists_but_cannot_upload_replace_or_delete(service: Service) -> None:
    reader = await new_key(service, "reader", "read")
    public_id = (await put(service, "a.txt", b"a", service.auth)).json()["public_id"]

    async with service.client() as http:
        listed = await http.get("/api/files", headers=reader)
        form = await http.post(
            "/api/upload", files={"file": ("b.txt", b"b", "text/plain")}, headers=reader
        )
    raw = await put(service, "a.txt", b"changed", reader)
    deleted = await delete(service, public_id, reader)

    assert listed.status_code == 200
    assert [item["public_id"] for item in listed.json()["items"]] == [public_id]
    for refused in (form, raw, deleted):
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            "this needs an API key with the `write` scope (or a wider one); the key "
            "'reader' has `read` (create one with `teleuploader keys create NAME --scope write`)"
        )
    assert (await fetch(service, public_id)).content == b"a"


async def test_with_keys_required_for_downloads_a_read_key_downloads(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(require_key_for_downloads=True)
    reader = await new_key(service, "reader", "read")
    public_id = (await put(service, "a.txt", b"secret", service.auth)).json()["public_id"]

    anonymous = await fetch(service, public_id)
    with_key = await fetch(service, public_id, **reader)

    assert anonymous.status_code == 401
    assert with_key.status_code == 200 and with_key.content == b"secret"


# --- bogus keys -----------------------------------------------------------------------

# Six waves of 50 at once: enough that most arrive while the first lookup runs.
REQUESTS = 300


async def test_hundreds_of_concurrent_requests_with_one_bogus_key_cost_one_query(
    start_service: ServiceFactory,
) -> None:
    # A refusal remembered for the whole test: the count must not depend on
    # how fast this machine is (expiry is tested in test_key_checks.py).
    service = await start_service(refused_key_cache_seconds=60)
    bogus = {"Authorization": "Bearer tu_" + "x" * 43}
    limit = asyncio.Semaphore(50)

    async def attempt(http: httpx.AsyncClient) -> int:
        async with limit:
            return (await http.get("/api/files", headers=bogus)).status_code

    with key_queries() as queries:
        async with service.client(limits=httpx.Limits(max_connections=50)) as http:
            statuses = await asyncio.gather(*(attempt(http) for _ in range(REQUESTS)))

    # The first failures are answered 401, the rest refused as too many
    # failed checks from this client with this key (app/store/key_failures.py).
    assert statuses.count(401) == FAILURES_PER_CREDENTIAL
    assert statuses.count(429) == REQUESTS - FAILURES_PER_CREDENTIAL
    assert len(queries) == 1, queries
    # A real key still works at once, and costs its own lookup.
    with key_queries() as queries:
        async with service.client() as http:
            assert (await http.get("/api/files", headers=service.auth)).status_code == 200
    assert len(queries) >= 1


async def _has_messages(service: Service) -> bool:
    return bool(service.live_messages())


async def _no_messages(service: Service) -> bool:
    return not service.live_messages()


async def tus_upload(service: Service, data: bytes, auth: dict[str, str]) -> str:
    """A one-PATCH tus upload; the public id of the file it made."""
    tus = {"Tus-Resumable": "1.0.0", **auth}
    async with service.client() as http:
        created = await http.post("/api/tus/", headers={**tus, "Upload-Length": str(len(data))})
        assert created.status_code == 201, created.text
        patched = await http.patch(
            created.headers["location"],
            content=data,
            headers={
                **tus,
                "Upload-Offset": "0",
                "Content-Type": "application/offset+octet-stream",
            },
        )
    assert patched.status_code == 204, patched.text
    return patched.headers["x-file-id"]


async def test_a_file_uploaded_with_tus_belongs_to_the_key_that_uploaded_it(
    service: Service,
) -> None:
    alice = await new_key(service, "alice", "write")
    bob = await new_key(service, "bob", "write")
    public_id = await tus_upload(service, payload(2 * CHUNK, seed=5), alice)

    assert (await delete(service, public_id, bob)).status_code == 403
    assert (await delete(service, public_id, alice)).status_code == 204
