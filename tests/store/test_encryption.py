"""Encryption at rest end to end (app/store/encryption.py and the paths that
seal and open: writer, copy_fetch, scrub), against the Bot API simulator:
what Telegram holds, what a client reads, damaged and swapped copies, and
master keys added, removed and rotated. docs/encryption.md."""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict

import httpx
import pytest
from sqlalchemy import select

from app.cli.main import main
from app.db.models import Chunk, ChunkCopy, Piece, SpooledPart
from app.db.session import session_scope
from app.sealing.layout import FRAME_SIZE, sealed_size
from app.store.services import Services
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, read
from tests.running_service import Service, ServiceFactory, ServiceLauncher, eventually

# Three frames a chunk: a Range read can start and end inside a chunk.
CHUNK = 3 * FRAME_SIZE
K1 = "k1:" + base64.b64encode(bytes(range(32))).decode()
K2 = "k2:" + base64.b64encode(bytes(range(100, 132))).decode()
MARKER = b"PLAINTEXT-MARKER-35"
CHATS = [-1001000000351, -1001000000352]


def marked(size: int, seed: int = 0) -> bytes:
    """`size` bytes that hold MARKER every 1,000 bytes (so in every frame)."""
    unit = MARKER + bytes((seed + i) % 251 for i in range(1000 - len(MARKER)))
    return (unit * (size // 1000 + 1))[:size]


def services_of(service: Service) -> Services:
    services: Services = service.app.state.services
    return services


async def rows(service: Service) -> tuple[list[Chunk], list[ChunkCopy]]:
    async with session_scope(services_of(service).sessionmaker) as session:
        chunks = list(await session.scalars(select(Chunk).order_by(Chunk.id)))
        copies = list(await session.scalars(select(ChunkCopy).order_by(ChunkCopy.id)))
    return chunks, copies


async def nothing_spooled(service: Service) -> bool:
    """Every spooled part is in Telegram, its chunks' copies recorded."""
    async with session_scope(services_of(service).sessionmaker) as session:
        return await session.scalar(select(SpooledPart.id).limit(1)) is None


async def put(service: Service, name: str, data: bytes) -> str:
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    public_id: str = response.json()["public_id"]
    return public_id


async def get(service: Service, public_id: str, range_: str | None = None) -> httpx.Response:
    headers = {"Range": f"bytes={range_}"} if range_ else {}
    async with service.client() as http:
        return await http.get(f"/f/{public_id}", headers=headers)


async def test_telegram_holds_only_ciphertext_and_clients_read_every_byte_back(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(
        bots=2, encryption_keys=K1, chunk_size=CHUNK, s3_credentials={ACCESS_KEY: SECRET}
    )
    data = marked(2 * CHUNK + 5000)
    public_id = await put(service, f"{MARKER.decode()}.bin", data)
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    answer = await s3("put_object", Bucket="box", Key="big", Body=data)
    assert answer["ServerSideEncryption"] == "AES256"
    await s3("put_object", Bucket="box", Key="tiny", Body=b"in the database")
    # Write-behind multipart parts are sealed as the spool flushes them;
    # a copy shares the sealed chunks.
    upload = await s3("create_multipart_upload", Bucket="box", Key="parts")
    parts = [marked(CHUNK, seed=5), marked(1000, seed=6)]
    etags = [
        (
            await s3(
                "upload_part",
                Bucket="box",
                Key="parts",
                UploadId=upload["UploadId"],
                PartNumber=n,
                Body=part,
            )
        )["ETag"]
        for n, part in enumerate(parts, start=1)
    ]
    done = await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="parts",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": n} for n, e in enumerate(etags, 1)]},
    )
    assert done["ServerSideEncryption"] == "AES256" and done["ETag"].endswith('-2"')
    copied = await s3("copy_object", Bucket="box", Key="copy", CopySource="box/parts")
    assert copied["ServerSideEncryption"] == "AES256"
    got = await s3("get_object", Bucket="box", Key="copy")
    assert await asyncio.to_thread(got["Body"].read) == b"".join(parts)

    # Complete answered once the parts were in the spool; they reach
    # Telegram after it (COMPLETE_WAITS_FOR=spool).
    await eventually(lambda: nothing_spooled(service))
    chunks, copies = await rows(service)
    assert chunks and all(chunk.seal_key_id == "k1" for chunk in chunks)
    size_of = {chunk.id: chunk.size for chunk in chunks}
    for copy in copies:
        stored = service.sim.document_bytes(copy.chat_id, copy.message_id)
        assert len(stored) == sealed_size(size_of[copy.chunk_id])
        assert service.sim.message_caption(copy.chat_id, copy.message_id) is None
    files = service.sim.stored_files()
    assert len(files) == len(copies)
    assert [(chat, message) for chat, message, body in files if MARKER in body] == []

    whole = await get(service, public_id)
    assert whole.status_code == 200 and whole.content == data
    # From inside one chunk to inside the next, across frame boundaries.
    start, end = CHUNK + FRAME_SIZE - 10, CHUNK + 2 * FRAME_SIZE + 10
    middle = await get(service, public_id, f"{start}-{end - 1}")
    assert middle.status_code == 206 and middle.content == data[start:end]
    got = await s3("get_object", Bucket="box", Key="big", Range="bytes=1000-200999")
    assert got["ServerSideEncryption"] == "AES256"
    assert await asyncio.to_thread(got["Body"].read) == data[1000:201000]
    head = await s3("head_object", Bucket="box", Key="tiny")
    assert "ServerSideEncryption" not in head  # inline: never sent to Telegram


async def test_a_flipped_byte_is_read_around_repaired_under_a_new_salt_or_refused(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(
        bots=2,
        storage_chat_ids=CHATS,
        replicas=2,
        scrub_period_seconds=0,
        encryption_keys=K1,
        chunk_size=CHUNK,
    )
    data = marked(2 * CHUNK, seed=1)
    public_id = await put(service, "two-copies.bin", data)
    _, copies = await rows(service)
    by_chunk: dict[int, list[ChunkCopy]] = defaultdict(list)
    for copy in copies:
        by_chunk[copy.chunk_id].append(copy)
    async with session_scope(services_of(service).sessionmaker) as session:
        order = select(Piece.chunk_id).order_by(Piece.start)
        first, second = list(await session.scalars(order))
    assert all(len({c.seal_salt for c in pair}) == 2 for pair in by_chunk.values())

    # One copy of the second chunk damaged inside its middle frame: the
    # other copy serves, whole and by Range.
    victim = by_chunk[second][0]
    service.sim.corrupt(victim.chat_id, victim.message_id, offset=FRAME_SIZE + 100)
    assert (await get(service, public_id)).content == data
    part = await get(service, public_id, f"{CHUNK + FRAME_SIZE}-{CHUNK + FRAME_SIZE + 999}")
    assert part.content == data[CHUNK + FRAME_SIZE : CHUNK + FRAME_SIZE + 1000]

    # The scrub opens every copy (that is its check) and replaces the bad
    # one with a copy sealed under a salt of its own.
    report = await services_of(service).scrub.run_pass(deep=True)
    assert report.repaired == 1 and report.lost_objects == 0
    _, copies = await rows(service)
    pair = [copy for copy in copies if copy.chunk_id == second]
    assert len(pair) == 2 and victim.id not in {copy.id for copy in pair}
    assert len({copy.seal_salt for copy in pair} | {victim.seal_salt}) == 3
    assert (await get(service, public_id)).content == data

    # Both copies of the object's first chunk damaged: refused before any
    # header, never served.
    for copy in by_chunk[first]:
        service.sim.corrupt(copy.chat_id, copy.message_id, offset=5)
    refused = await get(service, public_id)
    assert refused.status_code == 502
    assert refused.json()["error"] == "object_damaged"


async def test_swapped_stored_chunks_are_refused_never_served(
    start_service: ServiceFactory,
) -> None:
    """Two chunks of one object, their files exchanged on Telegram's side:
    each holds frames sealed under another chunk's key, so neither opens."""
    service = await start_service(bots=2, encryption_keys=K1, chunk_size=CHUNK)
    data = marked(2 * CHUNK, seed=2)
    public_id = await put(service, "swapped.bin", data)
    _, (one, two) = await rows(service)
    service.sim.swap_files((one.chat_id, one.message_id), (two.chat_id, two.message_id))
    whole = await get(service, public_id)
    assert whole.status_code == 502 and whole.json()["error"] == "object_damaged"
    second = await get(service, public_id, f"{CHUNK + 10}-{CHUNK + 20}")
    assert second.status_code == 502


async def chunks_under(service: Service, key_id: str) -> list[int]:
    async with session_scope(services_of(service).sessionmaker) as session:
        return list(await session.scalars(select(Chunk.id).where(Chunk.seal_key_id == key_id)))


def run_cli(monkeypatch: pytest.MonkeyPatch, service: Service, keys: str, *argv: str) -> int:
    monkeypatch.setenv("DATABASE_URL", service.settings.database_url)
    monkeypatch.setenv("ENCRYPTION_KEYS", keys)
    return main(["encryption", *argv])


@pytest.mark.both_backends  # rotation's conditional UPDATE and the counts are SQL of their own
async def test_keys_added_removed_rotated_during_uploads_and_plaintext_migrated_lose_nothing(
    launcher: ServiceLauncher,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    common = {"bots": 2, "chunk_size": CHUNK, "s3_credentials": {ACCESS_KEY: SECRET}}
    files: dict[str, bytes] = {}

    # Before encryption: plaintext, and it stays readable.
    plain = await launcher.start(**common)
    files[await put(plain, "plain.bin", marked(CHUNK + 1, seed=3))] = marked(CHUNK + 1, seed=3)
    sim = plain.sim

    async def restart(previous: Service, keys: str) -> Service:
        """The same database and Telegram, other ENCRYPTION_KEYS."""
        await launcher.stop(previous)
        return await launcher.start(sim=sim, encryption_keys=keys, **common)

    first = await restart(plain, K1)
    sealed_data = marked(2 * CHUNK, seed=4)
    sealed_id = await put(first, "under-k1.bin", sealed_data)
    files[sealed_id] = sealed_data
    # A multipart upload under way across the restarts: its first part's
    # chunks are sealed under k1, and its last part is sent while the
    # rotation re-wraps them.
    s3 = S3(first)
    await s3("create_bucket", Bucket="box")
    parts = [marked(2 * CHUNK, seed=5), marked(CHUNK + 3, seed=6)]
    upload_id = (await s3("create_multipart_upload", Bucket="box", Key="mp"))["UploadId"]
    etags = [
        (
            await s3(
                "upload_part",
                Bucket="box",
                Key="mp",
                UploadId=upload_id,
                PartNumber=1,
                Body=parts[0],
            )
        )["ETag"]
    ]
    await eventually(lambda: nothing_spooled(first))

    # k1 gone: its objects are a clear error, to both APIs; plaintext still reads.
    without = await restart(first, K2)
    refused = await get(without, sealed_id)
    assert refused.status_code == 503
    assert refused.json()["error"] == "encryption_key_unavailable"
    assert "k1" in refused.json()["detail"] and K1[3:] not in refused.text
    s3 = S3(without)
    await s3("put_object", Bucket="box", Key="k", Body=b"x" * (CHUNK + 1))
    plain_id = next(iter(files))
    assert (await get(without, plain_id)).content == files[plain_id]

    # k2 first, k1 still there: rotation runs while uploads are in flight.
    both = await restart(without, f"{K2},{K1}")
    s3 = S3(both)
    before = set(await chunks_under(both, "k2"))
    sim.hold("sendDocument")
    try:
        # Three chunks or four each: the first two are sent (two bots) and recorded,
        # the third waits at the gate. Held from their first send, the
        # uploads had no chunk row yet: the rotation raced nothing.
        uploads = [
            asyncio.create_task(
                put(both, f"during-{n}.bin", marked(3 * CHUNK + 7 * n, seed=10 + n))
            )
            for n in range(3)
        ]
        last_part = asyncio.create_task(
            s3(
                "upload_part",
                Bucket="box",
                Key="mp",
                UploadId=upload_id,
                PartNumber=2,
                Body=parts[1],
            )
        )
        await eventually(lambda: sim.held_calls("sendDocument") >= 2)
        sim.release("sendDocument")
        sim.hold("sendDocument")  # the sends just let go go on; the next ones wait
        await eventually(lambda: sim.held_calls("sendDocument") > 0)

        async def recorded_during() -> bool:
            return bool(set(await chunks_under(both, "k2")) - before)

        await eventually(recorded_during)
        # Rows the rotation re-wraps under uploads in flight: the part's.
        under_k1 = await chunks_under(both, "k1")
        assert len(under_k1) >= 2
        rotated = await asyncio.to_thread(run_cli, monkeypatch, both, f"{K2},{K1}", "rotate")
        assert rotated == 0, capsys.readouterr().err
    finally:
        sim.release("sendDocument")
    for n, upload in enumerate(uploads):
        files[await upload] = marked(3 * CHUNK + 7 * n, seed=10 + n)
    etags.append((await last_part)["ETag"])
    listed = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]
    await s3(
        "complete_multipart_upload",
        Bucket="box",
        Key="mp",
        UploadId=upload_id,
        MultipartUpload={"Parts": listed},
    )
    await eventually(lambda: nothing_spooled(both))
    assert not set(under_k1) & set(await chunks_under(both, "k1"))
    assert "re-wrapped under k2" in capsys.readouterr().out
    assert await asyncio.to_thread(run_cli, monkeypatch, both, f"{K2},{K1}", "status") == 0
    status = capsys.readouterr().out
    assert "k1 " not in status and "k2 " in status and "(plaintext)" in status

    # k1 removed for good: everything reads, byte for byte.
    after = await restart(both, K2)
    for public_id, data in files.items():
        response = await get(after, public_id)
        assert response.status_code == 200 and response.content == data, public_id
    assert await read(S3(after), "box", "mp") == b"".join(parts)

    # The plaintext chunks sealed through the running service; their
    # plaintext messages deleted from Telegram.
    migrate = ["migrate", "--wait", "--url", after.url, "--key", after.key]
    assert await asyncio.to_thread(run_cli, monkeypatch, after, K2, *migrate) == 0
    chunks, _ = await rows(after)
    assert all(chunk.seal_key_id == "k2" for chunk in chunks)
    await eventually(
        lambda: not [body for _, _, body in sim.stored_files(include_gone=False) if MARKER in body]
    )
    for public_id, data in files.items():
        assert (await get(after, public_id)).content == data, public_id
