"""A ceiling per storage chat (CHAT_MESSAGE_LIMIT), end to end: real HTTP,
the Telegram simulator holding several chats, a real database.

- a full chat takes no new writes; the others carry on, and a chunk's
  replicas still go to distinct chats;
- a chat's fill is learnt from the ids of the service's own posts (someone
  else's posts count too), kept in the database, and outlives a restart;
- each chat's fill shows in /metrics and on the status page;
- with every chat full, an upload fails at once with 507, on the native API
  and the S3 API alike, and nothing of it is stored.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select

from app.db.chat_fill import ChatFillRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import ChunkCopy
from app.db.session import session_scope
from tests.db.helpers import Database
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.running_service import (
    CHUNK,
    Service,
    ServiceLauncher,
    eventually,
    parse_metrics,
    payload,
)

CHATS = [-1001000000201, -1001000000202, -1001000000203]
LIMIT = 1000


async def database_fill(url: str, fill: dict[int, int] | None = None) -> dict[int, int]:
    """The chats' fill in the database, after raising it to `fill` (as
    another instance's posts would have)."""
    engine = create_engine(url)
    try:
        async with session_scope(create_sessionmaker(engine)) as session:
            repo = ChatFillRepository(session)
            await repo.raise_to(fill or {})
            return await repo.all()
    finally:
        await engine.dispose()


async def copies_by_chunk(service: Service) -> dict[int, list[int]]:
    """The chat of every copy, by chunk."""
    engine = create_engine(service.settings.database_url)
    try:
        async with session_scope(create_sessionmaker(engine)) as session:
            rows = await session.execute(select(ChunkCopy.chunk_id, ChunkCopy.chat_id))
            chats: dict[int, list[int]] = defaultdict(list)
            for chunk_id, chat_id in rows:
                chats[chunk_id].append(chat_id)
            return dict(chats)
    finally:
        await engine.dispose()


async def put(service: Service, name: str, data: bytes) -> int:
    async with service.client() as http:
        answer = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    return answer.status_code


async def metrics(service: Service) -> dict[str, float]:
    async with service.client() as http:
        return parse_metrics((await http.get("/metrics", headers=service.auth)).text)


async def test_a_full_chat_takes_no_new_writes_and_replicas_still_go_to_distinct_chats(
    launcher: ServiceLauncher, database: Database
) -> None:
    full, *others = CHATS
    # Another instance filled the first chat before this one started.
    await database_fill(database.url, {full: LIMIT})
    service = await launcher.start(storage_chat_ids=CHATS, replicas=2, chat_message_limit=LIMIT)

    assert await put(service, "spread.bin", payload(6 * CHUNK, seed=1)) == 201

    stored = await copies_by_chunk(service)
    assert len(stored) >= 6
    assert all(sorted(chats) == sorted(others) for chats in stored.values())
    assert service.sim.live_messages(full) == []
    scraped = await metrics(service)
    assert scraped[f'teleuploader_chat_messages{{chat="{full}"}}'] == LIMIT
    assert scraped["teleuploader_chat_message_limit"] == LIMIT
    for chat in others:
        newest = max(service.sim.live_messages(chat))
        assert scraped[f'teleuploader_chat_messages{{chat="{chat}"}}'] == newest
    async with service.client() as http:
        status = (await http.get("/api/status", headers=service.auth)).json()
    assert {row["chat_id"]: row["full"] for row in status["chats"]} == {
        full: True,
        others[0]: False,
        others[1]: False,
    }


async def test_a_chat_filling_up_is_left_for_the_others_and_stays_full_after_a_restart(
    launcher: ServiceLauncher, database: Database
) -> None:
    first, second = CHATS[:2]
    limit = 40

    def crowded(sim: object) -> None:
        for _ in range(limit - 1):  # someone else's posts: their ids count too
            sim.post_foreign(first)  # type: ignore[attr-defined]

    settings = {"storage_chat_ids": [first, second], "chat_message_limit": limit}
    service = await launcher.start(prepare=crowded, **settings)
    assert await put(service, "a.bin", payload(6 * CHUNK, seed=2)) == 201
    # Some chunk went to the first chat and took an id at the limit: full.
    assert max(service.sim.live_messages(first)) >= limit
    in_first = len(service.sim.live_messages(first))

    assert await put(service, "b.bin", payload(6 * CHUNK, seed=3)) == 201
    assert len(service.sim.live_messages(first)) == in_first

    # The database learns it (every few seconds, and at a clean stop) ...
    async def saved() -> bool:
        return (await database_fill(database.url)).get(first, 0) >= limit

    await eventually(saved)
    await launcher.stop(service)
    # ... and a restarted service (or another instance) starts with it.
    again = await launcher.start(sim=service.sim, **settings)
    assert (await metrics(again))[f'teleuploader_chat_messages{{chat="{first}"}}'] >= limit
    assert await put(again, "c.bin", payload(6 * CHUNK, seed=4)) == 201
    assert len(again.sim.live_messages(first)) == in_first


async def test_with_every_chat_full_an_upload_fails_at_once_with_507_and_nothing_is_stored(
    launcher: ServiceLauncher, database: Database
) -> None:
    await database_fill(database.url, dict.fromkeys(CHATS[:2], LIMIT))
    service = await launcher.start(
        storage_chat_ids=CHATS[:2],
        chat_message_limit=LIMIT,
        s3_credentials={ACCESS_KEY: SECRET},
    )
    sim = service.sim

    async with service.client() as http:
        refused = await http.put(
            "/api/files/big.bin", content=payload(3 * CHUNK), headers=service.auth
        )
        small = await http.put("/api/files/small.txt", content=b"tiny", headers=service.auth)
        listed = await http.get("/api/files", headers=service.auth)

    assert refused.status_code == 507, refused.text
    message = refused.json()["detail"]
    assert "CHAT_MESSAGE_LIMIT (1,000)" in message and "STORAGE_CHAT_IDS" in message
    # Inline content too: no snapshot or journal batch could carry its row.
    assert small.status_code == 507
    assert listed.json()["items"] == []
    assert sum(stats.calls.get("sendDocument", 0) for stats in sim.stats().values()) == 0
    assert all(sim.live_messages(chat) == [] for chat in CHATS[:2])

    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    error = await s3.error("put_object", Bucket="box", Key="k", Body=payload(3 * CHUNK))
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 507
    assert error.response["Error"]["Code"] == "StorageFull"
    upload = await s3("create_multipart_upload", Bucket="box", Key="parts")
    error = await s3.error(
        "upload_part",
        Bucket="box",
        Key="parts",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=payload(CHUNK),
    )
    assert error.response["Error"]["Code"] == "StorageFull"
    assert sum(stats.calls.get("sendDocument", 0) for stats in sim.stats().values()) == 0


async def test_no_ceiling_with_chat_message_limit_0(
    launcher: ServiceLauncher, database: Database
) -> None:
    await database_fill(database.url, {CHATS[0]: 10**9})
    service = await launcher.start(storage_chat_ids=CHATS[:1], chat_message_limit=0)
    assert await put(service, "a.bin", payload(2 * CHUNK)) == 201
    assert (await metrics(service))["teleuploader_chat_message_limit"] == 0
