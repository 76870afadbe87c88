"""The scrub: every chunk copy checked within SCRUB_PERIOD, and every loss
repaired from a good copy.

* **Checks.** Each round (every `ROUND_SECONDS`) reads the copies checked
  longest ago whole and checks every block against its stored hash (getFile
  through the bot that uploaded the copy, one call like any other: the
  dispatcher's one-call-per-token rule holds), as many as it takes to visit
  every copy once a period, spread evenly, and no more than the daily byte
  budget (SCRUB_READ_BYTES_PER_DAY) allows: getFile is a download (the Bot
  API server fetches the whole file before it answers, holding the bot's
  one call meanwhile: telegram-bot-api Client.cpp, do_get_file), so a check
  that only asked getFile would cost Telegram's side as much as one that
  reads the bytes; each check spends its copy's size, and the budget left
  carries over to the next round. A copy Telegram no longer holds is
  'missing', one with wrong bytes 'corrupt'; one it could not serve this
  time is counted (app/store/copy_failures.py: missing only once that
  lasts). A round gives way to user traffic: it stops when the bots have
  work queued.
* **Repairs.** A chunk with fewer intact copies than REPLICAS (a bad copy
  found by a check or by a read, or REPLICAS raised) gets new copies from an
  intact one (app/store/repairs.py).
* **Lost.** A chunk none of whose copies is intact is lost, and so are the
  objects made of it: they are answered as damaged, never served, and
  counted (`Health`) on /metrics, the status page, `teleuploader check` and
  the object's own API answer. A repair asks about a lost chunk's copies
  once more (one taken for bad may read after all); found unreadable, the
  chunk waits for a check that finds a copy intact again, as every copy is
  checked: one Telegram had only "temporarily unavailable" may come back.
* **Which repairs.** Each round takes the next REPAIRS_PER_ROUND short
  chunks, fewest intact copies first, on from where the round before
  stopped, so chunks whose repair keeps failing never hold the others back;
  those it cannot repair are left out (app/store/repair_queue.py).

With several instances, each checks the copies of the bots it holds (a
full pass reports the copies it left to the others: `skipped`); any
repairs a chunk it finds short (a repair adds a copy only while the chunk is
short of REPLICAS, under its row's lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Literal

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copies import BadState, ChunkRow, CopyRepository, CopyRow, Health, ShortChunk
from app.db.copy_counts import live_copies_of
from app.db.session import session_scope
from app.kit.periodic import Periodic
from app.sealing import CUSTOMER_KEY_ID
from app.store.blocks import hashes_root
from app.store.copy_failures import CopyFailures, is_gone, is_unavailable
from app.store.encryption import Encryption
from app.store.errors import EncryptionKeyUnavailable, pass_failure
from app.store.gc import GarbageCollector
from app.store.locator import ChunkLocator, copy_ref
from app.store.repair_queue import RepairQueue
from app.store.repairs import Repairs
from app.store.scrub_report import FullPass, PassReport
from app.store.upload_buffers import UploadBuffers
from app.store.whole_copy import CopyBad, WholeCopy
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import BotUnusable, TelegramError

log = structlog.get_logger("app.store.scrub")

ROUND_SECONDS = 60.0
# Repairs per round, at most (each re-uploads a chunk).
REPAIRS_PER_ROUND = 20
# Copies a full pass reads from the database at a time.
PASS_BATCH = 1000
DAY = 86400.0
# How long a full pass waits for this instance's bots to pass their checks
# before it starts. Right after a start they are still being checked, and
# after a kill -9 a dead holder's leases pass only once they expire
# (BOT_LEASE_SECONDS, 15 s by default, 300 s at most); a pass that started
# at once would skip every copy of those bots and repair nothing.
BOTS_WAIT = 120.0
BOTS_POLL = 0.2
# A check's verdict on a copy Telegram could not serve this time.
Verdict = BadState | Literal["unavailable"]


class Scrub:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        locator: ChunkLocator,
        buffers: UploadBuffers,
        *,
        replicas: int,
        period: float,
        read_bytes_per_day: int,
        owner: str | None = None,
        round_seconds: float = ROUND_SECONDS,
        encryption: Encryption | None = None,
        failures: CopyFailures | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dispatcher = dispatcher
        self._failures = failures if failures is not None else CopyFailures(sessionmaker)
        self._encryption = encryption if encryption is not None else Encryption(None)
        self._sessionmaker = sessionmaker
        self._gc = gc
        self._locator = locator
        self._buffers = buffers
        self.replicas = replicas
        self._period = period
        # Bytes the rounds may still have Telegram fetch: the day's budget
        # accrues with time (a day's at most), a check spends its copy's
        # size. By time, not per round: a round woken early (a bad copy
        # reported) adds nothing.
        self._read_per_day = read_bytes_per_day
        self._allowance = 0.0
        self._clock = clock
        self._accrued_at: float | None = None
        self._owner = owner
        self.loop = Periodic(
            "scrub", self._round, interval=round_seconds, jitter=0.1, run_at_start=True
        )
        self._round_seconds = round_seconds
        # Reports of reads and checks, written in the background.
        self._background: set[asyncio.Task[None]] = set()
        self.last_health: Health | None = None
        self.full_pass: FullPass | None = None
        self._full_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one pass or round at a time
        self._queue = RepairQueue(sessionmaker, replicas=replicas, key_ids=self._encryption.key_ids)
        self._repairs_of = Repairs(
            dispatcher,
            sessionmaker,
            gc,
            locator,
            buffers,
            self._queue,
            self._encryption,
            replicas=replicas,
            owner=owner,
            mark_bad=self._mark_bad,
            count_failure=self._count_failure,
        )

    @property
    def repaired(self) -> int:
        """Copies added by repairs since the start (a metric)."""
        return self._repairs_of.repaired

    def start(self) -> None:
        if self._period > 0:
            self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        if self._full_task is not None:
            self._full_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._full_task
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # --- what reads report --------------------------------------------------------

    def report_bad(self, chunk_id: int, copy_id: int, state: str) -> None:
        """A read found a copy missing or corrupt: recorded, and a repair soon."""
        bad: BadState = "corrupt" if state == "corrupt" else "missing"
        self._in_background(self._mark_bad(copy_id, bad))

    def report_unavailable(self, chunk_id: int, copy_id: int) -> None:
        """A read could not have Telegram serve a copy: counted; missing
        once that lasts (app/store/copy_failures.py), and a repair soon."""
        self._in_background(self._count_failure(copy_id))

    def copy_served(self, copy_id: int) -> None:
        """A read was served by a copy: failures counted of it are forgotten."""
        if self._failures.may_be_failing(copy_id):
            self._in_background(self._failures.served(copy_id))

    async def _count_failure(self, copy_id: int) -> bool:
        """Count a failure of the copy; True if that made it missing."""
        if not await self._failures.failed(copy_id):
            return False
        log.warning("copy_missing_after_failures", copy_id=copy_id)
        await self._mark_bad(copy_id, "missing")
        return True

    def hashes_found(self, chunk_id: int, hashes: bytes, root: str) -> None:
        """A chunk stored before verified reads was read whole and found right."""

        async def record() -> None:
            async with session_scope(self._sessionmaker) as session:
                await CopyRepository(session).set_block_hashes(chunk_id, hashes, root)

        self._in_background(record())

    async def _mark_bad(self, copy_id: int, state: BadState) -> None:
        async with session_scope(self._sessionmaker) as session:
            await CopyRepository(session).mark_bad(copy_id, state)
        self.loop.wake()

    def _in_background(self, work: Coroutine[Any, Any, object]) -> None:
        async def guarded() -> None:
            try:
                await work
            except Exception as exc:  # the next check finds it again
                log.warning("scrub_report_failed", error=str(exc))

        task = asyncio.create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- health -----------------------------------------------------------------------

    async def health(self) -> Health:
        async with session_scope(self._sessionmaker) as session:
            health = await CopyRepository(session).health(self.replicas)
        self.last_health = health
        return health

    # --- full passes (the API) -----------------------------------------------------------

    def start_full_pass(self, *, deep: bool) -> FullPass:
        """Run a full pass now in the background (or the one running)."""
        if self.full_pass is not None and self.full_pass.finished_at is None:
            return self.full_pass
        full = FullPass(deep=deep)
        self.full_pass = full

        async def run() -> None:
            try:
                await self.run_pass(deep=deep, into=full.report)
            except Exception as exc:
                full.error = pass_failure(exc, "scrub_pass_failed")
                log.warning("scrub_pass_failed", exc_info=exc)
            finally:
                full.finished_at = datetime.now(UTC)

        self._full_task = asyncio.create_task(run(), name="scrub-pass")
        return full

    async def run_pass(self, *, deep: bool, into: PassReport | None = None) -> PassReport:
        """Every copy this instance may ask about checked (and read whole,
        `deep`), then every short chunk repaired."""
        report = into if into is not None else PassReport()
        await self._await_bots()
        async with self._lock:
            after = 0
            elsewhere = self._dispatcher.held_elsewhere  # as the pass began
            while True:
                async with session_scope(self._sessionmaker) as session:
                    copy_ids = await CopyRepository(session).copy_ids(
                        after, PASS_BATCH, not_by=elsewhere
                    )
                if not copy_ids:
                    break
                for copy_id in copy_ids:
                    await self._check(copy_id, deep=deep, report=report)
                after = copy_ids[-1]
            short: ShortChunk | None = None
            while True:  # every short chunk once
                short, _ = await self._repair_page(report, short, REPAIRS_PER_ROUND)
                if short is None:
                    break
            await self._count(report)
            if elsewhere:
                async with session_scope(self._sessionmaker) as session:
                    report.skipped = await live_copies_of(session, elsewhere)
        log.info("scrub_pass_done", deep=deep, **asdict(report))
        return report

    def _bots_on_their_way(self) -> list[int]:
        """Bots not yet checked here that no live instance holds: they serve
        this instance once their lease comes and their check passes. (Not one
        whose check failed already: it may stay out for good.)"""
        elsewhere = self._dispatcher.held_elsewhere
        return [
            worker.bot_id
            for worker in self._dispatcher.workers.values()
            if worker.probing and worker.check_problem is None and worker.bot_id not in elsewhere
        ]

    async def _await_bots(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BOTS_WAIT
        waited = False
        while self._bots_on_their_way() and loop.time() < deadline:
            if not waited:
                log.info("scrub_pass_waits_for_bots", bots=self._bots_on_their_way())
                waited = True
            await asyncio.sleep(BOTS_POLL)

    # --- the background rounds -----------------------------------------------------------

    async def _round(self) -> None:
        async with self._lock:
            report = PassReport()
            await self._repairs(report, limit=REPAIRS_PER_ROUND)
            async with session_scope(self._sessionmaker) as session:
                copies = await CopyRepository(session).health(self.replicas)
            # Every copy once a period, spread evenly over its rounds.
            due = math.ceil(copies.copies * self._round_seconds / self._period)
            async with session_scope(self._sessionmaker) as session:
                copy_ids = await CopyRepository(session).due_for_check(
                    max(due, 1), not_by=self._dispatcher.held_elsewhere
                )
            self._accrue()
            for copy_id in copy_ids:
                if self._dispatcher.backlog() > 0:
                    break  # user traffic first: the next round goes on
                if self._allowance <= 0:
                    break  # the day's bytes are spent: the next rounds go on
                self._allowance -= await self._check(copy_id, deep=True, report=report)
            await self._count(report)
            if report.missing or report.corrupt or report.repaired:
                log.info("scrub_round", **asdict(report))

    def _accrue(self) -> None:
        """The budget's share since the last round (the first: one round's)."""
        now = self._clock()
        last = self._accrued_at
        elapsed = self._round_seconds if last is None else now - last
        self._accrued_at = now
        share = self._read_per_day * elapsed / DAY
        self._allowance = min(self._allowance + share, max(float(self._read_per_day), 1.0))

    async def _count(self, report: PassReport) -> None:
        health = await self.health()
        report.degraded_objects = health.objects_degraded
        report.lost_objects = health.objects_lost

    # --- one copy ----------------------------------------------------------------------------

    async def _check(self, copy_id: int, *, deep: bool, report: PassReport) -> int:
        """Check one copy; the bytes that made Telegram's side fetch (its size,
        or 0 when it was not asked about)."""
        async with session_scope(self._sessionmaker) as session:
            repo = CopyRepository(session)
            found = await repo.copy(copy_id)
            if found is None:
                return 0  # released meanwhile
            chunk_id, copy = found
            chunk = (await repo.chunks([chunk_id])).get(chunk_id)
        if chunk is None:
            return 0
        worker = self._dispatcher.workers.get(copy.bot_id)
        if worker is not None and worker.probing:
            return 0  # its bot is still being checked: the next round asks
        # A chunk under a customer key (S3 SSE-C) opens only with its
        # owner's key, which the service does not keep: its copies are
        # checked for presence only, never marked verified.
        deep = deep and chunk.seal_key_id != CUSTOMER_KEY_ID
        try:
            verdict = await self._look_at(chunk, copy, deep=deep, report=report)
        except (TelegramError, EncryptionKeyUnavailable) as exc:
            # Telegram is unwell (or the key is not here), not the copy: it
            # is asked again next time.
            log.warning("copy_check_failed", copy_id=copy_id, error=str(exc))
            return chunk.size
        report.checked += 1
        if verdict == "unavailable":
            report.unavailable += 1
            if not await self._count_failure(copy_id):
                return chunk.size
            verdict = "missing"
        else:
            async with session_scope(self._sessionmaker) as session:
                repo = CopyRepository(session)
                if verdict is None:
                    await repo.mark_checked(copy_id, verified=deep)
                    await self._failures.served(copy_id, session)
                else:
                    await repo.mark_bad(copy_id, verdict)
        if verdict == "missing":
            report.missing += 1
        elif verdict == "corrupt":
            report.corrupt += 1
        return chunk.size

    async def _look_at(
        self, chunk: ChunkRow, copy: CopyRow, *, deep: bool, report: PassReport
    ) -> Verdict | None:
        """None if the copy is there (and, `deep`, right), else what is wrong."""
        ref = copy_ref(copy)
        worker = self._dispatcher.workers.get(copy.bot_id)
        if worker is None or not worker.usable:
            # Its bot is out of the pool for good: the copy is reached only
            # through others' forwards. A copy of its own replaces it.
            return "missing"
        try:
            if not deep:
                # Asked now, not answered from the paths cached for reads.
                await self._locator.confirm(ref, chunk.size, cached=False)
                return None if worker.usable else "missing"
            check = WholeCopy(chunk, copy, self._encryption)
            self._locator.forget(ref)
            async with self._locator.open_copy(ref, chunk.size, 0) as (_start, body):
                async for data in body:
                    for _ in check.feed(data):
                        pass
            hashes = check.finish()
        except CopyBad:
            return "corrupt"
        except BotUnusable:
            return "missing"  # its bot is out (revoked, kicked): a copy of its own replaces it
        except TelegramError as exc:
            if is_gone(exc):
                return "missing"
            if is_unavailable(exc):
                return "unavailable"
            raise
        report.read += 1
        report.read_bytes += chunk.size
        if chunk.block_hashes is None and hashes is not None:
            self.hashes_found(chunk.id, hashes, hashes_root(hashes))
        if not worker.usable:
            # Its bot was found revoked on the way (the read went through
            # another bot's forward): a copy of its own replaces it.
            return "missing"
        return None

    # --- repairs ---------------------------------------------------------------------------

    async def _repairs(self, report: PassReport, *, limit: int) -> int:
        """Repair the next `limit` short chunks (app/store/repair_queue.py);
        how many were repaired."""
        self._queue.cursor, repaired = await self._repair_page(report, self._queue.cursor, limit)
        return repaired

    async def _repair_page(
        self, report: PassReport, after: ShortChunk | None, limit: int
    ) -> tuple[ShortChunk | None, int]:
        """Repair up to `limit` short chunks past `after`; where the next
        page starts (None: this one reached the end), and how many were
        repaired."""
        if not self._dispatcher.usable_bots():
            # A repair reads and uploads through bots: with none here yet
            # (still being checked) it would take every chunk for lost.
            return None, 0
        chunk_ids, after = await self._queue.take(limit, after)
        repaired = 0
        for chunk_id in chunk_ids:
            try:
                if await self.repair(chunk_id, report=report):
                    repaired += 1
            except (TelegramError, EncryptionKeyUnavailable) as exc:
                log.warning("chunk_repair_failed", chunk_id=chunk_id, error=str(exc))
        return after, repaired

    async def repair(self, chunk_id: int, *, report: PassReport | None = None) -> bool:
        """Bring the chunk back to REPLICAS intact copies (app/store/repairs.py);
        True if a copy was added."""
        report = report if report is not None else PassReport()
        added = await self._repairs_of.repair(chunk_id)
        report.repaired += added
        return added > 0
