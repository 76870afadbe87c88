"""Snapshots and restore end to end (real HTTP, boto3 for S3, the Telegram
simulator): the service writes its metadata into the storage chat and pins a
manifest there; the database is lost; `teleuploader restore` rebuilds it from
the chat alone; the service comes back with every link, S3 object and key."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.cli.main import main
from app.db.engine import create_engine
from app.db.models import Base
from app.store.channel_audit import audit_channel
from app.store.journal import read_batch
from app.store.services import Services
from app.store.snapshot import MANIFEST_FORMAT
from app.telegram.client import BotClient
from tests.conftest import empty_tables
from tests.db.helpers import Database
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.running_service import CHAT_ID, CHUNK, Service, ServiceLauncher, eventually, payload
from tests.store.test_encryption import K1, K2, run_cli

HOUR = 3600


async def lose_the_database(database: Database) -> None:
    """Every row gone, as on a new, migrated database."""
    if database.backend == "postgres":
        empty_tables(database)  # TRUNCATE ... RESTART IDENTITY: the ids start over
        return
    engine = create_engine(database.url)
    try:
        async with engine.begin() as connection:
            for table in reversed(Base.metadata.sorted_tables):
                await connection.execute(table.delete())
            await connection.execute(text("DELETE FROM sqlite_sequence"))
    finally:
        await engine.dispose()


async def restore(
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *options: str,
    keys: str | None = None,
) -> tuple[int, str, str]:
    """`teleuploader restore` with only the bots, the chat and the database."""
    settings = service.settings
    monkeypatch.chdir(Path(__file__).parent)  # no .env file around
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_ID", str(CHAT_ID))
    monkeypatch.setenv("TELEGRAM_API_BASE", settings.telegram_api_base)
    monkeypatch.setenv("DATABASE_URL", settings.database_url)
    if keys is not None:
        monkeypatch.setenv("ENCRYPTION_KEYS", keys)
    # In a thread, so that this loop goes on serving the simulator.
    code = await asyncio.to_thread(main, ["restore", *options])
    out, err = capsys.readouterr()
    return code, out, err


async def put_file(service: Service, name: str, data: bytes) -> str:
    async with service.client() as http:
        answer = await http.put(f"/api/files/{name}", headers=service.auth, content=data)
    assert answer.status_code in (200, 201), answer.text
    public_id: str = answer.json()["public_id"]
    return public_id


async def get_link(service: Service, public_id: str) -> bytes:
    async with service.client() as http:
        answer = await http.get(f"/f/{public_id}")
    assert answer.status_code == 200, answer.text
    return answer.content


async def make_share(service: Service, **body: Any) -> dict[str, Any]:
    async with service.client() as http:
        answer = await http.post("/api/shares", json=body, headers=service.auth)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


async def take_snapshot(service: Service) -> dict[str, Any]:
    async with service.client() as http:
        answer = await http.post("/api/admin/snapshot", headers=service.auth)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def snapshots_in_chat(service: Service) -> dict[datetime, set[int]]:
    """The snapshots the chat holds, read from the messages Telegram still has
    (as a restore would: the manifests name their pieces, journal batches
    their snapshot), by taken_at: each one's live messages."""
    live = set(service.live_messages())
    found: dict[datetime, set[int]] = {}
    for _chat, message_id, data in service.sim.stored_files(include_gone=False):
        try:
            manifest = json.loads(data)
        except ValueError:
            manifest = None
        if isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT:
            pieces = {int(piece["message_id"]) for piece in manifest["pieces"]}
            found.setdefault(when(manifest["taken_at"]), set()).update(
                {message_id, *(pieces & live)}
            )
            continue
        try:
            header, _changes = read_batch(data)
        except ValueError:
            continue  # a chunk, a snapshot's piece, a probe
        found.setdefault(when(header["taken_at"]), set()).add(message_id)
    return found


def when(taken_at: str) -> datetime:
    return datetime.fromisoformat(taken_at.replace("Z", "+00:00"))


