"""The trash end to end (real HTTP, boto3 for S3, the Telegram simulator):
deletes and replacements stay restorable for TRASH_RETENTION_SECONDS, hidden
from every listing and download meanwhile; owners and scopes apply; expiry
deletes the messages no live object shares; 0 keeps deletes final."""

from __future__ import annotations

from typing import Any

import httpx

from app.cli.demo import create_api_key
from app.db.models import KeyScope
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code, read
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

HOUR = 3600


async def new_key(service: Service, name: str, scope: KeyScope) -> dict[str, str]:
    key = await create_api_key(service.settings.database_url, name=name, scope=scope)
    return {"Authorization": f"Bearer {key}"}


async def call(
    service: Service, method: str, path: str, auth: dict[str, str], **options: Any
) -> httpx.Response:
    async with service.client() as http:
        return await http.request(method, path, headers=auth, **options)


async def trash_of(service: Service, auth: dict[str, str]) -> list[dict[str, Any]]:
    answer = await call(service, "GET", "/api/trash", auth)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


async def test_a_deleted_file_comes_back_at_its_link_for_its_owner_only(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(trash_retention_seconds=HOUR)
    alice = await new_key(service, "alice", "write")
    bob = await new_key(service, "bob", "write")
    reader = await new_key(service, "reader", "read")
    data = payload(3 * CHUNK, seed=1)
    created = await call(service, "PUT", "/api/files/report.bin", alice, content=data)
    public_id = created.json()["public_id"]

    assert (await call(service, "DELETE", f"/api/files/{public_id}", alice)).status_code == 204

    # Gone from the link, the info, the listing.
    assert (await call(service, "GET", f"/f/{public_id}", {})).status_code == 404
    assert (await call(service, "GET", f"/file/{public_id}/info", {})).status_code == 404
    listing = await call(service, "GET", "/api/files", alice)
    assert listing.json()["items"] == []
    # In Alice's trash (and the admin's), not in Bob's; a read key restores nothing.
    [item] = await trash_of(service, alice)
    assert item["public_id"] == public_id
    assert (item["name"], item["size_bytes"], item["reason"]) == (
        "report.bin",
        len(data),
        "deleted",
    )
    assert item["bucket"] is None and item["key"] is None
    assert [i["public_id"] for i in await trash_of(service, service.auth)] == [public_id]
    assert await trash_of(service, bob) == []
    assert (await call(service, "GET", "/api/trash", reader)).status_code == 403
    refused = await call(service, "POST", f"/api/trash/{public_id}/restore", bob)
    assert refused.status_code == 404
    assert refused.json()["detail"] == f"the trash holds no object with the id {public_id!r}"

    restored = await call(service, "POST", f"/api/trash/{public_id}/restore", alice)

    assert restored.status_code == 200, restored.text
    assert restored.json()["download_url"].endswith(f"/f/{public_id}")
    back = await call(service, "GET", f"/f/{public_id}", {})
    assert back.status_code == 200 and back.content == data
    assert await trash_of(service, alice) == []
    # A second restore finds nothing.
    again = await call(service, "POST", f"/api/trash/{public_id}/restore", alice)
    assert again.status_code == 404


async def test_a_replaced_file_comes_back_under_a_new_name_not_over_the_live_one(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(trash_retention_seconds=HOUR)
    old, new = payload(2 * CHUNK, seed=2), payload(CHUNK + 7, seed=3)
    first = await call(service, "PUT", "/api/files/notes.txt", service.auth, content=old)
    await call(service, "PUT", "/api/files/notes.txt", service.auth, content=new)
    link = first.json()["public_id"]

    # The link serves the new version; the old one waits in the trash under an id of its own.
    assert (await call(service, "GET", f"/f/{link}", {})).content == new
    [item] = await trash_of(service, service.auth)
    assert item["reason"] == "replaced" and item["name"] == "notes.txt"
    assert item["public_id"] != link
    assert (await call(service, "GET", f"/f/{item['public_id']}", {})).status_code == 404

    taken = await call(service, "POST", f"/api/trash/{item['public_id']}/restore", service.auth)
    assert taken.status_code == 409
    assert "?as=NEW_NAME" in taken.json()["detail"]
    restored = await call(
        service,
        "POST",
        f"/api/trash/{item['public_id']}/restore",
        service.auth,
        params={"as": "notes-old.txt"},
    )

    assert restored.status_code == 200, restored.text
    assert restored.json()["name"] == "notes-old.txt"
    assert (await call(service, "GET", f"/f/{item['public_id']}", {})).content == old
    assert (await call(service, "GET", f"/f/{link}", {})).content == new
    names = {
        i["file_name"]
        for i in (await call(service, "GET", "/api/files", service.auth)).json()["items"]
    }
    assert names == {"notes.txt", "notes-old.txt"}


async def test_objects_a_registry_deleted_come_back_under_their_keys(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(trash_retention_seconds=HOUR, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="registry")
    layer, link = payload(2 * CHUNK + 5, seed=4), b"sha256:abc"
    await s3("put_object", Bucket="registry", Key="blobs/layer", Body=layer)
    await s3("put_object", Bucket="registry", Key="_uploads/link", Body=link)
    writer = await new_key(service, "writer", "write")

    await s3(
        "delete_objects",
        Bucket="registry",
        Delete={"Objects": [{"Key": "blobs/layer"}, {"Key": "_uploads/link"}]},
    )

    assert (await s3("list_objects_v2", Bucket="registry")).get("Contents", []) == []
    assert (await s3("list_object_versions", Bucket="registry")).get("Versions", []) == []
    assert code(await s3.error("head_object", Bucket="registry", Key="blobs/layer")) == "404"
    trashed = {i["key"]: i for i in await trash_of(service, service.auth)}
    assert set(trashed) == {"blobs/layer", "_uploads/link"}
    assert {i["bucket"] for i in trashed.values()} == {"registry"}
    # S3 objects are an admin key's, as on the page's bucket view.
    assert await trash_of(service, writer) == []
    layer_id, link_id = trashed["blobs/layer"]["public_id"], trashed["_uploads/link"]["public_id"]
    assert (
        await call(service, "POST", f"/api/trash/{layer_id}/restore", writer)
    ).status_code == 404
    # An S3 object's id never opens a native link.
    assert (await call(service, "GET", f"/f/{layer_id}", {})).status_code == 404

    restored = await call(service, "POST", f"/api/trash/{layer_id}/restore", service.auth)
    assert restored.status_code == 200, restored.text
    assert (restored.json()["bucket"], restored.json()["key"]) == ("registry", "blobs/layer")
    assert await read(s3, "registry", "blobs/layer") == layer
    # The link file was written anew meanwhile: 409, or another key.
    await s3("put_object", Bucket="registry", Key="_uploads/link", Body=b"sha256:def")
    taken = await call(service, "POST", f"/api/trash/{link_id}/restore", service.auth)
    assert taken.status_code == 409
    moved = await call(
        service, "POST", f"/api/trash/{link_id}/restore", service.auth, params={"as": "old-link"}
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["name"] == "old-link"
    assert await read(s3, "registry", "old-link") == link
    assert await read(s3, "registry", "_uploads/link") == b"sha256:def"


async def test_a_restore_as_takes_only_an_s3_key_the_s3_api_can_reach(
    start_service: ServiceFactory,
) -> None:
    """`?as=` for an S3 object is held to S3's key rules: 1024 bytes of
    UTF-8, not characters. A 1,600-byte key restored would fail HEAD, GET and
    DELETE, and its bucket could never be deleted."""
    service = await start_service(trash_retention_seconds=HOUR, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    await s3("put_object", Bucket="box", Key="k", Body=b"kept")
    await s3("delete_object", Bucket="box", Key="k")
    [item] = await trash_of(service, service.auth)
    restore = f"/api/trash/{item['public_id']}/restore"

    too_long = await call(service, "POST", restore, service.auth, params={"as": "é" * 800})
    assert too_long.status_code == 400
    assert "1600 bytes" in too_long.json()["detail"]
    assert (await s3("list_objects_v2", Bucket="box")).get("Contents", []) == []

    longest = "é" * 512  # 1024 bytes
    restored = await call(service, "POST", restore, service.auth, params={"as": longest})
    assert restored.status_code == 200, restored.text
    assert await read(s3, "box", longest) == b"kept"
    await s3("delete_object", Bucket="box", Key=longest)
    await s3("delete_bucket", Bucket="box")


async def test_expiry_deletes_the_messages_but_keeps_chunks_a_live_copy_uses(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(trash_retention_seconds=0.5, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    shared, alone = payload(2 * CHUNK, seed=5), payload(2 * CHUNK, seed=6)
    await s3("put_object", Bucket="box", Key="shared", Body=shared)
    shared_messages = set(service.live_messages())
    await s3("put_object", Bucket="box", Key="alone", Body=alone)
    alone_messages = set(service.live_messages()) - shared_messages
    await s3("copy_object", Bucket="box", Key="copy", CopySource={"Bucket": "box", "Key": "shared"})
    assert alone_messages
    # A metadata-only copy: no new message.
    assert set(service.live_messages()) == shared_messages | alone_messages

    await s3("delete_object", Bucket="box", Key="shared")
    await s3("delete_object", Bucket="box", Key="alone")

    await eventually(lambda: set(service.live_messages()) == shared_messages)
    assert await read(s3, "box", "copy") == shared
    assert await trash_of(service, service.auth) == []


async def test_with_no_retention_deletes_are_final(service: Service) -> None:
    """TRASH_RETENTION_SECONDS=0 (the tests' default: tests/running_service.py)."""
    assert service.settings.trash_retention_seconds == 0
    before = set(service.live_messages())
    created = await call(
        service, "PUT", "/api/files/gone.bin", service.auth, content=payload(2 * CHUNK, seed=7)
    )
    public_id = created.json()["public_id"]

    assert (
        await call(service, "DELETE", f"/api/files/{public_id}", service.auth)
    ).status_code == 204

    await eventually(lambda: set(service.live_messages()) == before)
    assert await trash_of(service, service.auth) == []
    gone = await call(service, "POST", f"/api/trash/{public_id}/restore", service.auth)
    assert gone.status_code == 404
