"""Building and tearing down everything the service runs on.

`start_services` is what the app's lifespan calls: database (schema checked),
bot clients, the dispatcher, the GC and the object store. It does not wait for
Telegram: each bot joins the pool when its getMe check passes
(app.telegram.probe), so the service listens at once; `wait_ready` (/ready,
systemd's READY=1) waits for the first bot. `Services.close` stops them in
the reverse order, letting in-flight work finish first.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import check_schema
from app.db.single_statements import single_statements_for
from app.metrics import Metrics, UploadBudgetUse
from app.s3.service import S3Service
from app.store.access import AccessStore
from app.store.buckets import BucketStore
from app.store.download_budget import DownloadBudget
from app.store.flusher import Flusher
from app.store.gc import GarbageCollector
from app.store.instance import InstanceHeartbeat, new_instance_id
from app.store.locator import ChunkLocator
from app.store.multipart import MultipartStore
from app.store.reader import READ_BLOCK, RangeReader
from app.store.reconcile import Reconciler, may_have_posted
from app.store.resumable import ResumableStore
from app.store.service import ObjectStore
from app.store.shared_paths import SharedPaths
from app.store.spool import Spool
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.leases import BotLeases
from app.telegram.probe import BotProber
from app.telegram.types import BotInfo, StoredDocument
from app.throughput import ThroughputHistory, sampler

log = structlog.get_logger("app.services")


class StartupError(Exception):
    """The service cannot start; the message says what to fix."""


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    dispatcher: Dispatcher
    gc: GarbageCollector
    writer: ChunkWriter
    store: ObjectStore
    # Shared by the S3 API and the web page's bucket browser, so both see
    # one memory of which buckets exist.
    buckets: BucketStore
    s3: S3Service
    buffers: UploadBuffers
    spool: Spool
    flusher: Flusher
    instance: InstanceHeartbeat
    leases: BotLeases
    shared_paths: SharedPaths
    resumable: ResumableStore
    throughput: ThroughputHistory
    prober: BotProber
    # Work started on the way (the spool's resumption), stopped with the rest.
    background: set[asyncio.Task[None]] = field(default_factory=set)
    metrics: Metrics = field(default_factory=Metrics)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    access: AccessStore = field(init=False)

    def __post_init__(self) -> None:
        self.access = AccessStore(
            self.sessionmaker, refused_key_ttl=self.settings.refused_key_cache_seconds
        )

    @property
    def bots(self) -> dict[int, BotInfo]:
        """What getMe said about each bot that passed its check."""
        return self.prober.bots

    async def wait_ready(self) -> None:
        """Until the service can store files: a bot has passed its check (the
        database and schema were checked before the service started)."""
        await self.prober.one_admitted.wait()

    async def database_ok(self) -> bool:
        try:
            async with self.engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except Exception:
            return False
        return True

    def may_delay_shutdown(self) -> bool:
        """Whether a stop may wait for a proxy (`shutdown_delay`): only where
        other instances can share the database."""
        return self.settings.shutdown_delay_seconds > 0 and self.engine.dialect.name != "sqlite"

    async def shutdown_delay(self) -> float:
        """Seconds to go on serving, unready, once told to stop: while another
        instance is alive to take what a proxy sends elsewhere, else none.
        Asked of the database, not of the last lease round: an instance
        restarted a moment ago is not in that round yet."""
        delay = self.settings.shutdown_delay_seconds
        try:
            async with asyncio.timeout(2):
                alive = await self.instance.live_ids()
        except Exception:
            return delay  # cannot tell: wait rather than drop requests
        return delay if alive - {self.instance.instance_id} else 0.0

    async def close(self) -> None:
        # Sends of spooled parts first: they need the dispatcher. What they
        # leave stays in the spool for the next start.
        await self.resumable.stop()
        await self.throughput.stop()
        await self.prober.stop()
        # Started by the first bot that passed its check; it uses the database.
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.flusher.stop(grace=self.settings.shutdown_grace_seconds)
        # Its answers go through the dispatcher; readers elsewhere forward.
        await self.shared_paths.stop()
        # Leases are renewed while the dispatcher drains, given up after it
        # stopped, and the instance row goes last: a lease whose owner has no
        # row is free for the taking.
        await self.dispatcher.stop(grace=self.settings.shutdown_grace_seconds)
        # Right after the dispatcher: a GC round begun now could only claim
        # ledger entries (hiding them from other instances for minutes)
        # without deleting them.
        await self.gc.stop()
        await self.leases.stop()
        await self.instance.stop()
        await self.access.close()
        await self.writer.settle()
        await self.store.close()
        await self.engine.dispose()
        log.info("services_stopped")


async def start_services(settings: Settings) -> Services:
    if not settings.bot_tokens:
        raise StartupError("BOT_TOKENS is not set: give at least one bot token")
    if not settings.chat_ids:
        raise StartupError(
            "STORAGE_CHAT_ID (or STORAGE_CHAT_IDS) is not set: give the id of the storage channel"
        )
    started_at = datetime.now(UTC)

    engine = create_engine(settings.database_url)
    try:
        await check_schema(engine)
    except Exception:
        await engine.dispose()
        raise
    sessionmaker = create_sessionmaker(engine)
    statements = single_statements_for(engine)

    clients = [
        BotClient(
            token,
            api_base=settings.telegram_api_base,
            floor_bandwidth=settings.telegram_floor_bandwidth,
            max_connections=settings.download_connections + 1,
        )
        for token in settings.bot_tokens
    ]
    metrics = Metrics()
    dispatcher = Dispatcher(
        clients,
        checked=False,  # each bot joins the pool once its getMe passes (BotProber)
        chat_ids=settings.chat_ids,
        max_attempts=settings.max_attempts,
        sends_per_minute=settings.sends_per_minute,
        on_attempt=metrics.observe_attempt,
        on_abandoned_send=metrics.observe_abandoned_send,
    )
    gc = GarbageCollector(dispatcher, sessionmaker)
    gc.on_undeletable = metrics.gc_undeletable.inc

    def on_orphan(document: StoredDocument) -> None:
        # A send finished after its upload was abandoned: the message must go.
        gc.enqueue_document(document, reason="failed_upload")

    dispatcher.on_orphan = on_orphan
    # A bot works only while this instance holds its lease (BotLeases, below).
    dispatcher.require_leases()
    await dispatcher.start()

    spool = Spool(
        settings.spool_path, max_bytes=settings.spool_max_bytes, instance_id=new_instance_id()
    )
    if spool.enabled:
        await spool.open()
    # Registering also sweeps the pending chunks of instances that died.
    instance = InstanceHeartbeat(sessionmaker, spool, gc)
    # Unclean stops found on the way are reconciled in the background.
    instance.reconciler = Reconciler(dispatcher, sessionmaker, gc, live_owners=instance.live_ids)

    # From now on (getMe at startup was observed by the metrics alone): a send
    # whose answer was lost may have left a message no row knows of.
    def on_attempt(bot_id: int, method: str, outcome: str, seconds: float) -> None:
        metrics.observe_attempt(bot_id, method, outcome, seconds)
        if may_have_posted(method, outcome):
            instance.request_reconcile()

    dispatcher.on_attempt = on_attempt
    await instance.register()
    leases = BotLeases(
        dispatcher,
        sessionmaker,
        instance.instance_id,
        # Only a hash of each token is stored, as the lease's key.
        {client.bot_id: client.token.value for client in clients},
        lease_seconds=settings.bot_lease_seconds,
        host=socket.gethostname()[:255],
        pid=os.getpid(),
    )
    await leases.round()
    leases.start()
    shared_paths = SharedPaths(dispatcher, sessionmaker)
    shared_paths.start()
    gc.start()
    buffers = UploadBuffers(settings.upload_buffers)
    writer = ChunkWriter(
        dispatcher,
        sessionmaker,
        gc,
        buffers,
        chunk_size=settings.chunk_size,
        inline_threshold=settings.inline_threshold,
        owner=spool.instance_id,
        on_bytes=metrics.bytes_uploaded.inc,
    )
    budget = DownloadBudget(
        buffer_bytes=settings.download_buffer_bytes,
        connections=settings.download_connections,
        block_size=READ_BLOCK,
    )
    reader = RangeReader(
        ChunkLocator(dispatcher, gc, shared_paths),
        budget,
        stall_seconds=settings.download_stall_seconds,
        on_bytes=metrics.bytes_downloaded.inc,
        on_dropped=lambda reason: metrics.downloads_dropped.labels(reason).inc(),
    )
    store = ObjectStore(sessionmaker, writer, reader, gc, statements=statements)
    flusher = Flusher(spool, writer, sessionmaker, gc, chunk_size=settings.chunk_size)
    instance.on_adopted = flusher.resume
    instance.running_since = writer.oldest_running
    instance.start()
    resumable = ResumableStore(
        sessionmaker,
        store,
        spool=spool,
        flusher=flusher,
        expiration=settings.tus_expiration_seconds,
        cleanup_interval=settings.tus_cleanup_interval_seconds,
    )
    resumable.start()
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
    prober.start()
    buckets = BucketStore(sessionmaker, statements=statements)
    s3 = S3Service(
        store,
        buckets,
        MultipartStore(
            sessionmaker,
            store,
            spool=spool,
            flusher=flusher,
            min_part_size=settings.s3_min_part_size,
        ),
        max_upload_size=settings.max_upload_size,
    )
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
        # app/http/links.py: a link built from a request's Host header points
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
    metrics.watch(
        bots=dispatcher.status,
        gc_backlog=lambda: gc.last_backlog,
        db_pool=lambda: _pool_usage(engine),
        downloads=budget.status,
    )
    # The web page's status screen: the last ten minutes of throughput.
    throughput = ThroughputHistory(sampler(metrics, dispatcher.status))
    throughput.start()
    return Services(
        settings=settings,
        throughput=throughput,
        metrics=metrics,
        engine=engine,
        sessionmaker=sessionmaker,
        dispatcher=dispatcher,
        gc=gc,
        writer=writer,
        store=store,
        buckets=buckets,
        s3=s3,
        buffers=buffers,
        spool=spool,
        flusher=flusher,
        instance=instance,
        leases=leases,
        shared_paths=shared_paths,
        resumable=resumable,
        prober=prober,
        background=background,
        started_at=started_at,
    )


def _pool_usage(engine: AsyncEngine) -> tuple[int, int]:
    """(connections in use, pool size); pools without a size report (in use, 0)."""
    pool = engine.sync_engine.pool
    checked_out = getattr(pool, "checkedout", None)
    size = getattr(pool, "size", None)
    in_use = int(checked_out()) if callable(checked_out) else 0
    return in_use, int(size()) if callable(size) else 0
