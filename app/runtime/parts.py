"""Every part of the running service, built and wired to the others, with
nothing running yet: app/runtime/startup.py starts them in order.

The wiring is one function because the parts call each other back (an
attempt's outcome asks the instance for a reconciliation, a bot's admission
resumes the spool): each callback closes over the parts it names.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config.settings import Settings
from app.config.tuning import Tuning
from app.db.single_statements import SingleStatements
from app.sealing.layout import sealed_size
from app.store.access import AccessStore
from app.store.buckets import BucketStore
from app.store.chat_fill import ChatFillSync
from app.store.copy_failures import CopyFailures, MissingRule
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
from app.store.metrics import Metrics
from app.store.multipart import MultipartStore
from app.store.reader import READ_BLOCK, RangeReader
from app.store.reconcile import Reconciler, may_have_posted
from app.store.resumable import ResumableStore
from app.store.scrub import Scrub
from app.store.sealing_migration import SealingMigration
from app.store.service import ObjectStore
from app.store.shared_paths import SharedPaths
from app.store.shares import ShareStore
from app.store.snapshot import Snapshots
from app.store.spool import Spool
from app.store.throughput import ThroughputHistory, sampler
from app.store.trash import TrashStore
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.local_files import local_files_for
from app.telegram.probe import BotProber
from app.telegram.types import BotInfo, StoredDocument

# The name these events were logged under before start_services moved out
# of app/services.py: the lines stay as they were for whoever searches them.
log = structlog.get_logger("app.services")


@dataclass
class Parts:
    """What `build_parts` built; the names are the locals of its wiring."""

    metrics: Metrics
    spool: Spool
    clients: list[BotClient]
    dispatcher: Dispatcher
    chat_fill: ChatFillSync
    gc: GarbageCollector
    buffers: UploadBuffers
    encryption: Encryption
    writer: ChunkWriter
    flusher: Flusher
    instance: InstanceHeartbeat
    leases: BotLeases
    shared_paths: SharedPaths
    budget: DownloadBudget
    locator: ChunkLocator
    scrub: Scrub
    reader: RangeReader
    store: ObjectStore
    trash_store: TrashStore
    snapshots: Snapshots
    journal: Journal
    access: AccessStore
    resumable: ResumableStore
    prober: BotProber
    buckets: BucketStore
    shares: ShareStore
    tree: FileTree
    dav_locks: DavLocks
    multipart: MultipartStore
    flush_lag: FlushLagWatch
    throughput: ThroughputHistory
    sealing_migration: SealingMigration
    # Tasks started by callbacks (the spool's resumption): cancelled at a stop.
    background: set[asyncio.Task[None]]


def build_parts(
    settings: Settings,
    tuning: Tuning,
    sessionmaker: async_sessionmaker[AsyncSession],
    statements: SingleStatements,
) -> Parts:
    """Every part, built and wired; nothing runs yet."""
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

    # One for every bot: they learn the local server's directory together.
    local_files = local_files_for(settings)
    clients = [
        BotClient(
            token,
            api_base=settings.telegram_api_base,
            floor_bandwidth=settings.telegram_floor_bandwidth,
            max_connections=settings.download_connections + 1,
            local_files=local_files,
            # A getFile of a file of unknown size (another instance's
            # question) gets the time the largest one takes.
            expected_file_size=sealed_size(settings.chunk_size),
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
        small_lane=settings.small_call_lane,
        on_orphan=on_orphan,
        on_attempt=on_attempt,
        on_abandoned_send=metrics.observe_abandoned_send,
        abandoned_hold=tuning.abandoned_call_hold_seconds,
        chat_message_limit=settings.chat_message_limit,
    )
    chat_fill = ChatFillSync(dispatcher.fill, sessionmaker)
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
        owner_registered=True,
        on_bytes=metrics.count_uploaded,
        encryption=encryption,
    )
    flusher = Flusher(spool, writer, sessionmaker, gc, chunk_size=settings.chunk_size)

    async def on_fenced(fenced: bool) -> None:
        # Taken for dead after a stall: nothing under way may record a chunk
        # (its intents were claimed); once registered anew, the spool rows
        # that are still this instance's are flushed again.
        if fenced:
            writer.fence()
            return
        writer.unfence()
        await resume_adopted()

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
        on_fenced=on_fenced,
        interval=tuning.heartbeat_seconds,
        stale_after=tuning.instance_stale_seconds,
        unnamed_file_age=tuning.unnamed_spool_file_age_seconds,
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
        # Found gone by a lease round: fenced as when a beat finds it.
        on_row_lost=instance.row_lost,
    )
    shared_paths = SharedPaths(dispatcher, sessionmaker)
    budget = DownloadBudget(
        buffer_bytes=settings.download_buffer_bytes,
        connections=settings.download_connections,
        block_size=READ_BLOCK,
    )
    locator = ChunkLocator(dispatcher, gc, shared_paths, retry_pause=tuning.read_retry_seconds)
    failures = CopyFailures(
        sessionmaker,
        MissingRule(
            failures=tuning.copy_missing_failures,
            span=timedelta(seconds=tuning.copy_missing_span_seconds),
            spacing=timedelta(seconds=tuning.copy_failure_spacing_seconds),
        ),
    )
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
        failures=failures,
    )
    reader = RangeReader(
        locator,
        budget,
        stall_seconds=settings.download_stall_seconds,
        retry_delay=tuning.read_retry_seconds,
        on_bytes=metrics.count_downloaded,
        on_dropped=lambda reason: metrics.downloads_dropped.labels(reason).inc(),
        on_bad_copy=scrub.report_bad,
        on_hashes=scrub.hashes_found,
        on_unavailable=scrub.report_unavailable,
        on_served=scrub.copy_served,
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
        gc,
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
    shares = ShareStore(sessionmaker, store, buckets)
    tree = FileTree(sessionmaker, store, statements, gc)
    dav_locks = DavLocks(sessionmaker, statements)
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
        chat_fill.loop,
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

    return Parts(
        metrics=metrics,
        spool=spool,
        clients=clients,
        dispatcher=dispatcher,
        chat_fill=chat_fill,
        gc=gc,
        buffers=buffers,
        encryption=encryption,
        writer=writer,
        flusher=flusher,
        instance=instance,
        leases=leases,
        shared_paths=shared_paths,
        budget=budget,
        locator=locator,
        scrub=scrub,
        reader=reader,
        store=store,
        trash_store=trash_store,
        snapshots=snapshots,
        journal=journal,
        access=access,
        resumable=resumable,
        background=background,
        prober=prober,
        buckets=buckets,
        shares=shares,
        tree=tree,
        dav_locks=dav_locks,
        multipart=multipart,
        flush_lag=flush_lag,
        throughput=throughput,
        sealing_migration=sealing_migration,
    )
