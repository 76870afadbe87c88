"""Reconciliation of orphaned Telegram messages and the periodic sweep, through
the real services (start_services) in front of the Telegram simulator, on
SQLite and on Postgres through pgbouncer (app/store/reconcile.py,
app/store/instance.py):

- after an instance died, every message between the chat's watermark and a
  probe that no row holds is deleted, and nothing a row holds is touched;
- a live upload's message, posted before the probe but recorded after it, is
  never taken for an orphan: the reconciliation waits for its send intent;
- a send whose answer was lost while the service ran (the dispatcher retried,
  the first attempt's message is an orphan) is reconciled too, and so is one
  that a clean stop cut off in flight (at the next start);
- the periodic sweep retires a live instance's pending chunks that no running
  upload holds (a request task that died), never those of a running upload.

A dead instance is made the way a crash leaves one: a registered row whose
heartbeat is stale, an open send intent, messages Telegram posted for it that
no row knows of.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import BotToken, Settings
from app.db.chunks import ChunkRepository
from app.db.intents import IntentRepository
from app.db.models import ChatWatermark, Chunk, ChunkCopy, Instance, SendIntent
from app.db.session import session_scope
from app.db.types import utcnow
from app.runtime.startup import start_services
from app.store import instance as instance_module
from app.store.object_write import ObjectWrite
from app.store.services import Services
from app.telegram.client import BotClient
from app.telegram.errors import TelegramError
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.types import StoredDocument
from tests.db.helpers import Database
from tests.running_service import CHAT_ID, CHUNK, eventually, make_settings, payload

# Postgres too: crash recovery: intents and watermarks (tests/README.md, "Which backend").
pytestmark = pytest.mark.both_backends

NATIVE = "_native"


@dataclass
class Stack:
    services: Services
    sim: TelegramSimulator
    bot: BotClient  # posts as a crashed instance's sends did

    async def orphan(self, data: bytes = b"orphan") -> StoredDocument:
        """A message Telegram posted that no row will ever know of."""
        return await self.bot.send_document(CHAT_ID, data, "orphan.bin")

    def stored(self) -> list[int]:
        return self.sim.live_messages(CHAT_ID)


@pytest.fixture
async def stack(database: Database, engine: AsyncEngine) -> AsyncIterator[Stack]:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(3), chat_ids=[CHAT_ID]))
    spool = tempfile.mkdtemp(prefix="teleuploader-spool-")
    async with run_simulator(sim) as url:
        # Few attempts: a send that keeps failing fails fast.
        settings = make_settings(database, url, sim.tokens, spool_dir=spool, max_attempts=3)
        services = await start_with_every_bot(settings, len(sim.tokens))
        assert services.instance.reconciler is not None
        # As if every death were older than Telegram's last posts for it (one
        # round covers it); the test of the allowance sets it back.
        services.instance.reconciler.late_posts_allowance = timedelta(0)
        bot = BotClient(BotToken.parse(sim.tokens[0]), api_base=url)
        try:
            yield Stack(services, sim, bot)
        finally:
            await bot.aclose()
            await services.close()
            shutil.rmtree(spool, ignore_errors=True)


async def start_with_every_bot(settings: Settings, bots: int) -> Services:
    """Started, with every bot checked (in the background: every test here
    sends), but for one cooling down: a call the last stop cut may still be
    running at Telegram, and the bot's check waits that out."""
    services = await start_services(settings)

    def checked() -> int:
        return sum(1 for s in services.dispatcher.status() if s.usable or s.cooling_down_for > 0)

    async with asyncio.timeout(20):
        while checked() < bots:
            await services.prober.one_admitted.wait()
            await asyncio.sleep(0.01)
    return services


async def store_object(services: Services, key: str, size: int = 2 * CHUNK + 100) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield payload(size, seed=len(key))

    content = await services.store.write_content(body())
    await services.store.commit(content, ObjectWrite(bucket=NATIVE, key=key, name=key))


async def chunk_messages(services: Services) -> list[int]:
    """Message ids every chunk row holds (live and pending)."""
    async with session_scope(services.sessionmaker) as session:
        return sorted(await session.scalars(select(ChunkCopy.message_id)))


async def watermark(services: Services) -> ChatWatermark | None:
    async with session_scope(services.sessionmaker) as session:
        return await session.get(ChatWatermark, CHAT_ID)


async def add_dead_instance(services: Services, instance_id: str = "dead0001") -> None:
    """A registered instance whose heartbeat went stale an hour ago, with a send in flight."""
    an_hour_ago = utcnow() - timedelta(hours=1)
    async with session_scope(services.sessionmaker) as session:
        session.add(
            Instance(
                id=instance_id,
                host="elsewhere",
                pid=1,
                started_at=an_hour_ago,
                heartbeat_at=an_hour_ago,
            )
        )
        await IntentRepository(session).open(instance_id, CHAT_ID)


