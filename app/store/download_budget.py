"""One budget for every download in the process: the bytes fetched from
Telegram and not yet sent, and the Telegram file downloads open at once.

Without it every download kept up to three Telegram fetches and their queued
blocks whether or not its client read, and nothing limited how many downloads
ran, so anonymous clients could pin memory and Telegram connections.

The rules:

* Bytes. A block counts from the moment its fetch queues it until the reader's
  client has taken it. All readers share `buffer_bytes`; while several run, a
  reader takes from it no more than an equal share.
* Connections. A Telegram file download holds one of `connections` slots while
  it reads.
* The piece a reader is sending now (its *current* piece) goes first: its waits
  are served before any prefetch, first come first served between readers.
* A current piece that holds a slot may always have one block outstanding,
  even when `buffer_bytes` is spent. Without that, a reader whose share is held
  by its own prefetched pieces, or by stalled readers, could wait for bytes
  that only its own client can free: a deadlock. That block belongs to the
  slot, which returns only once the block has been sent, so at most
  `buffer_bytes + connections x block_size` bytes are ever held.
* Prefetch takes only what is spare: its reader stays within its share, one
  block of the buffer and one slot stay free for somebody's current piece, and
  current pieces are served first. Waiting claims are served round-robin
  between readers, so one big download cannot take every turn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass
from enum import Enum


class ReaderClosed(Exception):
    """The reader's share was given back while one of its pieces waited."""


class _Need(Enum):
    SLOT = "slot"
    BYTES = "bytes"


class _Source(Enum):
    SHARED = "shared"
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """What the budget holds right now, for /metrics."""

    buffer_bytes: int
    bytes_in_use: int
    connections: int
    connections_in_use: int
    readers: int
    waiting_readers: int


