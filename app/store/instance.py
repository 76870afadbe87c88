"""This process as one instance among those sharing the database.

It registers itself with an id, keeps a heartbeat, and takes over the spooled
parts of instances that have died: those whose heartbeat went stale, or, on
this host, whose process is gone (a restart after kill -9 need not wait for
the heartbeat to age). Rows of a live instance are never touched.

A dead instance is also an unclean stop: its row is deleted (the claim, so
only one live instance acts on it) and the storage chat is marked for
reconciliation (app/store/reconcile.py), which runs in the background. Every
storage chat is marked: a dead instance may have posted in any of them.

Every SWEEP_EVERY_BEATS beats it does all of that again, and retires this
instance's own pending chunks (and send intents) older than its oldest
running upload, less UNCOMMITTED_GRACE: they belong to request tasks that
died without releasing them. A running upload's rows are never among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config.tuning import INSTANCE_STALE_SECONDS, UNNAMED_SPOOL_FILE_AGE_SECONDS
from app.db.intents import IntentRepository, WatermarkRepository
from app.db.session import session_scope
from app.db.spool import InstanceRepository, SpoolRepository
from app.db.types import utcnow
from app.kit.periodic import Periodic
from app.store.blocks import READABLE, digest_for_new_chunks
from app.store.gc import GarbageCollector
from app.store.reconcile import Reconciler
from app.store.spool import Spool

log = structlog.get_logger("app.store.instance")

# Every this many beats, take over what instances that died left behind.
SWEEP_EVERY_BEATS = 12
# An upload's chunks are committed moments after its last chunk is stored; the
# periodic sweep leaves pending chunks younger than this alone in any case.
UNCOMMITTED_GRACE = timedelta(minutes=10)


def new_instance_id() -> str:
    return secrets.token_hex(8)


class InstanceHeartbeat:
    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        spool: Spool,
        gc: GarbageCollector,
        *,
        reconciler: Reconciler | None = None,
        on_adopted: Callable[[], Awaitable[None]] | None = None,
        running_since: Callable[[], datetime | None] | None = None,
        on_block_digest: Callable[[str], None] | None = None,
        on_fenced: Callable[[bool], Awaitable[None]] | None = None,
        interval: float,
        stale_after: float = INSTANCE_STALE_SECONDS,
        unnamed_file_age: float = UNNAMED_SPOOL_FILE_AGE_SECONDS,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._spool = spool
        self._gc = gc
        self.started_at = utcnow()
        self.on_adopted = on_adopted
        # When this instance's oldest running upload began (None: none runs);
        # without it, the own pending chunks are left to the next start.
        self.running_since = running_since
        # Told at registration and at every beat which block digest new
        # chunks may get (app.store.blocks.digest_for_new_chunks).
        self.on_block_digest = on_block_digest
        # Told True when a beat finds this instance's row gone (taken for
        # dead: stop storing), then False once it has registered anew.
        self.on_fenced = on_fenced
        self.fences = 0  # since the start
        self._fencing = asyncio.Lock()
        self.reconciler = reconciler
        self._reconcile_requests = 0  # since the last sweep that marked the chat
        self._reconciling: asyncio.Task[None] | None = None
        self.instance_id = spool.instance_id
        self._host = socket.gethostname()[:255]
        self._stale_after = stale_after
        self._unnamed_file_age = unnamed_file_age
        self._beats = 0
        self.loop = Periodic("instance_heartbeat", self._beat, interval=interval)

    async def register(self) -> int:
        """Announce this instance, adopt the spool of dead ones and retire
        their pending chunks; returns how many spooled parts were adopted."""
        async with session_scope(self._sessionmaker) as session:
            await InstanceRepository(session).register(
                self.instance_id, self._host, os.getpid(), block_digests=READABLE
            )
            await self._tell_block_digest(session)
        return await self.adopt()

    async def adopt(self) -> int:
        """Take over what dead instances left: spooled parts (flushed by this
        one from now on), spool files no row names, pending chunks."""
        async with session_scope(self._sessionmaker) as session:
            live = await self._live_ids(session)
            dead = await IntentRepository(session).registered_instances() - live
        # A transaction of its own: on SQLite, one that read first could not
        # take the write lock once another connection has written since.
        # Dead instances' rows go first: the sweeps below touch only rows
        # whose owner has no instance row (one registered since `live` was
        # read is alive).
        async with session_scope(self._sessionmaker) as session:
            requested = self._reconcile_requests
            if self.reconciler is not None:
                marks = WatermarkRepository(session)
                claimed = await marks.claim_dead(self.reconciler.chat_ids, dead)
                if claimed:
                    log.warning("unclean_stop_found", instances=claimed)
                if requested:
                    # Which chat the lost send went to is not known: all of them.
                    await marks.mark_unclean(self.reconciler.chat_ids)
            else:
                await InstanceRepository(session).forget(dead)
            sizes = await SpoolRepository(session).adopt(self.instance_id, live)
            referenced = await SpoolRepository(session).all_paths()
        self._reconcile_requests -= requested  # marked (those since wait for the next sweep)
        self._spool.account(sizes)
        adopted = len(sizes)
        removed = await self._spool.remove_unreferenced(
            referenced, live | {self.instance_id}, min_age=self._unnamed_file_age
        )
        if adopted or removed:
            log.info("spool_adopted", parts=adopted, unreferenced_files_removed=removed)
        await self._gc.sweep_orphans(before=self.started_at, live_owners=live)
        await self._sweep_own()
        if adopted and self.on_adopted is not None:
            await self.on_adopted()
        self._start_reconciling()
        return adopted

    async def _sweep_own(self) -> None:
        """Retire this instance's pending chunks and intents that no running
        upload can hold: older than the oldest running one (and the grace)."""
        if self.running_since is None:
            return
        cutoff = utcnow() - UNCOMMITTED_GRACE
        oldest = self.running_since()
        if oldest is not None:
            cutoff = min(cutoff, oldest)
        await self._gc.sweep_stale(self.instance_id, before=cutoff)
        async with session_scope(self._sessionmaker) as session:
            await IntentRepository(session).forget_older(self.instance_id, cutoff)

    @property
    def reconciling(self) -> bool:
        """Whether a reconciliation runs in the background now."""
        return self._reconciling is not None and not self._reconciling.done()

    def request_reconcile(self) -> None:
        """A send may have left a message no row knows of (its answer was
        lost): reconcile the chat after the next sweep. Sync, for the
        dispatcher's attempt observer."""
        self._reconcile_requests += 1

    def reconcile_now(self) -> None:
        """Reconcile as soon as possible: the first bot passed its check, so
        the probe can be sent (one tried before that failed, and waits for
        the next sweep otherwise)."""
        self._start_reconciling()

    def _start_reconciling(self) -> None:
        """Run a reconciliation in the background if none runs (it decides
        itself whether the chat needs one)."""
        if self.reconciler is None:
            return
        if self._reconciling is not None and not self._reconciling.done():
            return
        self._reconciling = asyncio.create_task(self._reconcile(), name="reconcile")

    async def _reconcile(self) -> None:
        assert self.reconciler is not None
        try:
            await self.reconciler.run()
        except Exception as exc:
            # Telegram or the database may be down; the next sweep tries again.
            log.warning("reconcile_failed", error=str(exc))

    async def live_ids(self) -> set[str]:
        """The instances alive now (this one included)."""
        async with session_scope(self._sessionmaker) as session:
            return await self._live_ids(session)

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        if self._reconciling is not None:
            self._reconciling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciling
        # A clean stop: its rows may be adopted at once (none are left unless
        # a flush was cut short by the grace period). A send cut off by the
        # stop, or lost since the last sweep, may have posted a message no row
        # knows of: the chats stay marked for the next start to reconcile.
        with contextlib.suppress(Exception):
            async with session_scope(self._sessionmaker) as session:
                if self._reconcile_requests and self.reconciler is not None:
                    await WatermarkRepository(session).mark_unclean(self.reconciler.chat_ids)
                    log.warning("unclean_sends_at_stop", sends=self._reconcile_requests)
                await InstanceRepository(session).remove(self.instance_id)

    async def _beat(self) -> None:
        self._beats += 1
        async with session_scope(self._sessionmaker) as session:
            present = await InstanceRepository(session).heartbeat(self.instance_id)
            if present:
                await self._tell_block_digest(session)
        if not present:
            await self.row_lost()
        if self._beats % SWEEP_EVERY_BEATS == 0:
            await self.adopt()

    async def row_lost(self) -> None:
        """This instance's row was found gone (by a beat, or by the lease
        round): fence and register anew, once however many found it."""
        if self._fencing.locked():
            async with self._fencing:
                return
        async with self._fencing:
            await self._fence()

    async def _fence(self) -> None:
        """This instance's row is gone: another instance took it for dead
        (a stall past `stale_after`: a VM pause, a database failover), and has
        claimed its send intents, adopted its spooled parts and may have
        ledgered its unrecorded messages. Stop storing (what was under way
        fails, 503), then register anew: the work from then on is its own."""
        self.fences += 1
        log.error(
            "instance_taken_for_dead",
            instance_id=self.instance_id,
            detail="another instance claimed this one after a stall; uploads under way "
            "fail (503) and it registers anew",
        )
        if self.on_fenced is not None:
            await self.on_fenced(True)
        async with session_scope(self._sessionmaker) as session:
            await InstanceRepository(session).register_again(
                self.instance_id, self._host, os.getpid(), block_digests=READABLE
            )
        # Its own spool rows written since the claim are this instance's
        # again; those the claimer adopted are the claimer's.
        if self.on_fenced is not None:
            await self.on_fenced(False)
        log.warning("instance_registered_anew", instance_id=self.instance_id)

    async def _tell_block_digest(self, session: AsyncSession) -> None:
        if self.on_block_digest is not None:
            fleet = await InstanceRepository(session).block_digests(await self._live_ids(session))
            self.on_block_digest(digest_for_new_chunks(fleet))

    async def _live_ids(self, session: AsyncSession) -> set[str]:
        instances = InstanceRepository(session)
        live = await instances.live_ids(self._stale_after) | {self.instance_id}
        for instance_id, pid in await instances.processes_on(self._host, live):
            if instance_id != self.instance_id and not process_alive(pid):
                live.discard(instance_id)
        return live


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