async def reconciled(services: Services) -> bool:
    mark = await watermark(services)
    return mark is not None and mark.unclean_since is None


async def test_a_dead_instances_orphans_are_deleted_and_held_messages_are_not(
    stack: Stack,
) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    first = await watermark(services)
    assert first is not None and first.message_id == 0  # set as the first chunk was recorded
    orphans = [(await stack.orphan()).message_id for _ in range(3)]
    await add_dead_instance(services)
    await store_object(services, "stored-after.bin")  # messages above the orphans, held

    await services.instance.adopt()

    expected = await chunk_messages(services)
    await eventually(lambda: _stored_equals(stack, expected), within=20)
    assert not set(orphans) & set(stack.stored())
    assert await reconciled(services)
    mark = await watermark(services)
    assert mark is not None and mark.message_id > max(expected)
    async with session_scope(services.sessionmaker) as session:
        assert await session.scalar(select(func.count()).select_from(Instance)) == 1
        assert await session.scalar(select(func.count()).select_from(SendIntent)) == 0


async def test_a_death_found_at_once_is_reconciled_again_after_late_posts(
    stack: Stack,
) -> None:
    services = stack.services
    reconciler = services.instance.reconciler
    assert reconciler is not None
    reconciler.late_posts_allowance = timedelta(seconds=60)
    await store_object(services, "kept.bin")
    early = (await stack.orphan()).message_id
    await add_dead_instance(services)

    await services.instance.adopt()
    await eventually(lambda: _not_stored(stack, early), within=20)
    await eventually(lambda: _reconciler_idle(services), within=20)
    assert not await reconciled(services)  # too soon after the death to be sure
    # Telegram finishes the dead process's last send after the first probe.
    late = (await stack.orphan()).message_id

    reconciler.late_posts_allowance = timedelta(0)  # a minute passes
    await services.instance.adopt()  # the next sweep

    await eventually(lambda: reconciled(services), within=20)
    expected = await chunk_messages(services)
    await eventually(lambda: _stored_equals(stack, expected), within=20)
    assert late not in stack.stored()


async def test_a_second_sweep_without_a_new_death_probes_nothing(stack: Stack) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    await add_dead_instance(services)
    await services.instance.adopt()
    await eventually(lambda: reconciled(services), within=20)
    sends = stack.sim.stats()
    posted = sum(stats.calls.get("sendDocument", 0) for stats in sends.values())

    await services.instance.adopt()
    assert services.instance.reconciler is not None
    assert await services.instance.reconciler.run() == 0

    after = stack.sim.stats()
    assert sum(stats.calls.get("sendDocument", 0) for stats in after.values()) == posted


async def test_a_live_uploads_message_posted_before_the_probe_is_not_taken_for_an_orphan(
    stack: Stack,
) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    orphan = (await stack.orphan()).message_id
    # A send of this (live) instance: intent written, Telegram posted it, the
    # chunk row is not committed yet.
    live_owner = services.instance.instance_id
    async with session_scope(services.sessionmaker) as session:
        intent = await IntentRepository(session).open(live_owner, CHAT_ID)
    in_flight = await stack.orphan(b"a live upload's chunk")
    await add_dead_instance(services)
    posted_before_probe = stack.sim.message_count(CHAT_ID)

    await services.instance.adopt()
    # The probe is posted (and deleted soon); the reconciliation now waits for the intent.
    await eventually(lambda: _posted_is(stack, posted_before_probe + 1), within=20)
    assert not await reconciled(services)
    async with session_scope(services.sessionmaker) as session:
        await ChunkRepository(session).add_pending(
            in_flight, hashlib.sha256(b"a live upload's chunk").hexdigest(), owner=live_owner
        )
        await IntentRepository(session).resolve(intent)

    await eventually(lambda: reconciled(services), within=20)
    expected = await chunk_messages(services)
    await eventually(lambda: _stored_equals(stack, expected), within=20)
    assert in_flight.message_id in stack.stored()
    assert orphan not in stack.stored()


