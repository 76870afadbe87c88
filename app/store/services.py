"""The running service: what the app's lifespan holds once it has started.

`Services` gives the HTTP layers every part of the service (database,
dispatcher, stores, background loops) and answers what they ask of it as a
whole: is it ready, is the database up, how long to go on serving once told
to stop. app.runtime.startup builds it (`start_services`); `Services.close` stops
everything in the reverse order, letting in-flight work finish first.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config.settings import Settings
from app.store.access import AccessStore
from app.store.buckets import BucketStore
from app.store.dav_locks import DavLocks
from app.store.file_tree import FileTree
from app.store.flush_lag import FlushLagWatch
from app.store.flusher import Flusher
from app.store.gc import GarbageCollector
from app.store.instance import InstanceHeartbeat
from app.store.journal import Journal
from app.store.leases import BotLeases
from app.store.metrics import Metrics
from app.store.multipart import MultipartStore
from app.store.resumable import ResumableStore
from app.store.scrub import Scrub
from app.store.sealing_migration import SealingMigration
from app.store.service import ObjectStore
from app.store.shared_paths import SharedPaths
from app.store.shares import ShareStore
from app.store.snapshot import Snapshots
from app.store.spool import Spool
from app.store.throughput import ThroughputHistory
from app.store.trash import TrashStore
from app.store.upload_buffers import UploadBuffers
from app.store.writer import ChunkWriter
from app.telegram.dispatcher import Dispatcher
from app.telegram.probe import BotProber
from app.telegram.types import BotInfo

log = structlog.get_logger("app.services")


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    dispatcher: Dispatcher
    gc: GarbageCollector
    writer: ChunkWriter
    store: ObjectStore
    trash: TrashStore
    # Shared by the S3 API and the web page's bucket browser, so both see
    # one memory of which buckets exist.
    buckets: BucketStore
    multipart: MultipartStore
    # WebDAV's view of the native files (folders, properties) and its locks.
    tree: FileTree
    dav_locks: DavLocks
    buffers: UploadBuffers
    spool: Spool
    flusher: Flusher
    instance: InstanceHeartbeat
    leases: BotLeases
    shared_paths: SharedPaths
    resumable: ResumableStore
    flush_lag: FlushLagWatch
    throughput: ThroughputHistory
    prober: BotProber
    scrub: Scrub
    # `teleuploader encryption migrate`: plaintext chunks sealed (with keys).
    sealing_migration: SealingMigration
    snapshots: Snapshots
    journal: Journal
    access: AccessStore
    # Share links (/api/shares, /s/...).
    shares: ShareStore
    metrics: Metrics
    started_at: datetime
    # What `close` stops, in order.
    _stack: AsyncExitStack = field(repr=False)

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
        """Stop everything, in the reverse order of the start (app.runtime.startup)."""
        await self._stack.aclose()
        log.info("services_stopped")
