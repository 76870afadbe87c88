"""Reads of a pending object on an instance that does not hold its spool
files: they wait for the flush, bounded, then refuse with a Retry-After
(the holder's side: tests/http/s3/test_complete_at_spool.py)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.http.shared.errors import failure_for
from app.store.encryption import Encryption
from app.store.errors import ContentPending
from app.store.pending import PENDING_RETRY_AFTER, PendingReads
from app.store.reader import RangeReader
from tests.db.helpers import FLUSHED, SPOOLED, pending_object

WAIT = 0.3


def reads(sessionmaker: async_sessionmaker[AsyncSession]) -> PendingReads:
    # No spool here: every spooled part is another instance's.
    reader: RangeReader = None  # type: ignore[assignment]  # no chunk is read
    return PendingReads(sessionmaker, reader, Encryption(None), None, wait=WAIT)


async def test_bytes_in_another_instances_spool_are_refused_after_the_wait(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    object_id, _, _ = await pending_object(sessionmaker)

    started = time.monotonic()
    with pytest.raises(ContentPending) as refused:
        await reads(sessionmaker).open(object_id, "b/k", FLUSHED, FLUSHED + SPOOLED)

    assert WAIT <= time.monotonic() - started < WAIT + 2
    failure = failure_for(refused.value)
    assert failure is not None
    assert (failure.status, failure.s3_code) == (503, "SlowDown")
    assert failure.retry_after == PENDING_RETRY_AFTER
    assert "another instance" in failure.message


async def test_an_object_that_is_not_pending_is_left_to_its_pieces(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    assert await reads(sessionmaker).open(12345, "b/gone", 0, 10) is None
