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
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config.settings import Settings
from app.config.tuning import Tuning
from app.db import trash
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import check_schema
from app.db.single_statements import single_statements_for
from app.runtime.parts import Parts, build_parts
from app.runtime.stop_budget import StopBudget
from app.store.cloud_cap import chunks_above_cloud_cap, cloud_refusal
from app.store.flusher import Flusher
from app.store.journal import Journal
from app.store.services import Services
from app.store.snapshot import Snapshots
from app.store.state_metrics import UploadBudgetUse
from app.store.upkeep_metrics import SnapshotStatus
from app.telegram.dispatcher import Dispatcher

# The name these events were logged under before start_services moved here
# from app/services.py: the lines stay as they were for whoever searches them.
log = structlog.get_logger("app.services")


class StartupError(Exception):
    """The service cannot start; the message says what to fix."""


async def refuse_unreadable_chunks(
    settings: Settings, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """StartupError when the settings point at api.telegram.org while chunks
    only a local Bot API server can read are stored (app/store/cloud_cap.py)."""
    if settings.telegram_local_server:
        return
    too_large = await chunks_above_cloud_cap(sessionmaker)
    if too_large:
        raise StartupError(cloud_refusal(too_large))


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
    """Build every part (app.runtime.parts), then start them one by one, each
    start followed by its stop on `stack`. The stack stops them in reverse, so
    the starts run in the reverse of the order a stop needs: the engine first
    (it closes last); the instance row, the leases and the GC before the
    dispatcher (they outlive its drain: its late orphans are ledgered, its
    bots stay leased until its calls end); the work that uses the dispatcher
    after it (stopped before it drains)."""
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
    await refuse_unreadable_chunks(settings, sessionmaker)
    trash.configure(sessionmaker, settings.trash_retention_seconds)
    parts = build_parts(settings, tuning, sessionmaker, single_statements_for(engine))
    await _start_in_order(parts, settings, stack)
    _announce(parts, settings)
    _watch(parts, engine)
    return Services(
        settings=settings,
        flush_lag=parts.flush_lag,
        throughput=parts.throughput,
        metrics=parts.metrics,
        engine=engine,
        sessionmaker=sessionmaker,
        dispatcher=parts.dispatcher,
        gc=parts.gc,
        writer=parts.writer,
        store=parts.store,
        trash=parts.trash_store,
        buckets=parts.buckets,
        multipart=parts.multipart,
        tree=parts.tree,
        dav_locks=parts.dav_locks,
        buffers=parts.buffers,
        spool=parts.spool,
        flusher=parts.flusher,
        instance=parts.instance,
        leases=parts.leases,
        shared_paths=parts.shared_paths,
        resumable=parts.resumable,
        prober=parts.prober,
        scrub=parts.scrub,
        sealing_migration=parts.sealing_migration,
        snapshots=parts.snapshots,
        journal=parts.journal,
        access=parts.access,
        shares=parts.shares,
        started_at=started_at,
        _stack=stack,
    )


async def _start_in_order(parts: Parts, settings: Settings, stack: AsyncExitStack) -> None:
    """Each part started, its stop pushed on `stack` (the order: `_start`)."""
    stack.push_async_callback(parts.dispatcher.close_clients)
    stack.push_async_callback(parts.store.close)
    stack.push_async_callback(parts.writer.settle)
    stack.push_async_callback(parts.access.close)
    if parts.spool.enabled:
        await parts.spool.open()
    # How full each chat is, before the first write may go to a full one.
    await parts.chat_fill.load()
    # Jobs are taken from now on (none runs before a bot passed its check):
    # the registration's reconciliation may queue its probe. The dispatcher
    # stops later in the stack (below), before what outlives its drain.
    await parts.dispatcher.start()
    # Registering also sweeps the pending chunks of instances that died. A
    # stop is safe before its start: it removes what a half-done one wrote.
    stack.push_async_callback(parts.instance.stop)
    await parts.instance.register()
    parts.instance.start()
    stack.push_async_callback(parts.leases.stop)
    await parts.leases.round()
    parts.leases.start()
    parts.gc.start()
    stack.push_async_callback(parts.gc.stop)
    parts.chat_fill.start()
    stack.push_async_callback(parts.chat_fill.stop)  # after the drain's last posts
    budget = StopBudget(settings.shutdown_grace_seconds)
    stack.push_async_callback(_drain_dispatcher, parts.dispatcher, budget)
    parts.shared_paths.start()
    stack.push_async_callback(parts.shared_paths.stop)
    # Its checks and repairs go through the dispatcher.
    parts.scrub.start()
    stack.push_async_callback(parts.scrub.stop)
    stack.push_async_callback(parts.sealing_migration.stop)
    parts.snapshots.start()
    parts.journal.start()
    if settings.snapshot_interval_seconds > 0:
        # Runs before the dispatcher drains (it needs it), after the loop stops.
        stack.push_async_callback(_final_snapshot, parts.snapshots, budget)
    if parts.journal.enabled:
        # Before the final snapshot (callbacks run last in, first out): should
        # that one fail, the changes since the previous one are in the chats.
        stack.push_async_callback(_final_journal, parts.journal, budget)
    # Before the final journal: the parts its last sends commit are in it.
    # Sends of spooled parts need the dispatcher; what they leave stays in
    # the spool for the next start.
    stack.push_async_callback(_stop_flusher, parts.flusher, budget)
    stack.push_async_callback(_cancel_all, parts.background)
    stack.push_async_callback(parts.snapshots.stop)
    stack.push_async_callback(parts.journal.stop)
    parts.prober.start()
    stack.push_async_callback(parts.prober.stop)
    parts.throughput.start()
    stack.push_async_callback(parts.throughput.stop)
    parts.resumable.start()
    stack.push_async_callback(parts.resumable.stop)
    # Runs first: the steps above that wait on Telegram share one grace from here.
    stack.callback(budget.start)


def _announce(parts: Parts, settings: Settings) -> None:
    """What an operator reads at start: the memory budget, the APIs on, what to fix."""
    log.info(
        "upload_budget",
        buffers=parts.buffers.count,
        buffer_bytes=parts.buffers.count * settings.chunk_size,
        spool_dir=str(parts.spool.root) if parts.spool.enabled else None,
        spool_max_bytes=parts.spool.max_bytes,
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


def _watch(parts: Parts, engine: AsyncEngine) -> None:
    """/metrics reads these live at every scrape."""
    parts.metrics.watch_uploads(
        lambda: UploadBudgetUse(
            buffers_in_use=parts.buffers.in_use,
            buffers=parts.buffers.count,
            waiting_uploads=parts.buffers.waiting,
            spool_bytes=parts.spool.used,
            spool_max_bytes=parts.spool.max_bytes,
            spool_disk=parts.spool.disk(),
        )
    )
    parts.metrics.watch_flush_lag(parts.flush_lag.current, alert=parts.flush_lag.alert)
    parts.metrics.watch_upkeep(
        lambda: SnapshotStatus(
            last_taken_at=parts.snapshots.last.taken_at if parts.snapshots.last else None,
            failing=parts.snapshots.last_error is not None,
        ),
        fleet=lambda: parts.leases.fleet_size,
    )
    parts.metrics.watch_durability(lambda: parts.scrub.last_health, lambda: parts.scrub.repaired)
    parts.metrics.watch_journal(parts.journal.status)
    parts.metrics.watch_chats(parts.dispatcher.fill, lambda: parts.gc.last_left)
    parts.metrics.watch(
        bots=parts.dispatcher.status,
        gc_backlog=lambda: parts.gc.last_backlog,
        db_pool=lambda: _pool_usage(engine),
        downloads=parts.budget.status,
    )


async def _stop_flusher(flusher: Flusher, budget: StopBudget) -> None:
    await flusher.stop(grace=budget.flush())


async def _drain_dispatcher(dispatcher: Dispatcher, budget: StopBudget) -> None:
    await dispatcher.stop(grace=budget.drain())


async def _final_journal(journal: Journal, budget: StopBudget) -> None:
    """What is pending at a clean stop goes to the chats, best effort
    within its share of the shutdown grace."""
    try:
        async with asyncio.timeout(budget.journal()):
            while (await journal.ship()).full:
                pass
    except Exception as exc:
        log.warning("final_journal_failed", error=f"{type(exc).__name__}: {exc}")


async def _final_snapshot(snapshots: Snapshots, budget: StopBudget) -> None:
    """A snapshot at a clean stop, best effort within what the grace has
    left but the dispatcher's reserve: the database as it stands at the end
    goes to the chats. Cut off, it pins nothing (the previous one stays).
    Flat out: the requests it would give way to are over."""
    try:
        async with asyncio.timeout(budget.snapshot()):
            await snapshots.take(paced=False)
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