class DownloadBudget:
    def __init__(self, *, buffer_bytes: int, connections: int, block_size: int) -> None:
        if buffer_bytes <= 0 or connections <= 0 or block_size <= 0:
            raise ValueError("the download budget needs positive bytes, connections and block")
        self.buffer_bytes = buffer_bytes
        self.connections = connections
        self.block_size = block_size
        self._shared_used = 0
        self._reserved_used = 0
        self._slots_used = 0
        self._readers: dict[ReaderShare, None] = {}
        # One line per (need, current piece?): readers in rotation order, each
        # with its waiting claims in order. The head reader is served next.
        self._lines: dict[tuple[_Need, bool], _Line] = {
            (need, current): _Line() for need in _Need for current in (True, False)
        }

    def open_reader(self) -> ReaderShare:
        reader = ReaderShare(self)
        self._readers[reader] = None
        return reader

    def status(self) -> BudgetStatus:
        # A current piece waiting for bytes always has blocks out to its client
        # (else it would get its reserved one): only a slot keeps a client idle.
        waiting = {waiter.claim.reader for waiter in self._lines[(_Need.SLOT, True)].all()}
        return BudgetStatus(
            buffer_bytes=self.buffer_bytes,
            bytes_in_use=self._shared_used + self._reserved_used,
            connections=self.connections,
            connections_in_use=self._slots_used,
            readers=len(self._readers),
            waiting_readers=len(waiting),
        )

    # --- deciding -----------------------------------------------------------------

    def _share(self) -> int:
        return self.buffer_bytes // max(1, len(self._readers))

    def _free_slots(self) -> int:
        return self.connections - self._slots_used

    def _slot_ok(self, claim: Claim) -> bool:
        if claim.current:
            return self._free_slots() >= 1
        fair = max(1, self.connections // max(1, len(self._readers)))
        return self._free_slots() >= 2 and claim.reader.slots < fair

    def _bytes_source(self, claim: Claim, size: int, *, reserved_only: bool) -> _Source | None:
        """Where `size` bytes for this claim can come from now, if anywhere."""
        headroom = 0 if claim.current else self.block_size
        if (
            not reserved_only
            and self._shared_used + size + headroom <= self.buffer_bytes
            and claim.reader.shared + size <= self._share()
        ):
            return _Source.SHARED
        if claim.current and claim.holds_slot and claim.reserved == 0 and size <= self.block_size:
            return _Source.RESERVED
        return None

    def _try_grant(self, waiter: _Waiter, *, reserved_only: bool = False) -> bool:
        if waiter.future.cancelled():
            return False  # its task was cancelled and has yet to leave the line
        claim = waiter.claim
        if waiter.need is _Need.SLOT:
            if reserved_only or not self._slot_ok(claim):
                return False
            claim.holds_slot = True
            claim.reader.slots += 1
            self._slots_used += 1
        else:
            source = self._bytes_source(claim, waiter.size, reserved_only=reserved_only)
            if source is None:
                return False
            if source is _Source.RESERVED:
                claim.reserved += waiter.size
                self._reserved_used += waiter.size
            else:
                claim.shared += waiter.size
                claim.reader.shared += waiter.size
                self._shared_used += waiter.size
        if not waiter.future.done():
            waiter.future.set_result(None)
        if claim.waiter is waiter:
            # Granted: nothing of the claim waits any more, even before its
            # task has woken up to see it.
            claim.waiter = None
        return True

    def _return_slot(self, claim: Claim) -> None:
        claim.holds_slot = False
        claim.reader.slots -= 1
        self._slots_used -= 1

    def _return_bytes(self, claim: Claim, size: int) -> None:
        # The reserved block first, so that its slot is free as soon as
        # possible; the totals are the same whichever block physically left.
        from_reserved = min(size, claim.reserved)
        claim.reserved -= from_reserved
        self._reserved_used -= from_reserved
        from_shared = min(size - from_reserved, claim.shared)
        claim.shared -= from_shared
        claim.reader.shared -= from_shared
        self._shared_used -= from_shared

    def _serve_waiters(self) -> None:
        """Grant what can be granted: current pieces first, then prefetch,
        round-robin between readers within each."""
        if self._free_slots() >= 1:
            self._serve(self._lines[(_Need.SLOT, True)])
        if self._free_slots() >= 2:
            self._serve(self._lines[(_Need.SLOT, False)])
        if self._shared_used < self.buffer_bytes:
            self._serve(self._lines[(_Need.BYTES, True)])
        if self._shared_used + self.block_size < self.buffer_bytes:
            self._serve(self._lines[(_Need.BYTES, False)])

    def _serve(self, line: _Line) -> None:
        changed = True
        while changed:
            changed = False
            for waiter in line.heads():
                if waiter.future.cancelled() or self._try_grant(waiter):
                    line.remove(waiter)
                    changed = True
                    break

    def _serve_claim(self, claim: Claim) -> None:
        """The claim's own reserved block came back: its wait may end now."""
        waiter = claim.waiter
        if (
            waiter is not None
            and waiter.need is _Need.BYTES
            and self._try_grant(waiter, reserved_only=True)
        ):
            self._line(waiter).remove(waiter)

    def _line(self, waiter: _Waiter) -> _Line:
        return self._lines[(waiter.need, waiter.claim.current)]

    def _close_reader(self, reader: ReaderShare) -> None:
        self._readers.pop(reader, None)
        self._serve_waiters()


@dataclass(eq=False, slots=True)
class _Waiter:
    claim: Claim
    need: _Need
    size: int
    future: asyncio.Future[None]


class _Line:
    """Waiting claims, grouped by reader in rotation order."""

    def __init__(self) -> None:
        self._readers: OrderedDict[ReaderShare, deque[_Waiter]] = OrderedDict()

    def add(self, waiter: _Waiter) -> None:
        self._readers.setdefault(waiter.claim.reader, deque()).append(waiter)

    def remove(self, waiter: _Waiter) -> None:
        reader = waiter.claim.reader
        queue = self._readers.get(reader)
        if queue is None or waiter not in queue:
            return
        was_head = queue[0] is waiter
        queue.remove(waiter)
        if not queue:
            del self._readers[reader]
        elif was_head:
            # Its turn is used: the reader's next claim waits behind the others.
            self._readers.move_to_end(reader)

    def heads(self) -> list[_Waiter]:
        return [queue[0] for queue in self._readers.values()]

    def all(self) -> list[_Waiter]:
        return [waiter for queue in self._readers.values() for waiter in queue]

    def empty(self) -> bool:
        return not self._readers


class ReaderShare:
    """One download's part of the budget: the claims of its pieces."""

    def __init__(self, budget: DownloadBudget) -> None:
        self._budget = budget
        self._claims: list[Claim] = []
        self.closed = False
        self.shared = 0
        self.slots = 0

    def window(self) -> int:
        """The bytes this reader may have fetched ahead of its client now: an
        equal share of the buffer, which shrinks as readers come."""
        return self._budget._share()

    def fair_connections(self) -> int:
        """The connections this reader's read-ahead may count on now: an equal
        share of them, as for bytes."""
        budget = self._budget
        return max(1, budget.connections // max(1, len(budget._readers)))

    def claim(self, *, current: bool) -> Claim:
        claim = Claim(self._budget, self, current=current)
        if self.closed:
            claim.release()
        self._claims.append(claim)
        return claim

    def close(self) -> None:
        """Give back everything its pieces hold; their waits fail with ReaderClosed."""
        if self.closed:
            return
        self.closed = True
        for claim in self._claims:
            claim.release()
        self._claims.clear()  # claims point back here: no cycle for the GC to find
        self._budget._close_reader(self)


class Claim:
    """What one piece's fetch holds: a connection slot and queued bytes."""

    def __init__(self, budget: DownloadBudget, reader: ReaderShare, *, current: bool) -> None:
        self._budget = budget
        self.reader = reader
        self.current = current
        self.holds_slot = False
        self.reading = False
        self.shared = 0
        self.reserved = 0
        self.waiter: _Waiter | None = None
        self.released = False

    async def connect(self) -> None:
        """Wait for a connection slot (a slot still held is kept)."""
        if not self.holds_slot:
            await self._acquire(_Need.SLOT, 0)
        self.reading = True

    def disconnect(self) -> None:
        """The fetch closed its connection: the slot returns once the
        reserved block, if one is out, has been sent."""
        self.reading = False
        self._settle()

    async def take(self, size: int) -> None:
        """Wait until `size` more bytes (at most one block) may be queued."""
        await self._acquire(_Need.BYTES, size)

    def give(self, size: int) -> None:
        """The client has taken `size` bytes of this piece."""
        if self.released:
            return
        self._budget._return_bytes(self, size)
        self._budget._serve_claim(self)
        self._settle()

    def make_current(self) -> None:
        """The reader has reached this piece: its waits go ahead of prefetch."""
        if self.current or self.released:
            return
        waiter = self.waiter
        if waiter is not None:
            self._budget._line(waiter).remove(waiter)
        self.current = True
        if waiter is not None:
            self._budget._line(waiter).add(waiter)
        self._budget._serve_waiters()

    def release(self) -> None:
        """Give back everything; a pending wait fails with ReaderClosed."""
        if self.released:
            return
        self.released = True
        budget = self._budget
        waiter = self.waiter
        if waiter is not None:
            budget._line(waiter).remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(ReaderClosed("the download was dropped"))
        budget._return_bytes(self, self.shared + self.reserved)
        if self.holds_slot:
            budget._return_slot(self)
        self.reading = False
        budget._serve_waiters()

    async def _acquire(self, need: _Need, size: int) -> None:
        if self.released:
            raise ReaderClosed("the download was dropped")
        budget = self._budget
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(self, need, size, future)
        if self._grant_now(waiter):
            return
        self.waiter = waiter
        budget._line(waiter).add(waiter)
        # Those ahead may be waiting for what only they lack (their share).
        budget._serve_waiters()
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled() and future.exception() is None:
                # Granted just as this fetch was cancelled: what it was given
                # goes back (release() has done it if the claim is released).
                if not self.released:
                    if need is _Need.SLOT:
                        budget._return_slot(self)
                    else:
                        budget._return_bytes(self, size)
                    budget._serve_waiters()
            else:
                budget._line(waiter).remove(waiter)
                budget._serve_waiters()  # it may have stood in others' way
            raise
        finally:
            if self.waiter is waiter:
                self.waiter = None

    def _grant_now(self, waiter: _Waiter) -> bool:
        # Served at once when nobody of its kind waits ahead; a current piece's
        # reserved block never waits behind anybody.
        budget = self._budget
        if budget._line(waiter).empty() and budget._try_grant(waiter):
            return True
        return budget._try_grant(waiter, reserved_only=True)

    def _settle(self) -> None:
        if self.holds_slot and not self.reading and self.reserved == 0:
            self._budget._return_slot(self)
        self._budget._serve_waiters()
