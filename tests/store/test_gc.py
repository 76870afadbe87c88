"""The garbage collector's promises, through the real service and the Telegram
simulator (docs/architecture.md, "Nothing is left behind", and app/store/gc.py):

- a message whose deletion failed is tried again later, after a backoff that
  doubles (5 s, 10 s, ... at most 10 minutes);
- messages are deleted promptly, while bots may still delete them (48 hours);
  one Telegram no longer lets anybody delete is given up at once, not retried;
- if the uploading bot is gone, another bot of the pool deletes its messages;
- a message that could not even be written to the ledger because the
  database was down is kept in memory and deleted once the database is back.

The ledger (`gc_ledger`) is read from the service's own database. Where a
test must wait out a backoff it makes the entries due instead ("time passes").
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.gc import GcRepository
from app.db.models import Chunk, ChunkCopy, GcEntry, LeftMessage
from app.db.session import session_scope
from app.db.types import utcnow
from app.store.gc import GarbageCollector
from app.store.metrics import Metrics
from tests.http.api.test_database_outage import PrivatePgbouncer, outage_service, pgbouncer
from tests.running_service import (
    CHAT_ID,
    CHUNK,
    Service,
    ServiceFactory,
    eventually,
    parse_metrics,
    payload,
)

Sessions = async_sessionmaker[AsyncSession]
HOUR = 3600.0

# Fixtures of the database outage tests, used by the last two tests here.
__all__ = ["outage_service", "pgbouncer"]


async def put(service: Service, name: str, data: bytes) -> str:
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    return str(response.json()["public_id"])


async def delete(service: Service, public_id: str) -> None:
    async with service.client() as http:
        response = await http.delete(f"/api/files/{public_id}", headers=service.auth)
    assert response.status_code == 204, response.text


async def ledger(sessionmaker: Sessions) -> list[tuple[int, datetime, str | None]]:
    """(attempts, next_attempt_at, last_error) of every ledger entry."""
    async with session_scope(sessionmaker) as session:
        entries = await session.scalars(select(GcEntry).order_by(GcEntry.id))
        return [(e.attempts, e.next_attempt_at, e.last_error) for e in entries]


async def time_passes(sessionmaker: Sessions) -> None:
    """Every ledger entry is due now, as if its backoff had run out."""
    async with session_scope(sessionmaker) as session:
        await session.execute(update(GcEntry).values(next_attempt_at=utcnow()))


def deletes(service: Service) -> Counter[int]:
    """deleteMessage calls per bot."""
    return +Counter(
        {bot_id: s.calls.get("deleteMessage", 0) for bot_id, s in service.sim.stats().items()}
    )


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_failed_deletion_is_retried_after_a_doubling_backoff(
    start_service: ServiceFactory, sessionmaker: Sessions
) -> None:
    # One attempt per call, so that each GC round is one deleteMessage.
    service = await start_service(max_attempts=1)
    public_id = await put(service, "a.bin", payload(CHUNK))
    service.sim.set_faults(fault_5xx_rate=1.0)  # Telegram fails every call now

    for attempt, backoff in [(1, 5), (2, 10)]:
        started = utcnow()
        if attempt == 1:
            await delete(service, public_id)
        else:
            await time_passes(sessionmaker)

        async def tried(attempt: int = attempt) -> bool:
            entries = await ledger(sessionmaker)
            return len(entries) == 1 and entries[0][0] == attempt

        await eventually(tried)
        seen = utcnow()
        ((_, next_attempt_at, error),) = await ledger(sessionmaker)
        # Scheduled `backoff` seconds after the failed round, which ran in between.
        assert started + timedelta(seconds=backoff) <= next_attempt_at
        assert next_attempt_at <= seen + timedelta(seconds=backoff)
        assert error
        assert sum(deletes(service).values()) == attempt
        assert len(service.live_messages()) == 1

    service.sim.set_faults(fault_5xx_rate=0.0)
    await time_passes(sessionmaker)

    async def deleted() -> bool:
        return service.live_messages() == [] and await ledger(sessionmaker) == []

    await eventually(deleted)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_messages_are_deleted_while_young_and_given_up_once_too_old(
    service: Service, sessionmaker: Sessions
) -> None:
    young = await put(service, "young.bin", payload(2 * CHUNK, seed=1))
    service.sim.advance_clock(47 * HOUR)  # still inside Telegram's 48 hours
    await delete(service, young)

    async def young_gone() -> bool:
        return service.live_messages() == []

    await eventually(young_gone)

    old = await put(service, "old.bin", payload(2 * CHUNK, seed=2))
    old_messages = service.live_messages()
    service.sim.reset_stats()
    service.sim.advance_clock(49 * HOUR)  # too old: nobody may delete them now
    await delete(service, old)

    async def settled() -> bool:
        return await ledger(sessionmaker) == []

    await eventually(settled)
    # One try each, then dropped from the ledger: retrying cannot help.
    assert sum(deletes(service).values()) == len(old_messages)
    assert service.live_messages() == old_messages


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_another_bot_deletes_when_the_uploader_is_gone(
    service: Service, sessionmaker: Sessions
) -> None:
    data = payload(3 * CHUNK, seed=3)
    public_id = await put(service, "a.bin", data)
    posted_by = {m: service.sim.message_sender(CHAT_ID, m) for m in service.live_messages()}
    assert len(set(posted_by.values())) == 3
    gone = posted_by[min(posted_by)]
    service.sim.revoke(gone)  # the service learns it only from Telegram's answer
    service.sim.reset_stats()

    await delete(service, public_id)

    async def uploader_failed() -> bool:  # the others' messages are gone already
        entries = await ledger(sessionmaker)
        return [attempts for attempts, _, _ in entries] == [1] and len(service.live_messages()) == 1

    await eventually(uploader_failed)
    # The retry, after the backoff, goes through another bot.
    await time_passes(sessionmaker)

    async def all_deleted() -> bool:
        return service.live_messages() == [] and await ledger(sessionmaker) == []

    await eventually(all_deleted)
    calls = deletes(service)
    assert calls[gone] == 1
    assert sum(calls.values()) == 1 + len(posted_by)
    assert service.sim.stats()[gone].errors == {401: 1}


async def pending_chunks(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        query = select(func.count()).select_from(Chunk).where(Chunk.state == "pending")
        return int(await connection.scalar(query) or 0)


@pytest.mark.postgres
@pytest.mark.parametrize("database", ["postgres"], indirect=True)
async def test_a_message_stored_while_the_database_is_down_is_deleted_once_it_is_back(
    engine: AsyncEngine,  # first: empties the shared test database's tables
    outage_service: Service,
    pgbouncer: PrivatePgbouncer,
) -> None:
    service = outage_service
    service.sim.hold("sendDocument")
    async with service.client() as http:
        upload = asyncio.create_task(
            http.put("/api/files/a.bin", content=payload(CHUNK), headers=service.auth)
        )
        async with asyncio.timeout(10):
            await service.sim.wait_held("sendDocument")
        pgbouncer.run("stop")
        # Telegram stores the chunk now, but the service cannot record it.
        service.sim.release("sendDocument")
        response = await upload
    assert response.status_code == 503, response.text
    assert len(service.live_messages()) == 1

    pgbouncer.run("start")

    async def deleted() -> bool:
        return service.live_messages() == []

    await eventually(deleted, within=20)


@pytest.mark.postgres
@pytest.mark.parametrize("database", ["postgres"], indirect=True)
async def test_chunks_of_an_upload_failing_while_the_database_is_down_are_deleted_once_it_is_back(
    engine: AsyncEngine,  # first: empties the shared test database's tables
    outage_service: Service,
    pgbouncer: PrivatePgbouncer,
) -> None:
    service = outage_service
    second_chunk = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield payload(CHUNK, seed=1)
        await second_chunk.wait()
        yield payload(CHUNK, seed=2)

    async with service.client() as http:
        upload = asyncio.create_task(
            http.put("/api/files/a.bin", content=body(), headers=service.auth)
        )

        async def first_recorded() -> bool:
            return len(service.live_messages()) == 1 and await pending_chunks(engine) == 1

        await eventually(first_recorded)
        service.sim.hold("sendDocument")
        second_chunk.set()
        async with asyncio.timeout(10):
            await service.sim.wait_held("sendDocument")
        pgbouncer.run("stop")
        service.sim.release("sendDocument")
        response = await upload
    assert response.status_code == 503, response.text
    assert len(service.live_messages()) == 2

    pgbouncer.run("start")

    # The second chunk went to the ledger the in-memory way; the first one's
    # release was refused by the database and is retried once it is back.
    async def both_deleted() -> bool:
        return service.live_messages() == []

    await eventually(both_deleted, within=20)
    assert await pending_chunks(engine) == 0


class NoBots:
    """A dispatcher with no usable bot: every deletion fails for now."""

    def usable_bots(self, chat_id: int | None = None) -> list[int]:
        return self.serving_bots(chat_id)

    def serving_bots(self, chat_id: int | None = None) -> list[int]:
        return []


async def test_deletions_are_retried_until_48_hours_after_the_posting(
    sessionmaker: Sessions,
) -> None:
    gc = GarbageCollector(NoBots(), sessionmaker)  # type: ignore[arg-type]
    metrics = Metrics()
    gc.on_undeletable = metrics.gc_undeletable.inc
    now = utcnow()
    async with session_scope(sessionmaker) as session:
        repo = GcRepository(session)
        # Both ledgered an hour ago (a trash expiring); posted 47 and 49 hours ago.
        for message_id, age in [(1, timedelta(hours=47)), (2, timedelta(hours=49))]:
            await repo.add(
                bot_id=7,
                chat_id=CHAT_ID,
                message_id=message_id,
                file_unique_id=f"u{message_id}",
                reason="deleted",
                posted_at=now - age,
                now=now - timedelta(hours=1),
            )
        # Both have failed many times already (an outage of hours).
        await session.execute(update(GcEntry).values(attempts=40))

    await gc.run_once()

    async with session_scope(sessionmaker) as session:
        ledgered = {e.message_id: e.attempts for e in await session.scalars(select(GcEntry))}
        left = [(m.message_id, m.why) for m in await session.scalars(select(LeftMessage))]
    # The young one stays, to be tried again; the old one can never be deleted.
    assert ledgered == {1: 41}
    assert left == [(2, "past_window")]
    assert gc.undeletable == 1
    assert "teleuploader_gc_undeletable_total 1.0" in metrics.render().decode()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_message_posted_over_48_hours_before_its_deletion_gets_no_call_and_stays_counted(
    service: Service, sessionmaker: Sessions
) -> None:
    public_id = await put(service, "old.bin", payload(2 * CHUNK, seed=5))
    messages = service.live_messages()
    # 49 hours pass, for Telegram and for the service.
    service.sim.advance_clock(49 * HOUR)
    async with session_scope(sessionmaker) as session:
        await session.execute(update(ChunkCopy).values(created_at=utcnow() - timedelta(hours=49)))
    service.sim.reset_stats()

    await delete(service, public_id)

    async def settled() -> bool:
        return await ledger(sessionmaker) == []

    await eventually(settled)
    assert sum(deletes(service).values()) == 0  # no call Telegram must refuse
    assert service.live_messages() == messages  # they stay, for good
    async with session_scope(sessionmaker) as session:
        left = [(m.message_id, m.why) for m in await session.scalars(select(LeftMessage))]
    assert sorted(left) == [(message, "past_window") for message in messages]

    async def counted() -> bool:
        async with service.client() as http:
            scraped = parse_metrics((await http.get("/metrics", headers=service.auth)).text)
        return scraped.get("teleuploader_messages_left_in_channel") == len(messages)

    await eventually(counted)


async def test_a_message_telegram_refuses_to_delete_is_counted_in_the_metrics(
    service: Service,
) -> None:
    public_id = await put(service, "old.bin", payload(100 + CHUNK // 2))
    service.sim.advance_clock(49 * HOUR)  # past Telegram's 48 hours

    await delete(service, public_id)

    async def counted() -> bool:
        async with service.client() as http:
            scraped = await http.get("/metrics", headers=service.auth)
        return "teleuploader_gc_undeletable_total 1.0" in scraped.text

    await eventually(counted, within=20)
    assert len(service.live_messages()) == 1  # it stays: Telegram will not delete it
