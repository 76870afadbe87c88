"""Replicas, verified reads and the scrub (app/store/scrub.py, the reader's
checks), against a running service and the simulator with several storage
chats: chats lost, messages taken down, bytes flipped, a bot revoked."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter

import httpx
import pytest
from sqlalchemy import select

from app.db.models import Chunk, ChunkCopy, Piece, StoredObject
from app.db.session import session_scope
from app.store.services import Services
from app.telegram.errors import TelegramError
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.running_service import (
    CHUNK,
    Service,
    ServiceFactory,
    ServiceLauncher,
    eventually,
    payload,
)

CHATS = [-1001000000301, -1001000000302, -1001000000303]
FILES = 6


def services_of(service: Service) -> Services:
    services: Services = service.app.state.services
    return services


async def copies(service: Service) -> list[ChunkCopy]:
    async with session_scope(services_of(service).sessionmaker) as session:
        return list(await session.scalars(select(ChunkCopy).order_by(ChunkCopy.id)))


async def chunks(service: Service) -> list[Chunk]:
    async with session_scope(services_of(service).sessionmaker) as session:
        return list(await session.scalars(select(Chunk).order_by(Chunk.id)))


async def upload(service: Service, count: int = FILES, size: int = 3 * CHUNK) -> dict[str, bytes]:
    """`count` files of `size` bytes (chunked: over INLINE); public id -> bytes."""
    stored: dict[str, bytes] = {}
    async with service.client() as http:
        for n in range(count):
            data = payload(size + n, seed=100 + n)
            response = await http.put(f"/api/files/f{n}.bin", content=data, headers=service.auth)
            assert response.status_code == 201, response.text
            stored[response.json()["public_id"]] = data
    return stored


async def damaged(service: Service, files: dict[str, bytes]) -> set[str]:
    """The files that do not download whole and right: answered as damaged
    (502) when the first block of the file is, cut off (never ended short)
    when a later one is. None may be a 200 with other bytes."""
    found = set()
    async with service.client() as http:
        for public_id, data in files.items():
            try:
                response = await http.get(f"/f/{public_id}")
            except httpx.RemoteProtocolError:
                found.add(public_id)  # aborted after the headers
                continue
            if response.status_code == 200:
                assert response.content == data, "a 200 with wrong bytes"
            else:
                assert response.status_code == 502, response.text
                assert response.json()["error"] == "object_damaged"
                found.add(public_id)
    return found


async def readable(service: Service, files: dict[str, bytes]) -> int:
    """How many files download whole and right."""
    return len(files) - len(await damaged(service, files))


async def start(start_service: ServiceFactory, replicas: int, **overrides: object) -> Service:
    return await start_service(
        bots=4, storage_chat_ids=CHATS, replicas=replicas, scrub_period_seconds=0, **overrides
    )


# --- where copies go --------------------------------------------------------------------


async def test_each_chunk_is_two_independent_uploads_in_distinct_chats_by_distinct_bots(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=2)
    files = await upload(service)
    stored = await copies(service)
    by_chunk: dict[int, list[ChunkCopy]] = {}
    for copy in stored:
        by_chunk.setdefault(copy.chunk_id, []).append(copy)
    assert len(by_chunk) == len(await chunks(service)) >= FILES * 3
    for pair in by_chunk.values():
        assert len(pair) == 2
        assert pair[0].chat_id != pair[1].chat_id
        assert pair[0].bot_id != pair[1].bot_id
        # Two uploads of the bytes: two files on Telegram's side, so a
        # takedown of one leaves the other.
        assert pair[0].file_unique_id != pair[1].file_unique_id
        for copy in pair:
            assert service.sim.document_bytes(copy.chat_id, copy.message_id)
    # Every chat takes its share.
    per_chat = Counter(copy.chat_id for copy in stored)
    assert set(per_chat) == set(CHATS)
    assert max(per_chat.values()) - min(per_chat.values()) <= 2
    assert await readable(service, files) == FILES


async def test_a_chunk_is_committed_only_with_all_its_copies(
    start_service: ServiceFactory,
) -> None:
    """A copy that cannot be stored fails the upload: nothing visible, and the
    copies that were stored are deleted."""
    service = await start(start_service, replicas=2, max_attempts=2)
    service.sim.set_method_faults("sendDocument", fault_5xx_rate=1.0)
    async with service.client() as http:
        response = await http.put(
            "/api/files/doomed.bin", content=payload(3 * CHUNK), headers=service.auth
        )
    assert response.status_code == 503
    service.sim.set_method_faults("sendDocument", fault_5xx_rate=0.0)
    assert await copies(service) == []
    await eventually(lambda: all(not service.sim.live_messages(chat) for chat in CHATS), 20)


# --- losses with two copies -----------------------------------------------------------------


async def test_losing_any_one_chat_loses_nothing_and_a_scrub_restores_two_copies(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=2)
    files = await upload(service)
    service.sim.lose_chat(CHATS[1])

    assert await readable(service, files) == FILES
    report = await services_of(service).scrub.run_pass(deep=True)

    assert report.missing > 0 and report.repaired == report.missing
    assert (report.lost_objects, report.degraded_objects) == (0, 0)
    left = await copies(service)
    assert all(copy.chat_id != CHATS[1] for copy in left)
    assert Counter(copy.chunk_id for copy in left) == dict.fromkeys(
        {copy.chunk_id for copy in left}, 2
    )
    assert all(copy.state == "ok" for copy in left)
    for chunk_id in {copy.chunk_id for copy in left}:
        pair = [copy for copy in left if copy.chunk_id == chunk_id]
        assert pair[0].chat_id != pair[1].chat_id  # the two chats left
    assert await readable(service, files) == FILES


async def test_a_chat_that_another_call_found_gone_is_repaired_by_the_next_scrub(
    start_service: ServiceFactory,
) -> None:
    """The call that meets a lost chat first is often not the scrub's (a
    journal batch, a snapshot): its "chat not found" takes every bot out of
    the chat, and the scrub must still count the copies there as missing
    and repair them elsewhere, not take the chat for Telegram being unwell."""
    service = await start(start_service, replicas=2)
    files = await upload(service)
    service.sim.lose_chat(CHATS[1])
    dispatcher = services_of(service).dispatcher
    for _ in dispatcher.workers:
        with contextlib.suppress(TelegramError):
            await dispatcher.forward_message(CHATS[1], 1)
    assert not any(CHATS[1] in worker.chats for worker in dispatcher.workers.values())

    report = await services_of(service).scrub.run_pass(deep=False)

    assert report.missing > 0 and report.repaired == report.missing
    assert (report.lost_objects, report.degraded_objects) == (0, 0)
    assert all(copy.chat_id != CHATS[1] for copy in await copies(service))
    assert await readable(service, files) == FILES


# Postgres too: reads report bad copies in the background while the pass
# marks, repairs and retires them (conditional state changes, row locks).
@pytest.mark.both_backends
async def test_taken_down_messages_flipped_bytes_and_a_revoked_bot_lose_nothing(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=2)
    files = await upload(service)
    stored = await copies(service)
    revoked = stored[0].bot_id
    rng = random.Random(7)
    # One copy of six chunks, none of them the revoked bot's.
    first_of_each = {copy.chunk_id: copy for copy in reversed(stored)}.values()
    victims = rng.sample([copy for copy in first_of_each if copy.bot_id != revoked], 6)
    for copy in victims[:3]:
        service.sim.take_down(copy.chat_id, copy.message_id)
    for copy in victims[3:]:
        service.sim.corrupt(copy.chat_id, copy.message_id)
    service.sim.revoke(revoked)

    assert await readable(service, files) == FILES
    report = await services_of(service).scrub.run_pass(deep=True)

    assert report.corrupt == 3
    # Taken down, and every copy of the revoked bot (reachable only through
    # others' forwards: replaced by copies of their own).
    assert report.missing == 3 + sum(1 for copy in stored if copy.bot_id == revoked)
    assert (report.lost_objects, report.degraded_objects) == (0, 0)
    left = await copies(service)
    assert [c for c in left if c.state != "ok" or c.bot_id == revoked] == []
    assert {copy.id for copy in victims}.isdisjoint(copy.id for copy in left)
    # Every copy left holds the chunk's bytes: a deep pass finds nothing more.
    again = await services_of(service).scrub.run_pass(deep=True)
    assert (again.missing, again.corrupt, again.repaired) == (0, 0, 0)
    assert await readable(service, files) == FILES


# Postgres too: a read's report and the repair change one chunk's copies.
@pytest.mark.both_backends
async def test_a_read_reports_a_bad_copy_and_the_scrub_replaces_it(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=2)
    files = await upload(service, count=1)
    (first, *_rest) = await copies(service)
    service.sim.corrupt(first.chat_id, first.message_id)

    assert await readable(service, files) == 1  # read around, silently

    async def marked() -> bool:
        return any(c.id == first.id and c.state == "corrupt" for c in await copies(service))

    await eventually(marked)
    health = await services_of(service).scrub.health()
    assert (health.objects_degraded, health.objects_lost) == (1, 0)
    async with service.client() as http:
        public_id = next(iter(files))
        info = (await http.get(f"/file/{public_id}/info")).json()
    assert info["damage"] == "degraded"

    await services_of(service).scrub.run_pass(deep=False)
    health = await services_of(service).scrub.health()
    assert (health.objects_degraded, health.objects_lost) == (0, 0)
    async with service.client() as http:
        info = (await http.get(f"/file/{public_id}/info")).json()
    assert info["damage"] is None


# Postgres too: the repairs page through every chunk (a cursor in SQL).
@pytest.mark.both_backends
async def test_replicas_raised_on_a_running_deployment_are_brought_up_by_the_scrub(
    launcher: ServiceLauncher,
) -> None:
    before = await start(launcher.start, replicas=1)
    files = await upload(before, count=2)
    stored = len(await chunks(before))
    assert len(await copies(before)) == stored
    await launcher.stop(before)

    # The same database and the same Telegram, restarted with REPLICAS=2.
    after = await start(launcher.start, replicas=2, sim=before.sim)
    health = await services_of(after).scrub.health()
    assert (health.objects_degraded, health.objects_lost) == (2, 0)
    report = await services_of(after).scrub.run_pass(deep=False)

    assert report.repaired == stored
    pairs = Counter(copy.chunk_id for copy in await copies(after))
    assert set(pairs.values()) == {2}
    for chunk_id in pairs:
        chats = {c.chat_id for c in await copies(after) if c.chunk_id == chunk_id}
        assert len(chats) == 2
    assert await readable(after, files) == 2


# --- one copy: damage is answered, never served -----------------------------------------


@pytest.mark.parametrize("fault", ["take_down", "corrupt"])
async def test_with_one_copy_a_damaged_object_is_a_clear_error_never_a_200(
    start_service: ServiceFactory, fault: str
) -> None:
    service = await start(start_service, replicas=1)
    files = await upload(service)
    stored = await copies(service)
    victim = stored[len(stored) // 2]
    getattr(service.sim, fault)(victim.chat_id, victim.message_id)
    async with session_scope(services_of(service).sessionmaker) as session:
        victim_offset = await session.scalar(
            select(Piece.start).where(Piece.chunk_id == victim.chunk_id)
        )

    (public_id,) = await damaged(service, files)
    async with service.client() as http:
        # A damaged chunk the read meets after the first block cuts the
        # download; one met first is a 502 before any header.
        info = (await http.get(f"/file/{public_id}/info")).json()
        answer = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={victim_offset}-"})
        assert answer.status_code == 502
        assert "damaged" in answer.json()["detail"]
    assert info["damage"] == "lost"
    health = await services_of(service).scrub.health()
    assert health.objects_lost == 1


async def test_a_range_read_checks_only_the_blocks_it_touches(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=1)
    data = payload(CHUNK)
    async with service.client() as http:
        put = await http.put("/api/files/one.bin", content=data, headers=service.auth)
        public_id = put.json()["public_id"]
        (copy,) = await copies(service)
        # CHUNK (64 KiB) is one block: flip its last byte.
        service.sim.corrupt(copy.chat_id, copy.message_id, offset=CHUNK - 1)
        whole = await http.get(f"/f/{public_id}")
        start_only = await http.get(f"/f/{public_id}", headers={"Range": "bytes=0-99"})
    # The block holds the flipped byte: even its first 100 bytes are refused.
    assert whole.status_code == start_only.status_code == 502


async def test_a_damaged_chunk_after_the_first_cuts_the_download_never_ends_it_short(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=1)
    data = payload(6 * CHUNK)
    async with service.client() as http:
        put = await http.put("/api/files/long.bin", content=data, headers=service.auth)
        public_id = put.json()["public_id"]
    # The copy of the object's last piece: chunk ids follow the order in
    # which the parallel uploads finished, not the pieces' order.
    async with session_scope(services_of(service).sessionmaker) as session:
        last_chunk = await session.scalar(select(Piece.chunk_id).order_by(Piece.start.desc()))
    (last,) = [copy for copy in await copies(service) if copy.chunk_id == last_chunk]
    service.sim.take_down(last.chat_id, last.message_id)
    received = bytearray()
    async with service.client() as http, http.stream("GET", f"/f/{public_id}") as response:
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            async for piece in response.aiter_raw():
                received += piece
    assert len(received) < len(data)
    assert data.startswith(bytes(received))


async def test_s3_clients_hear_a_damaged_object_as_object_damaged(
    start_service: ServiceFactory,
) -> None:
    service = await start(start_service, replicas=1, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    await s3("put_object", Bucket="box", Key="k", Body=payload(2 * CHUNK))
    for copy in await copies(service):
        service.sim.take_down(copy.chat_id, copy.message_id)
    error = await s3.error("get_object", Bucket="box", Key="k")
    assert error.response["Error"]["Code"] == "ObjectDamaged"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    # Its metadata is whole: HEAD still answers.
    head = await s3("head_object", Bucket="box", Key="k")
    assert head["ContentLength"] == 2 * CHUNK


# Postgres too: the spool's rows, and the copies the flush records.
@pytest.mark.both_backends
async def test_spooled_multipart_parts_are_flushed_as_two_copies_too(
    start_service: ServiceFactory,
) -> None:
    """Parts answered from the spool, completed before any reached Telegram
    (so nothing was sent before), then flushed: every chunk of the object
    has its two copies, in two chats. Before, the check ran before the flush
    and held by construction."""
    service = await start(start_service, replicas=2, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    parts = [payload(CHUNK, seed=n) for n in range(4)]
    with service.sim.holding("sendDocument"):
        upload_id = (await s3("create_multipart_upload", Bucket="box", Key="m"))["UploadId"]
        etags = [
            (
                await s3(
                    "upload_part",
                    Bucket="box",
                    Key="m",
                    UploadId=upload_id,
                    PartNumber=n,
                    Body=part,
                )
            )["ETag"]
            for n, part in enumerate(parts, start=1)
        ]
        await s3(
            "complete_multipart_upload",
            Bucket="box",
            Key="m",
            UploadId=upload_id,
            MultipartUpload={
                "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]
            },
        )
        assert await copies(service) == []  # all of it in the spool

    async def object_chunks() -> set[int]:
        async with session_scope(services_of(service).sessionmaker) as session:
            return set(
                await session.scalars(
                    select(Piece.chunk_id)
                    .join(StoredObject, StoredObject.id == Piece.object_id)
                    .where(StoredObject.bucket == "box", StoredObject.key == "m")
                )
            )

    # Flushed: the object has its pieces (until then it is read from the spool).
    await eventually(object_chunks, within=30)
    stored = await copies(service)
    assert {copy.chunk_id for copy in stored} == await object_chunks()
    for chunk_id, count in Counter(copy.chunk_id for copy in stored).items():
        assert count == 2
        assert len({c.chat_id for c in stored if c.chunk_id == chunk_id}) == 2
    response = await s3("get_object", Bucket="box", Key="m")
    body = await asyncio.to_thread(response["Body"].read)
    assert body == b"".join(parts)