async def test_messages_of_sends_whose_answer_was_lost_are_reconciled_without_a_crash(
    stack: Stack,
) -> None:
    services = stack.services
    await store_object(services, "kept.bin")
    # Every sendDocument is carried out, and its answer lost on the way back.
    stack.sim.set_method_faults("sendDocument", fault_drop_rate=1.0)
    with pytest.raises(TelegramError):
        await store_object(services, "failed.bin", size=CHUNK // 2)
    stack.sim.set_method_faults("sendDocument", fault_drop_rate=0.0)
    expected = await chunk_messages(services)
    assert set(stack.stored()) - set(expected), "no send left a message behind"

    await services.instance.adopt()  # the periodic sweep

    await eventually(lambda: _stored_equals(stack, expected), within=20)
    assert await reconciled(services)


async def test_a_send_cut_off_by_a_clean_stop_is_reconciled_at_the_next_start(
    database: Database, engine: AsyncEngine
) -> None:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID]))
    spool = tempfile.mkdtemp(prefix="teleuploader-spool-")
    async with run_simulator(sim) as url:
        # No grace: the stop cuts off the send in flight at once.
        settings = make_settings(
            database, url, sim.tokens, spool_dir=spool, shutdown_grace_seconds=0
        )
        first = await start_with_every_bot(settings, len(sim.tokens))
        await store_object(first, "kept.bin")
        expected = await chunk_messages(first)
        sim.hold("sendDocument")
        cut = asyncio.create_task(store_object(first, "cut.bin", size=CHUNK // 2))
        async with asyncio.timeout(10):
            await sim.wait_held("sendDocument")
        cut.cancel()  # as the server cuts off a request the grace period outlived
        with pytest.raises(asyncio.CancelledError):
            await cut
        await first.close()
        # Telegram finishes the post after its client left: no row knows of it.
        sim.release("sendDocument")
        await eventually(lambda: len(sim.live_messages(CHAT_ID)) == len(expected) + 1)

        second = await start_with_every_bot(settings, len(sim.tokens))
        try:
            await eventually(lambda: sim.live_messages(CHAT_ID) == expected, within=20)
        finally:
            await second.close()
            shutil.rmtree(spool, ignore_errors=True)


async def test_the_periodic_sweep_retires_a_dead_tasks_chunks_and_never_a_running_uploads(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = stack.services
    # No grace: the cutoff is the running upload's start, however young its rows.
    monkeypatch.setattr(instance_module, "UNCOMMITTED_GRACE", timedelta(0))
    own = services.instance.instance_id
    # A request task that died after storing a chunk: pending, owned by this
    # live instance, and no upload runs that holds it.
    dead_task_doc = await stack.orphan(b"left by a dead task")
    async with session_scope(services.sessionmaker) as session:
        await ChunkRepository(session).add_pending(dead_task_doc, "0" * 64, owner=own)
        stale_intent = await IntentRepository(session).open(own, CHAT_ID)

    go_on = asyncio.Event()
    stored_two = asyncio.Event()
    data = payload(3 * CHUNK, seed=7)

    async def slow_body() -> AsyncIterator[bytes]:
        yield data[: 2 * CHUNK]
        yield data[2 * CHUNK : 2 * CHUNK + 1]  # the third chunk is asked for: two are sent
        stored_two.set()
        await go_on.wait()
        yield data[2 * CHUNK + 1 :]

    async def upload() -> None:
        content = await services.store.write_content(slow_body())
        await services.store.commit(
            content, ObjectWrite(bucket=NATIVE, key="running.bin", name="running.bin")
        )

    running = asyncio.create_task(upload())
    async with asyncio.timeout(20):
        await stored_two.wait()
    await eventually(lambda: _pending_count_is(services, own, 3), within=20)

    await services.instance.adopt()

    async with session_scope(services.sessionmaker) as session:
        pending = set(
            await session.scalars(
                select(ChunkCopy.message_id)
                .join(Chunk, Chunk.id == ChunkCopy.chunk_id)
                .where(Chunk.owner == own, Chunk.state == "pending")
            )
        )
        intents = set(await session.scalars(select(SendIntent.id)))
    assert dead_task_doc.message_id not in pending
    assert len(pending) == 2  # the running upload's chunks
    assert stale_intent not in intents
    # Retired to the ledger, so deleted from Telegram; the running upload's stay.
    await eventually(lambda: _stored_equals(stack, sorted(pending)), within=20)
    go_on.set()
    async with asyncio.timeout(20):
        await running  # its commit finds every chunk it stored
    assert len(await chunk_messages(services)) == 3


# --- helpers --------------------------------------------------------------------------


async def _stored_equals(stack: Stack, expected: list[int]) -> bool:
    return stack.stored() == expected


async def _not_stored(stack: Stack, message_id: int) -> bool:
    return message_id not in stack.stored()


async def _reconciler_idle(services: Services) -> bool:
    return not services.instance.reconciling


async def _posted_is(stack: Stack, count: int) -> bool:
    return stack.sim.message_count(CHAT_ID) == count


async def _pending_count_is(services: Services, owner: str, count: int) -> bool:
    async with session_scope(services.sessionmaker) as session:
        found = await session.scalar(
            select(func.count())
            .select_from(Chunk)
            .where(Chunk.owner == owner, Chunk.state == "pending")
        )
    return found == count
