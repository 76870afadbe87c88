"""Who is in the dispatcher's pool, and on which instance.

`PoolMembership` is a base of `Dispatcher` (app.telegram.dispatcher), as
`PoolViews` is: the bots the getMe check admits or rejects and the storage
chats each may post to (app.telegram.probe calls these), and the leases that
let this instance run a bot while several share the database
(app.store.leases calls these). They change who may work; the dispatcher
runs the work.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence

from app.telegram.routing import Router
from app.telegram.worker import BotWorker


class PoolMembership:
    """Admission of bots, their chats, and their leases."""

    workers: dict[int, BotWorker]
    chat_ids: list[int]
    _clock: Callable[[], float]
    _leasing: bool
    _router: Router

    def _start_lanes(self, worker: BotWorker) -> None:
        raise NotImplementedError  # the dispatcher's

    def admit(self, bot_id: int, chats: Sequence[int] | None = None) -> None:
        """A held-back bot passed its check: it joins the pool now, for
        `chats` only if given (the storage chats it may post to)."""
        worker = self.workers[bot_id]
        if not worker.probing:
            return
        if chats is not None:
            worker.chats = set(chats) & set(self.chat_ids)
        for chat in worker.chats:
            self._router.last_refusal.pop(chat, None)
        worker.probing = False
        worker.usable = True
        self._start_lanes(worker)
        self._router.wake_all()

    def chats_to_recheck(self) -> dict[int, list[int]]:
        """The storage chats each bot is out of (refused at its check, or
        since), for the bots a re-check may bring back: those in the pool,
        and those out of it only because every chat refused them. Not a bot
        still held back for its first check, nor one out for good (a revoked
        token keeps its chats but leaves the pool)."""
        missing: dict[int, list[int]] = {}
        for worker in self.workers.values():
            if worker.probing or (not worker.usable and worker.chats):
                continue
            chats = [chat for chat in self.chat_ids if chat not in worker.chats]
            if chats:
                missing[worker.bot_id] = chats
        return missing

    def rejoin(self, bot_id: int, chats: Sequence[int]) -> None:
        """A re-check found that the bot may post in `chats` again: it goes
        back into them, and back into the pool if every chat had refused it."""
        worker = self.workers[bot_id]
        if worker.probing or (not worker.usable and worker.chats):
            return  # out for good since the re-check began
        worker.chats |= set(chats) & set(self.chat_ids)
        for chat in chats:
            self._router.last_refusal.pop(chat, None)
        if not worker.usable and worker.chats:
            worker.usable = True
            self._start_lanes(worker)
        self._router.wake_all()

    def note_check_problem(self, bot_id: int, problem: str) -> None:
        """Why a held-back bot's latest check did not pass (told to callers
        while no bot is admitted)."""
        self.workers[bot_id].check_problem = problem

    def reject(self, bot_id: int) -> None:
        """A held-back bot failed its check for good: it stays out."""
        self.workers[bot_id].probing = False

    def probing_bots(self) -> list[int]:
        """The bots held back until their check passes."""
        return [w.bot_id for w in self.workers.values() if w.probing]

    # --- leases (several instances) -------------------------------------------

    def require_leases(self) -> None:
        """Run a bot only while its lease is granted (call before `start`)."""
        self._leasing = True
        for worker in self.workers.values():
            worker.leased = False
            worker.lease_until = 0.0

    def grant(
        self, bot_id: int, until: float, cooldown_until: float, *, cut_at: float = math.inf
    ) -> None:
        """This instance holds the bot's lease: it may start calls until
        `until` (monotonic), not before `cooldown_until` (a 429 on the lease),
        and a call still running at `cut_at` is cut (the lease would end)."""
        worker = self.workers[bot_id]
        newly = not worker.leased
        worker.leased = True
        worker.lease_until = until
        worker.cut_at = cut_at
        worker.cooldown_until = max(worker.cooldown_until, cooldown_until)
        self._reschedule_cuts(worker)
        worker.changed.set()
        if newly:
            self._router.wake_all()

    def _reschedule_cuts(self, worker: BotWorker) -> None:
        """The running calls' cuts move with the lease."""
        for lane in (worker, worker.small):
            if lane.deadline is not None and not lane.deadline.expired():
                left = worker.cut_at - self._clock()
                loop_time = asyncio.get_running_loop().time()
                lane.deadline.reschedule(None if math.isinf(left) else loop_time + left)

    def extend_cut(self, bot_id: int, cut_at: float) -> None:
        """The lease of a bot being handed over was renewed: its running
        calls may go on until `cut_at` (it starts no new one)."""
        worker = self.workers[bot_id]
        worker.cut_at = cut_at
        self._reschedule_cuts(worker)

    def withdraw(self, bot_id: int) -> None:
        """No new call with the bot from now on, its queues to other bots:
        the first half of `revoke`, at once."""
        worker = self.workers[bot_id]
        worker.leased = False
        worker.lease_until = 0.0
        self._router.move_queue_away(worker, include_pinned=True)

    async def revoke(self, bot_id: int) -> None:
        """Stop the bot before its lease moves (`withdraw`), and return once
        its running calls have ended."""
        self.withdraw(bot_id)
        worker = self.workers[bot_id]
        while worker.busy:
            worker.changed.clear()
            await worker.changed.wait()

    def lease_left(self, bot_id: int) -> bool:
        """Whether this instance may still start a call with the bot."""
        worker = self.workers[bot_id]
        return worker.leased and self._clock() < worker.lease_until

    def leased_bots(self) -> list[int]:
        return [w.bot_id for w in self.workers.values() if w.leased]
