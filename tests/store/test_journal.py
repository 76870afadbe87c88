"""The journal between snapshots, in process (real HTTP, the Telegram
simulator): a round ships what changed as one message and points the pinned
manifest's caption at it; a restore applies the batches after the snapshot."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import pytest

from app.cli.demo import create_api_key
from app.db import journal as journal_module
from app.db import snapshots
from app.store.channel_audit import audit_channel
from app.store.journal import Journal, pointer, read_batch
from app.store.services import Services
from app.telegram.client import BotClient
from tests.db.helpers import Database
from tests.running_service import (
    CHAT_ID,
    CHUNK,
    Service,
    ServiceLauncher,
    eventually,
    payload,
)
from tests.store.test_encryption import K1
from tests.store.test_snapshots import (
    get_link,
    lose_the_database,
    put_file,
    restore,
    take_snapshot,
)

HOUR = 3600
# Snapshots and journal rounds only when the test asks.
ON_DEMAND = {"snapshot_interval_seconds": HOUR, "journal_seconds": HOUR}


def journal_of(service: Service) -> Journal:
    services: Services = service.app.state.services
    return services.journal


def newest_batch(service: Service) -> tuple[dict[str, object], dict[str, list[object]]]:
    """The header of the newest journal document in the chat, and its rows by table."""
    _chat, _message, data = [f for f in service.sim.stored_files() if f[2][:2] == b"\x1f\x8b"][-1]
    header, changes = read_batch(data)
    return header, {c.table: [*c.rows, *c.deleted] for c in changes}


async def test_a_round_ships_two_hundred_changes_as_one_message_and_nothing_as_none(
    launcher: ServiceLauncher,
) -> None:
    service = await launcher.start(**ON_DEMAND)
    journal = journal_of(service)
    taken = await take_snapshot(service)
    await journal.ship()  # what the snapshot's own request changed (its key's use)
    before = service.live_messages()

    for index in range(200):
        await put_file(service, f"small-{index}.txt", b"%d" % index)
    shipped = await journal.ship()

    assert shipped.messages == 1 and shipped.seq is not None
    [batch_id] = set(service.live_messages()) - set(before)
    header, rows = newest_batch(service)
    assert len(rows["objects"]) == 200 and header["seq"] == shipped.seq
    assert header["taken_at"] == taken["taken_at"].replace("Z", "+00:00")
    # The pinned manifest's caption points at the batch.
    pinned = await service.app.state.services.dispatcher.call(
        service.sim.bot_ids[0], "getChat", lambda client: client.pinned_message(CHAT_ID)
    )
    assert pinned is not None
    found = pointer(pinned.caption)
    assert found is not None and found["message_id"] == batch_id and found["seq"] == shipped.seq

    nothing = await journal.ship()

    assert nothing.messages == 0 and service.live_messages() == [*before, batch_id]


async def test_a_restore_applies_the_batches_after_the_snapshot(
    launcher: ServiceLauncher,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Sealed batches: the restore opens them with the keys.
    settings = {**ON_DEMAND, "trash_retention_seconds": HOUR, "encryption_keys": K1}
    service = await launcher.start(shutdown_grace_seconds=1, **settings)
    journal = journal_of(service)
    kept = await put_file(service, "kept.txt", b"in the snapshot")
    replaced = await put_file(service, "replaced.bin", payload(CHUNK + 1, seed=1))
    deleted = await put_file(service, "deleted.txt", b"deleted after the snapshot")
    await take_snapshot(service)
    created = await put_file(service, "created.bin", payload(2 * CHUNK, seed=2))
    new_version = payload(CHUNK + 9, seed=3)
    assert await put_file(service, "replaced.bin", new_version) == replaced
    first = await journal.ship()
    async with service.client() as http:
        gone = await http.delete(f"/api/files/{deleted}", headers=service.auth)
    assert gone.status_code == 204
    late_key = await create_api_key(service.settings.database_url, name="after-the-snapshot")
    second = await journal.ship()
    assert (first.seq, second.seq, first.messages, second.messages) == (1, 2, 1, 1)
    # Sealed: no document in the chat is readable gzip.
    assert not [m for _chat, m, data in service.sim.stored_files() if data[:2] == b"\x1f\x8b"]
    # A crash: neither the stop's journal round nor its snapshot reaches the chat.
    for bot_id in service.sim.bot_ids:
        service.sim.demote(bot_id, CHAT_ID)
    await launcher.stop(service)
    await lose_the_database(database)

    code, out, err = await restore(service, monkeypatch, capsys, "--json", keys=K1)

    assert code == 0, out + err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["journal_batches"] == 2 and report["problems"] == []
    assert report["last_change_at"] > report["taken_at"]
    for bot_id in service.sim.bot_ids:
        service.sim.unkick(bot_id, CHAT_ID)
    back = await launcher.start(sim=service.sim, **settings)
    back.key = late_key  # made after the snapshot: it came back with the journal
    assert await get_link(back, kept) == b"in the snapshot"
    assert await get_link(back, created) == payload(2 * CHUNK, seed=2)
    assert await get_link(back, replaced) == new_version
    async with back.client() as http:
        assert (await http.get(f"/f/{deleted}")).status_code == 404
        trash = (await http.get("/api/trash", headers=back.auth)).json()["items"]
        # The delete and the replacement went to the trash: both came back there.
        assert sorted((i["name"], i["reason"]) for i in trash) == [
            ("deleted.txt", "deleted"),
            ("replaced.bin", "replaced"),
        ]
        restored = await http.post(f"/api/trash/{deleted}/restore", headers=back.auth)
    assert restored.status_code == 200, restored.text
    assert await get_link(back, deleted) == b"deleted after the snapshot"
    # The restored database goes on with the chain: its next batch is the third.
    assert (await journal_of(back).ship()).seq == 3


async def test_the_pins_service_message_is_not_a_foreign_post_to_the_channel_audit(
    launcher: ServiceLauncher,
) -> None:
    service = await launcher.start(**ON_DEMAND)
    await put_file(service, "chunked.bin", payload(CHUNK + 1, seed=4))  # the chat's watermark
    await take_snapshot(service)  # its pin posts a service message no bot sees
    services: Services = service.app.state.services
    client = BotClient(service.settings.bot_tokens[0], api_base=service.settings.telegram_api_base)
    try:
        audit = await audit_channel(services.sessionmaker, client, CHAT_ID)
    finally:
        await client.aclose()

    assert audit is not None and audit.foreign == 0


async def test_a_batch_cut_off_between_its_post_and_its_record_is_deleted(
    launcher: ServiceLauncher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop gives its journal round a share of the grace (1 s of the tests'
    5). Cut off after Telegram had posted the batch but before its row
    committed, the message was neither recorded nor ledgered, and no failed
    send marked the chat for reconciliation: it stayed in the channel, held
    by no row (seen under load: the next start found it an orphan only
    because a restore had marked the chat)."""
    service = await launcher.start(**ON_DEMAND)
    journal = journal_of(service)
    await take_snapshot(service)
    await journal.ship()  # the snapshot request's own changes
    await put_file(service, "cut.txt", b"in a batch cut off")
    before = set(service.live_messages())
    recording = asyncio.Event()
    record_messages = snapshots.record_messages

    async def hang(*_args: object) -> None:
        recording.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(snapshots, "record_messages", hang)
    cut = asyncio.create_task(journal.ship())
    async with asyncio.timeout(30):
        await recording.wait()
    cut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cut
    monkeypatch.setattr(snapshots, "record_messages", record_messages)

    [posted] = set(service.live_messages()) - before
    await eventually(lambda: posted not in service.live_messages(), within=30)
    # Its rows were not shipped: the next round ships them.
    assert (await journal.ship()).messages == 1


