"""Building and starting everything the service runs on: the composition root.

`start_services` is what the app's lifespan calls: database (schema checked),
bot clients, the dispatcher, the GC and the object store. It does not wait for
Telegram: each bot joins the pool when its getMe check passes
(app.telegram.probe), so the service listens at once; `wait_ready` (/ready,
systemd's READY=1) waits for the first bot. What it returns, `Services`
(app.store.services), stops them in the reverse order, letting in-flight work
finish first. Apart from `Services` so that the handle the HTTP layers hold
reads on its own, without the long wiring of every part.
"""

from __future__ import annotations

import asyncio
import os
import socket
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.config.tuning import Tuning
from app.db import trash
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import check_schema
from app.db.single_statements import single_statements_for
from app.store.access import AccessStore
from app.store.buckets import BucketStore
from app.store.dav_locks import DavLocks
from app.store.download_budget import DownloadBudget
from app.store.encryption import Encryption
from app.store.file_tree import FileTree
from app.store.flush_lag import FlushLagWatch
from app.store.flusher import Flusher
from app.store.gc import GarbageCollector
from app.store.instance import InstanceHeartbeat, new_instance_id
from app.store.journal import Journal
from app.store.leases import BotLeases
from app.store.locator import ChunkLocator
from app.store.metrics import Metrics, UploadBudgetUse
from app.store.multipart import MultipartStore
from app.store.reader import READ_BLOCK, RangeReader
from app.store.reconcile import Reconciler, may_have_posted
from app.store.resumable import ResumableStore
from app.store.scrub import Scrub
from app.store.sealing_migration import SealingMigration
from app.store.service import ObjectStore
from app.store.services import Services
from app.store.shared_paths import SharedPaths
from app.store.snapshot import Snapshots
from app.store.spool import Spool
from app.store.throughput import ThroughputHistory, sampler
from app.store.trash import TrashStore
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.probe import BotProber
from app.telegram.types import BotInfo, StoredDocument

# The name these events were logged under before start_services moved here
# from app.store.services: the lines stay as they were for whoever searches them.
log = structlog.get_logger("app.store.services")


class StartupError(Exception):
    """The service cannot start; the message says what to fix."""


async def start_services(settings: Settings, tuning: Tuning | None = None) -> Services:
    """Everything started, or, if a step fails, everything it had started
    stopped again before the error goes on (nothing is left running)."""
    stack = AsyncExitStack()
    try:
        return await _start(settings, tuning or Tuning(), stack)
    except BaseException:
        await stack.aclose()
        raise


