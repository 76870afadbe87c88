"""The process's writers of one SQLite database take turns, first come first served.

SQLite has one write lock per database. A connection that wants it and finds
it taken sleeps and polls (its busy handler): a few milliseconds between the
first tries, then 100 ms each. So a writer that has waited a while polls
rarely, and newer writers, polling often, take the lock before it. Under
many concurrent uploads on a busy machine, one writer lost that race for the
whole `busy_timeout` (5 s) and its client got a 503 (seen in CI:
test_concurrent_uploads_all_come_back_intact, "database is locked").

Here a connection takes the process's turn before its transaction's first
write, and hands it on when the transaction ends, to the writer that has
waited longest. Waiting is an await on the event loop, not a thread asleep in
SQLite. Writers in other processes (the CLI) still meet SQLite's own lock and
its busy_timeout.
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections import deque

#: How long a writer waits for its turn before its statement fails as SQLite's
#: own wait would ("database is locked": a 503 with Retry-After). Longer than
#: busy_timeout: this wait is fair, so a long one means a long queue, and
#: waiting is better than a failed request.
WRITE_TURN_WAIT_SECONDS = 30.0
#: How often a waiter checks whether the holder is gone without handing the
#: turn on (a connection dropped by the garbage collector mid-transaction).
_HOLDER_CHECK_SECONDS = 1.0

_WRITE_KEYWORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER"})


def is_write(statement: str) -> bool:
    """Whether `statement` takes SQLite's write lock (a CTE counts when it
    names a writing keyword; a false positive only queues a reader)."""
    words = statement.lstrip().split(None, 2)
    if not words:
        return False
    first = words[0].upper()
    if first in _WRITE_KEYWORDS:
        return True
    if first == "BEGIN":
        return len(words) > 1 and words[1].upper() in ("IMMEDIATE", "EXCLUSIVE")
    if first == "WITH":
        upper = statement.upper()
        return any(f"{keyword} " in upper for keyword in ("INSERT", "UPDATE", "DELETE"))
    return False


class WriteTurns:
    """One holder at a time, handed on in the order the waiters asked.

    Holders are any objects (a driver connection); they are held weakly, so
    one the garbage collector takes frees the turn.
    """

    def __init__(self, wait_seconds: float = WRITE_TURN_WAIT_SECONDS) -> None:
        self._wait_seconds = wait_seconds
        self._holder: weakref.ref[object] | None = None
        self._waiters: deque[tuple[asyncio.Future[None], weakref.ref[object]]] = deque()

    def holds(self, holder: object) -> bool:
        return self._holder is not None and self._holder() is holder

    async def take(self, holder: object) -> None:
        """Wait for the turn; sqlite3.OperationalError("database is locked")
        after `wait_seconds`, as SQLite's busy_timeout would."""
        if self.holds(holder):
            return
        if self._is_free() and not self._waiters:
            self._holder = weakref.ref(holder)
            return
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self._waiters.append((turn, weakref.ref(holder)))
        deadline = loop.time() + self._wait_seconds
        try:
            while not turn.done():
                left = deadline - loop.time()
                if left <= 0:
                    raise sqlite3.OperationalError("database is locked")
                await asyncio.wait({turn}, timeout=min(left, _HOLDER_CHECK_SECONDS))
                if not turn.done() and self._is_free():
                    self._hand_on()
        except BaseException:
            if turn.done() and not turn.cancelled():
                # Handed the turn just as it gave up: pass it on.
                self.release(holder)
            else:
                turn.cancel()
                self._drop(turn)
            raise

    def release(self, holder: object) -> None:
        """Hand the turn on if `holder` has it (a no-op otherwise)."""
        if self.holds(holder):
            self._holder = None
            self._hand_on()

    def _is_free(self) -> bool:
        return self._holder is None or self._holder() is None

    def _hand_on(self) -> None:
        self._holder = None
        while self._waiters:
            turn, waiter = self._waiters.popleft()
            if turn.done() or waiter() is None:
                continue
            self._holder = waiter
            turn.set_result(None)
            return

    def _drop(self, turn: asyncio.Future[None]) -> None:
        for entry in self._waiters:
            if entry[0] is turn:
                self._waiters.remove(entry)
                return