# Both backends: the restore's bulk inserts and its id sequences are SQL
# that differs (Postgres sequences do not follow explicit ids).
@pytest.mark.both_backends
async def test_a_lost_database_comes_back_from_the_chat_with_links_objects_and_keys(
    launcher: ServiceLauncher,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Journal rounds only when the test ships one (and at the stop).
    first = await launcher.start(
        snapshot_interval_seconds=HOUR, journal_seconds=HOUR, s3_credentials={ACCESS_KEY: SECRET}
    )
    small, big = b"inline bytes", payload(2 * CHUNK + 7, seed=3)
    small_id = await put_file(first, "note.txt", small)
    big_id = await put_file(first, "big.bin", big)
    s3 = S3(first)
    await s3("create_bucket", Bucket="box")
    body = payload(CHUNK + 5, seed=4)
    put = await s3("put_object", Bucket="box", Key="a/b.bin", Body=body, Metadata={"k": "v"})
    # A share with a password and a download used: in the snapshot.
    guarded = await make_share(first, file=small_id, password="pw", max_downloads=5)
    async with first.client() as http:
        got = await http.get(guarded["download_url"], auth=("", "pw"))
        assert got.content == small
    taken = await take_snapshot(first)
    assert taken["taken"] and taken["rows"]["objects"] == 3 and taken["pieces"] == 1
    # Written after the snapshot: the snapshot at the clean stop carries it.
    late_id = await put_file(first, "late.txt", b"after the snapshot")
    late_share = await make_share(first, file=late_id)
    # A journal batch of the snapshot, here rather than left to the stop:
    # the stop's round may run out of its share of the grace (1 s of the
    # tests' 5) on a loaded machine and ship nothing.
    services: Services = first.app.state.services
    assert (await services.journal.ship()).messages == 1
    await launcher.stop(first)
    # The snapshot on demand with its batch (and whatever batch the stop
    # shipped), and the one taken at the stop.
    in_chat = snapshots_in_chat(first)
    on_demand, at_stop = sorted(in_chat)
    assert on_demand == when(taken["taken_at"]) and len(in_chat[on_demand]) >= 3
    await lose_the_database(database)

    code, out, _err = await restore(first, monkeypatch, capsys)

    assert code == 0, out + _err
    assert "objects 4" in out and "api_keys 1" in out and "not found: 0" in out
    assert "shares 2" in out
    again, _out, err = await restore(first, monkeypatch, capsys)
    assert again == 2 and "the database is not empty" in err
    second = await launcher.start(
        sim=first.sim, snapshot_interval_seconds=HOUR, s3_credentials={ACCESS_KEY: SECRET}
    )
    second.key = first.key  # the old key, restored
    assert await get_link(second, small_id) == small
    assert await get_link(second, big_id) == big
    assert await get_link(second, late_id) == b"after the snapshot"
    # The shares' links work as they did: the password still asked for,
    # the download counted before the snapshot still counted.
    guarded_bytes = guarded["download_url"].removeprefix(first.url)  # the same link, served anew
    late_bytes = late_share["download_url"].removeprefix(first.url)
    async with second.client() as http:
        assert (await http.get(guarded_bytes)).status_code == 401
        assert (await http.get(guarded_bytes, auth=("", "pw"))).content == small
        assert (await http.get(late_bytes)).content == b"after the snapshot"
        restored = await http.get(f"/api/shares/{guarded['id']}", headers=second.auth)
    # The download before the snapshot, and the one just now: download
    # sessions are not restored, so it is a new one.
    assert restored.json()["downloads"] == 2
    s3 = S3(second)
    got = await s3("get_object", Bucket="box", Key="a/b.bin")
    assert await asyncio.to_thread(got["Body"].read) == body
    assert got["Metadata"] == {"k": "v"}
    assert got["ETag"] == put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    # New rows take new ids: an upload after the restore works and keeps the old ones.
    new_id = await put_file(second, "new.txt", b"new")
    assert await get_link(second, new_id) == b"new"
    assert await get_link(second, small_id) == small
    # The restored database knows the snapshots in the chat: a new one makes
    # three, and the oldest goes, every message of it (its piece, its
    # manifest, its journal batches); the one restored from stays whole.
    gone = in_chat[on_demand]
    newest = await take_snapshot(second)
    assert newest["pruned_messages"] == len(gone)
    await eventually(lambda: not gone & set(second.live_messages()), within=60)
    now_in_chat = snapshots_in_chat(second)
    assert sorted(now_in_chat) == [at_stop, when(newest["taken_at"])]
    assert in_chat[at_stop] <= now_in_chat[at_stop]


async def test_a_failed_snapshot_leaves_the_previous_one_pinned_and_restorable(
    launcher: ServiceLauncher,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = await launcher.start(
        snapshot_interval_seconds=HOUR, journal_seconds=HOUR, shutdown_grace_seconds=1
    )
    kept_id = await put_file(service, "kept.txt", b"in the first snapshot")
    first = await take_snapshot(service)
    await put_file(service, "lost.txt", b"only in the database")
    # Every bot loses its right to post: the next snapshot's first send fails.
    for bot_id in service.sim.bot_ids:
        service.sim.demote(bot_id, CHAT_ID)
    async with service.client() as http:
        failed = await http.post("/api/admin/snapshot", headers=service.auth)
    assert failed.status_code >= 400
    await launcher.stop(service)  # its stop's snapshot fails the same way
    await lose_the_database(database)

    code, out, _err = await restore(service, monkeypatch, capsys, "--json")

    assert code == 0, out + _err
    # The service's log lines share stdout; the report is the last line.
    report = json.loads(out.strip().splitlines()[-1])
    when = datetime.fromisoformat(first["taken_at"].replace("Z", "+00:00"))
    assert datetime.fromisoformat(report["taken_at"]) == when
    assert report["restored"]["objects"] == 1 and report["problems"] == []
    for bot_id in service.sim.bot_ids:
        service.sim.unkick(bot_id, CHAT_ID)
    back = await launcher.start(sim=service.sim)
    back.key = service.key
    assert await get_link(back, kept_id) == b"in the first snapshot"


async def test_with_encryption_keys_the_snapshot_is_sealed_and_restores_with_them(
    launcher: ServiceLauncher,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Small chunks: the snapshot is cut into several pieces, each sealed.
    # No journal: its batch at the stop is a message more for the final
    # snapshot to list, and its manifest would outgrow these tiny chunks
    # (tests/store/test_journal.py seals batches).
    small = {"chunk_size": 1024, "inline_threshold": 512, "journal_seconds": 0}
    service = await launcher.start(snapshot_interval_seconds=HOUR, encryption_keys=K1, **small)
    secret = b"inline words no one may read in the chat"
    public_id = await put_file(service, "secret.txt", secret)
    big = payload(3000, seed=5)
    big_id = await put_file(service, "big.bin", big)
    assert (await take_snapshot(service))["pieces"] >= 2
    await launcher.stop(service)
    await lose_the_database(database)
    # No document in the chat is a readable (gzip) snapshot: the pieces are sealed.
    assert not [m for _chat, m, data in service.sim.stored_files() if data[:2] == b"\x1f\x8b"]

    refused, _out, err = await restore(service, monkeypatch, capsys)
    assert refused == 2 and "ENCRYPTION_KEYS" in err
    code, out, err = await restore(service, monkeypatch, capsys, keys=K1)

    assert code == 0, out + err
    back = await launcher.start(sim=service.sim, encryption_keys=K1, **small)
    back.key = service.key
    assert await get_link(back, public_id) == secret
    assert await get_link(back, big_id) == big


async def test_a_snapshot_no_bot_may_pin_is_not_sent(launcher: ServiceLauncher) -> None:
    service = await launcher.start(snapshot_interval_seconds=HOUR, journal_seconds=HOUR)
    await put_file(service, "kept.txt", b"a row for the snapshot")
    sim = service.sim
    for bot_id in sim.bot_ids:  # admins that may post, not pin
        sim.restrict(bot_id, CHAT_ID, can_edit_messages=False)
    posted = sim.message_count(CHAT_ID)

    async with service.client() as http:
        refused = await http.post("/api/admin/snapshot", headers=service.auth)

    assert refused.status_code == 502, refused.text
    assert "can_edit_messages" in refused.json()["detail"]
    assert sim.message_count(CHAT_ID) == posted  # not a piece, not a manifest
    assert sum(s.calls.get("sendDocument", 0) for s in sim.stats().values()) == 0

    # One bot with the right is enough: it pins what another may have posted.
    sim.unkick(sim.bot_ids[2], CHAT_ID)
    taken = await take_snapshot(service)
    assert taken["taken"]
    pinned = await service.app.state.services.dispatcher.call(
        sim.bot_ids[0], "getChat", lambda client: client.pinned_message(CHAT_ID)
    )
    assert pinned is not None and sim.stats()[sim.bot_ids[2]].calls["pinChatMessage"] == 1


async def test_the_pins_service_message_is_counted_wherever_its_id_falls(
    launcher: ServiceLauncher,
) -> None:
    # A fresh chat: the service has no watermark there yet.
    service = await launcher.start(snapshot_interval_seconds=HOUR, journal_seconds=HOUR)
    sim = service.sim
    with sim.holding("pinChatMessage"):
        snapshot = asyncio.create_task(take_snapshot(service))
        async with asyncio.timeout(10):
            await sim.wait_held("pinChatMessage")
        # Between the manifest and its pin: someone else's post, then the
        # service's first chunk in the chat (its watermark goes below it).
        foreign = sim.post_foreign(CHAT_ID)
        await put_file(service, "first.bin", payload(CHUNK // 2, seed=6))
    await snapshot
    services: Services = service.app.state.services
    client = BotClient(service.settings.bot_tokens[0], api_base=service.settings.telegram_api_base)
    try:
        audit = await audit_channel(services.sessionmaker, client, CHAT_ID)
    finally:
        await client.aclose()

    # The one foreign post is the one judged; the pin's service message, after
    # the chunk's, is the service's own.
    assert audit is not None
    assert audit.watermark < foreign < audit.probe_id
    assert audit.foreign == 1


async def test_a_key_the_pinned_snapshot_is_sealed_under_is_not_called_removable(
    launcher: ServiceLauncher,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rotation re-wraps chunks only: the pinned snapshot (and its journal)
    stay sealed under the key they were sent under, and a restore needs it.
    `status` called the old key free once no chunk used it; removed, the
    restore refused the pinned snapshot."""
    settings: dict[str, Any] = {"snapshot_interval_seconds": HOUR, "journal_seconds": HOUR}
    first = await launcher.start(encryption_keys=K1, **settings)
    await put_file(first, "a.bin", payload(CHUNK + 1, seed=1))
    await launcher.stop(first)  # its final snapshot is sealed under k1
    both = await launcher.start(sim=first.sim, encryption_keys=f"{K2},{K1}", **settings)
    keys = f"{K2},{K1}"
    capsys.readouterr()

    assert await asyncio.to_thread(run_cli, monkeypatch, both, keys, "rotate") == 0
    assert "keep k1: the pinned snapshot" in capsys.readouterr().err
    assert await asyncio.to_thread(run_cli, monkeypatch, both, keys, "status") == 0
    status = capsys.readouterr().out
    assert "k1: NOT removable" in status and "sealed under k1" in status

    await take_snapshot(both)  # under k2, with the chunks re-wrapped
    assert await asyncio.to_thread(run_cli, monkeypatch, both, keys, "status") == 0
    status = capsys.readouterr().out
    assert "k1: removable" in status and "sealed under k2" in status


# Both backends: the release takes row locks (FOR UPDATE) in the restore's
# transaction, and the watermarks are rows of their own there.
@pytest.mark.both_backends
async def test_a_restore_releases_what_unsettled_uploads_left_and_reconciles_the_lost_window(
    launcher: ServiceLauncher,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A snapshot leaves out what is not settled (a pending object, an
    unfinished multipart upload) but not the chunks already sent for it:
    restored, they came back referenced by nothing and were never released.
    And what was sent after the snapshot (no journal here) was above
    watermarks the restore did not bring back: never reconciled, never
    deleted."""
    settings: dict[str, Any] = {
        "snapshot_interval_seconds": HOUR,
        "journal_seconds": 0,
        "shutdown_grace_seconds": 1,
        "s3_credentials": {ACCESS_KEY: SECRET},
    }
    service = await launcher.start(**settings)
    kept = payload(CHUNK + 1, seed=1)
    kept_id = await put_file(service, "kept.bin", kept)
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    before = set(service.live_messages())
    upload = await s3("create_multipart_upload", Bucket="box", Key="unfinished")
    await s3(
        "upload_part",
        Bucket="box",
        Key="unfinished",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=payload(CHUNK, seed=2),
    )
    await eventually(lambda: bool(set(service.live_messages()) - before), within=60)
    unfinished = set(service.live_messages()) - before
    await take_snapshot(service)
    before = set(service.live_messages())
    await put_file(service, "lost.bin", payload(CHUNK + 3, seed=3))
    lost = set(service.live_messages()) - before
    assert lost
    # The database is lost before another snapshot: none at the stop either.
    with service.sim.holding("sendDocument"):
        await launcher.stop(service)
    await lose_the_database(database)

    code, out, err = await restore(service, monkeypatch, capsys)
    assert code == 0, out + err
    back = await launcher.start(sim=service.sim, **settings)
    back.key = service.key

    assert await get_link(back, kept_id) == kept
    await eventually(lambda: not (unfinished | lost) & set(back.live_messages()), within=60)
    assert await get_link(back, kept_id) == kept