async def _start(settings: Settings, tuning: Tuning, stack: AsyncExitStack) -> Services:
    """Build every part, then start them one by one, each start followed by
    its stop on `stack`. The stack stops them in reverse, so the starts run
    in the reverse of the order a stop needs: the engine first (it closes
    last); the instance row, the leases and the GC before the dispatcher
    (they outlive its drain: its late orphans are ledgered, its bots stay
    leased until its calls end); the work that uses the dispatcher after it
    (stopped before it drains)."""
    if not settings.bot_tokens:
        raise StartupError("BOT_TOKENS is not set: give at least one bot token")
    if not settings.chat_ids:
        raise StartupError(
            "STORAGE_CHAT_ID (or STORAGE_CHAT_IDS) is not set: give the id of the storage channel"
        )
    started_at = datetime.now(UTC)

    engine = create_engine(settings.database_url)
    stack.push_async_callback(engine.dispose)
    await check_schema(engine)
    sessionmaker = create_sessionmaker(engine)
    trash.configure(sessionmaker, settings.trash_retention_seconds)
    statements = single_statements_for(engine)

    # --- every part, built (nothing runs yet) -----------------------------------
    metrics = Metrics()
    spool = Spool(
        settings.spool_path, max_bytes=settings.spool_max_bytes, instance_id=new_instance_id()
    )

    def on_attempt(bot_id: int, method: str, outcome: str, seconds: float) -> None:
        metrics.observe_attempt(bot_id, method, outcome, seconds)
        # A send whose answer was lost may have left a message no row knows of.
        if may_have_posted(method, outcome):
            instance.request_reconcile()

    async def resume_adopted() -> None:
        # Spooled parts adopted from a dead instance go to Telegram now, if a
        # bot passed its check; at start-up none has yet, and the first one
        # that does resumes the spool (on_admitted, below).
        if dispatcher.usable_bots():
            await flusher.resume()

    def on_orphan(document: StoredDocument) -> None:
        # A send finished after its upload was abandoned: the message must go.
        gc.enqueue_document(document, reason="failed_upload")

    clients = [
        BotClient(
            token,
            api_base=settings.telegram_api_base,
            floor_bandwidth=settings.telegram_floor_bandwidth,
            max_connections=settings.download_connections + 1,
        )
        for token in settings.bot_tokens
    ]
    dispatcher = Dispatcher(
        clients,
        checked=False,  # each bot joins the pool once its getMe passes (BotProber)
        leased=True,  # and works only while this instance holds its lease (BotLeases)
        chat_ids=settings.chat_ids,
        max_attempts=settings.max_attempts,
        sends_per_minute=settings.sends_per_minute,
        on_orphan=on_orphan,
        on_attempt=on_attempt,
        on_abandoned_send=metrics.observe_abandoned_send,
    )
    stack.push_async_callback(dispatcher.close_clients)
    gc = GarbageCollector(dispatcher, sessionmaker, on_undeletable=metrics.gc_undeletable.inc)
    buffers = UploadBuffers(settings.upload_buffers)
    encryption = Encryption(settings.keyring())
    writer = ChunkWriter(
        dispatcher,
        sessionmaker,
        gc,
        buffers,
        chunk_size=settings.chunk_size,
        inline_threshold=settings.inline_threshold,
        replicas=settings.replicas,
        owner=spool.instance_id,
        on_bytes=metrics.bytes_uploaded.inc,
        encryption=encryption,
    )
    flusher = Flusher(spool, writer, sessionmaker, gc, chunk_size=settings.chunk_size)
    instance = InstanceHeartbeat(
        sessionmaker,
        spool,
        gc,
        # Unclean stops found on the way are reconciled in the background.
        reconciler=Reconciler(
            dispatcher, sessionmaker, gc, live_owners=lambda: instance.live_ids()
        ),
        on_adopted=resume_adopted,
        running_since=writer.oldest_running,
        on_block_digest=writer.use_block_digest,
        interval=tuning.heartbeat_seconds,
    )
    leases = BotLeases(
        dispatcher,
        sessionmaker,
        instance.instance_id,
        # Only a hash of each token is stored, as the lease's key.
        {client.bot_id: client.token.value for client in clients},
        lease_seconds=tuning.bot_lease_seconds,
        host=socket.gethostname()[:255],
        pid=os.getpid(),
    )
    shared_paths = SharedPaths(dispatcher, sessionmaker)
    budget = DownloadBudget(
        buffer_bytes=settings.download_buffer_bytes,
        connections=settings.download_connections,
        block_size=READ_BLOCK,
    )
    locator = ChunkLocator(dispatcher, gc, shared_paths)
    scrub = Scrub(
        dispatcher,
        sessionmaker,
        gc,
        locator,
        buffers,
        replicas=settings.replicas,
        period=settings.scrub_period_seconds,
        read_bytes_per_day=settings.scrub_read_bytes_per_day,
        owner=spool.instance_id,
        encryption=encryption,
    )
    reader = RangeReader(
        locator,
        budget,
        stall_seconds=settings.download_stall_seconds,
        on_bytes=metrics.bytes_downloaded.inc,
        on_dropped=lambda reason: metrics.downloads_dropped.labels(reason).inc(),
        on_bad_copy=scrub.report_bad,
        on_hashes=scrub.hashes_found,
    )
    store = ObjectStore(
        sessionmaker,
        writer,
        reader,
        gc,
        statements=statements,
        trash_retention=timedelta(seconds=settings.trash_retention_seconds)
        if settings.trash_retention_seconds > 0
        else None,
        spool=spool,
        pending_copies=settings.complete_waits_for == "spool",
    )
    trash_store = TrashStore(sessionmaker)
    snapshots = Snapshots(
        dispatcher,
        sessionmaker,
        gc,
        encryption,
        owner=spool.instance_id,
        piece_size=settings.chunk_size,
        interval=settings.snapshot_interval_seconds,
        on_round=metrics.observe_round,
    )
    journal = Journal(
        dispatcher,
        sessionmaker,
        encryption,
        snapshots,
        owner=spool.instance_id,
        interval=settings.journal_seconds,
        max_bytes=settings.chunk_size,
        on_round=metrics.observe_round,
    )
    access = AccessStore(sessionmaker, refused_key_ttl=tuning.refused_key_cache_seconds)
    resumable = ResumableStore(
        sessionmaker,
        store,
        spool=spool,
        flusher=flusher,
        wait_for_telegram=settings.complete_waits_for == "telegram",
        expiration=settings.tus_expiration_seconds,
        cleanup_interval=tuning.tus_cleanup_interval_seconds,
    )
    background: set[asyncio.Task[None]] = set()

    def on_admitted(info: BotInfo) -> None:
        usable = len(dispatcher.usable_bots())
        if usable == 1:
            log.info("bots_ready", usable=usable, configured=len(clients))
            instance.reconcile_now()
            # Spooled parts left by the last run can be sent now.
            task = asyncio.create_task(resume_spool(), name="spool-resume")
            background.add(task)
            task.add_done_callback(background.discard)

    async def resume_spool() -> None:
        try:
            await flusher.resume()
        except Exception:
            # The parts stay in the spool: the next part or the completion of
            # their upload, or the next start, sends them.
            log.exception("spool_resume_failed")

    prober = BotProber(dispatcher, on_admitted=on_admitted)
    buckets = BucketStore(sessionmaker, statements=statements)
    tree = FileTree(sessionmaker, store, statements, gc)
    multipart = MultipartStore(
        sessionmaker,
        store,
        spool=spool,
        flusher=flusher,
        min_part_size=tuning.s3_min_part_size,
        wait_for_telegram=settings.complete_waits_for == "telegram",
    )
    flush_lag = FlushLagWatch(sessionmaker, owner=spool.instance_id, alert=settings.flush_lag_alert)
    # The web page's status screen: the last ten minutes of throughput.
    throughput = ThroughputHistory(sampler(metrics, dispatcher.status))
    loops = (
        gc.loop,
        instance.loop,
        leases.loop,
        shared_paths.loop,
        resumable.cleanup,
        prober.rechecks,
        throughput.loop,
        flush_lag.loop,
        scrub.loop,
    )
    for loop in loops:
        loop.on_round = metrics.observe_round

    # --- started in order; the stack stops them in reverse -----------------------
    stack.push_async_callback(store.close)
    stack.push_async_callback(writer.settle)
    stack.push_async_callback(access.close)
    if spool.enabled:
        await spool.open()
    # Jobs are taken from now on (none runs before a bot passed its check):
    # the registration's reconciliation may queue its probe. The dispatcher
    # stops later in the stack (below), before what outlives its drain.
    await dispatcher.start()
    # Registering also sweeps the pending chunks of instances that died. A
    # stop is safe before its start: it removes what a half-done one wrote.
    stack.push_async_callback(instance.stop)
    await instance.register()
    instance.start()
    stack.push_async_callback(leases.stop)
    await leases.round()
    leases.start()
    gc.start()
    stack.push_async_callback(gc.stop)
    stack.push_async_callback(dispatcher.stop, grace=settings.shutdown_grace_seconds)
    shared_paths.start()
    stack.push_async_callback(shared_paths.stop)
    # Its checks and repairs go through the dispatcher.
    scrub.start()
    stack.push_async_callback(scrub.stop)
    sealing_migration = SealingMigration(
        dispatcher,
        sessionmaker,
        gc,
        locator,
        buffers,
        encryption,
        replicas=settings.replicas,
        owner=spool.instance_id,
    )
    stack.push_async_callback(sealing_migration.stop)
    snapshots.start()
    journal.start()
    if settings.snapshot_interval_seconds > 0:
        # Runs before the dispatcher drains (it needs it), after the loop stops.
        stack.push_async_callback(_final_snapshot, snapshots, settings.shutdown_grace_seconds)
    if journal.enabled:
        # Before the final snapshot (callbacks run last in, first out): should
        # that one fail, the changes since the previous one are in the chats.
        stack.push_async_callback(_final_journal, journal, settings.shutdown_grace_seconds)
    # Before the final journal: the parts its last sends commit are in it.
    # Sends of spooled parts need the dispatcher; what they leave stays in
    # the spool for the next start.
    stack.push_async_callback(flusher.stop, grace=settings.shutdown_grace_seconds)
    stack.push_async_callback(_cancel_all, background)
    stack.push_async_callback(snapshots.stop)
    stack.push_async_callback(journal.stop)
    prober.start()
    stack.push_async_callback(prober.stop)
    throughput.start()
    stack.push_async_callback(throughput.stop)
    resumable.start()
    stack.push_async_callback(resumable.stop)

    log.info(
        "upload_budget",
        buffers=buffers.count,
        buffer_bytes=buffers.count * settings.chunk_size,
        spool_dir=str(spool.root) if spool.enabled else None,
        spool_max_bytes=spool.max_bytes,
    )
    if settings.s3_credentials:
        log.info("s3_api_enabled", access_keys=len(settings.s3_credentials))
    if not settings.public_base_url:
        # app/http/shared/links.py: a link built from a request's Host header points
        # wherever the client said.
        log.warning(
            "public_base_url_unset",
            detail="links handed out are built from each request's Host header; "
            "set PUBLIC_BASE_URL to the service's public address (https://...)",
        )
    metrics.watch_uploads(
        lambda: UploadBudgetUse(
            buffers_in_use=buffers.in_use,
            buffers=buffers.count,
            waiting_uploads=buffers.waiting,
            spool_bytes=spool.used,
            spool_max_bytes=spool.max_bytes,
        )
    )
    metrics.watch_flush_lag(flush_lag.current)
    metrics.watch_durability(lambda: scrub.last_health, lambda: scrub.repaired)
    metrics.watch_journal(journal.status)
    metrics.watch(
        bots=dispatcher.status,
        gc_backlog=lambda: gc.last_backlog,
        db_pool=lambda: _pool_usage(engine),
        downloads=budget.status,
    )
    return Services(
        settings=settings,
        flush_lag=flush_lag,
        throughput=throughput,
        metrics=metrics,
        engine=engine,
        sessionmaker=sessionmaker,
        dispatcher=dispatcher,
        gc=gc,
        writer=writer,
        store=store,
        trash=trash_store,
        buckets=buckets,
        multipart=multipart,
        tree=tree,
        dav_locks=DavLocks(sessionmaker, statements),
        buffers=buffers,
        spool=spool,
        flusher=flusher,
        instance=instance,
        leases=leases,
        shared_paths=shared_paths,
        resumable=resumable,
        prober=prober,
        scrub=scrub,
        sealing_migration=sealing_migration,
        snapshots=snapshots,
        journal=journal,
        access=access,
        started_at=started_at,
        _stack=stack,
    )


async def _final_journal(journal: Journal, grace: float) -> None:
    """What is pending at a clean stop goes to the chats, best effort
    within the shutdown grace."""
    try:
        async with asyncio.timeout(grace):
            while (await journal.ship()).full:
                pass
    except Exception as exc:
        log.warning("final_journal_failed", error=f"{type(exc).__name__}: {exc}")


async def _final_snapshot(snapshots: Snapshots, grace: float) -> None:
    """A snapshot at a clean stop, best effort within the shutdown grace:
    the database as it stands at the end goes to the chats."""
    try:
        async with asyncio.timeout(grace):
            await snapshots.take()
    except Exception as exc:
        log.warning("final_snapshot_failed", error=f"{type(exc).__name__}: {exc}")


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _pool_usage(engine: AsyncEngine) -> tuple[int, int]:
    """(connections in use, pool size); pools without a size report (in use, 0)."""
    pool = engine.sync_engine.pool
    checked_out = getattr(pool, "checkedout", None)
    size = getattr(pool, "size", None)
    in_use = int(checked_out()) if callable(checked_out) else 0
    return in_use, int(size()) if callable(size) else 0
