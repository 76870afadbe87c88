"""The dispatcher's pool as /ready, /metrics and other components see it.

`PoolViews` is a base of `Dispatcher` (app.telegram.dispatcher): its
methods only read the pool (which bots may work, and where; how much waits),
while the dispatcher changes it. Apart so that each reads on its own; they
share the dispatcher's state, which `Dispatcher.__init__` sets.
"""

from __future__ import annotations

from collections.abc import Callable

from app.telegram.routing import Router
from app.telegram.worker import BotStatus, BotWorker


class PoolViews:
    """Read-only views of the bot pool, for the service's health and metrics."""

    workers: dict[int, BotWorker]
    chat_ids: list[int]
    _clock: Callable[[], float]
    _leasing: bool
    _router: Router

    def usable_bots(self, chat_id: int | None = None) -> list[int]:
        """The bots in the pool; with `chat_id`, those that may act in it (a
        chat that is no storage chat any more was not checked: any bot)."""
        return [
            w.bot_id
            for w in self.workers.values()
            if w.usable and (chat_id is None or chat_id in w.chats or chat_id not in self.chat_ids)
        ]

    def serving_bots(self, chat_id: int | None = None) -> list[int]:
        """The bots that can take a call on this instance now; with
        `chat_id`, those that may act in it (see `usable_bots`)."""
        now = self._clock()
        return [
            w.bot_id
            for w in self.workers.values()
            if w.serving(now)
            and (chat_id is None or chat_id in w.chats or chat_id not in self.chat_ids)
        ]

    def pool_size(self) -> int:
        """The bots the work here can count on: usable ones, and with leases
        also those another instance holds (it checked them; they come here
        when the work does). A bot held here counts once its check passed."""
        return sum(
            1
            for w in self.workers.values()
            if w.usable or (self._leasing and w.probing and not w.leased)
        )

    def backlog(self) -> int:
        """Jobs waiting or running here: what bots are wanted for."""
        return self._router.pending_jobs()

    def seconds_until_free(self) -> float:
        """How long until some usable bot is likely to take a new job."""
        return self._router.seconds_until_free()

    def status(self) -> list[BotStatus]:
        now = self._clock()
        return [
            BotStatus(
                bot_id=w.bot_id,
                usable=w.usable,
                cooling_down_for=max(0.0, w.cooldown_until - now),
                queued=len(w.queue) + len(w.small.queue),
                running=w.busy,
                sends=w.sends,
                bytes_sent=w.bytes_sent,
                rate_limited=w.rate_limited,
                abandoned=w.abandoned,
                errors=dict(w.errors),
                probing=w.probing,
                chats=tuple(c for c in self.chat_ids if c in w.chats and not w.probing),
            )
            for w in self.workers.values()
        ]