async def test_changes_with_no_snapshot_to_chain_onto_bring_the_first_snapshot_forward(
    launcher: ServiceLauncher,
) -> None:
    service = await launcher.start(**ON_DEMAND)  # the snapshot loop waits an hour
    await put_file(service, "first.txt", b"before any snapshot")

    shipped = await journal_of(service).ship()

    assert shipped.messages == 0  # nothing to chain onto: the snapshot will hold it
    services: Services = service.app.state.services

    async def pinned() -> bool:
        found = await services.dispatcher.call(
            service.sim.bot_ids[0], "getChat", lambda client: client.pinned_message(CHAT_ID)
        )
        return found is not None

    await eventually(pinned)
    # The pin comes before the snapshot's bookkeeping ends (`last` is set then).
    await eventually(lambda: services.snapshots.last is not None)
    assert services.snapshots.last is not None and services.snapshots.last.counts["objects"] == 1


async def test_a_round_with_no_snapshot_yet_forgets_its_rows_beside_an_upload(
    launcher: ServiceLauncher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload commits while the round looks for a snapshot to chain onto.
    On SQLite the round's transaction had read, so its delete of the rows
    failed ("database is locked") and the round with it."""
    service = await launcher.start(**ON_DEMAND)
    await put_file(service, "first.txt", b"before any snapshot")
    find_pinned = journal_module.pinned_snapshot

    async def pinned_while_an_upload_commits(session: object) -> object:
        found = await find_pinned(session)  # type: ignore[arg-type]
        await put_file(service, "beside.txt", b"an upload meanwhile")
        return found

    monkeypatch.setattr(journal_module, "pinned_snapshot", pinned_while_an_upload_commits)

    shipped = await journal_of(service).ship()

    assert shipped.messages == 0
    assert shipped.shipped_rows > 0  # the first upload's rows, forgotten: the snapshot holds them


async def test_an_instance_with_the_journal_off_deletes_only_rows_nobody_shipped_for_an_hour(
    launcher: ServiceLauncher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Off here (settings differ between instances, or during a rolling
    # change): another instance may be shipping these rows right now.
    service = await launcher.start(snapshot_interval_seconds=HOUR, journal_seconds=0)
    journal = journal_of(service)
    assert not journal.enabled
    await put_file(service, "fresh.txt", b"a change another instance ships")

    assert await journal.purge() == 0
    an_hour_on = time.monotonic() + HOUR + 1
    monkeypatch.setattr("app.store.journal.time", SimpleNamespace(monotonic=lambda: an_hour_on))

    assert await journal.purge() > 0  # an hour on, nobody shipped them
    await put_file(service, "later.txt", b"written after the first look")
    assert await journal.purge() == 0  # rows younger than an hour stay


async def test_a_batch_names_a_few_batches_before_it_not_the_whole_chain(
    launcher: ServiceLauncher,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each batch listed every batch since the snapshot with its copies, so
    the batches grew by ~160 bytes each (57 KB within the hour). Now a batch
    names its predecessor and a few further back (2, 4, 8 ... batches), and a
    restore walks the chain; a batch it cannot have is stepped over to find
    the ones before it."""
    service = await launcher.start(shutdown_grace_seconds=1, **ON_DEMAND)
    journal = journal_of(service)
    await take_snapshot(service)
    await journal.ship()  # the snapshot request's own changes: batch 1
    messages: dict[int, int] = {}
    for n in range(2, 10):
        before = set(service.live_messages())
        await put_file(service, f"f{n}.txt", b"%d" % n)
        assert (await journal.ship()).seq == n
        [messages[n]] = set(service.live_messages()) - before

    header, _rows = newest_batch(service)
    previous: list[dict[str, object]] = header["previous"]  # type: ignore[assignment]
    assert [entry["seq"] for entry in previous] == [8, 7, 5, 1]
    assert "predecessors" not in header

    # Batch 8 is gone from the chat: the restore still has 1 to 7 through
    # batch 9's reference to 7, and says where it ends.
    service.sim.take_down(CHAT_ID, messages[8])
    for bot_id in service.sim.bot_ids:
        service.sim.demote(bot_id, CHAT_ID)
    await launcher.stop(service)
    await lose_the_database(database)

    code, out, err = await restore(service, monkeypatch, capsys, "--json")

    assert code == 1, out + err  # restored, with a problem to read
    report = json.loads(out.strip().splitlines()[-1])
    assert report["journal_batches"] == 7
    assert [p for p in report["problems"] if "journal batch 8 cannot be had" in p]
