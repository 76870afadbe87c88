"""An instance taken for dead while it was only stalled (issue 49): another
instance deleted its row, claimed its send intents and may ledger the
messages of its sends. The stalled one must not record a chunk whose sends
it began before: its next heartbeat finds the row gone, fails what was under
way (503), and registers anew.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from app.db.chunks import ChunkRepository, InstanceGone
from app.db.intents import WatermarkRepository
from app.db.models import Chunk, Instance
from app.db.session import session_scope
from app.store.errors import StoreError
from tests.db.helpers import document
from tests.store.test_reconcile import Stack, stack, store_object

# Postgres too: several instances share one database there (tests/README.md).
pytestmark = pytest.mark.both_backends

__all__ = ["stack"]  # the fixture


async def test_an_instance_taken_for_dead_fails_its_uploads_under_way_and_registers_anew(
    stack: Stack,
) -> None:
    services = stack.services
    me = services.instance.instance_id
    with stack.sim.holding("sendDocument"):
        upload = asyncio.create_task(store_object(services, "under-way"))
        async with asyncio.timeout(10):
            await stack.sim.wait_held("sendDocument")
        # Another instance takes this one for dead: its row and intents go.
        async with session_scope(services.sessionmaker) as session:
            assert await WatermarkRepository(session).claim_dead([], {me}) == 1
        await services.instance._beat()  # the next beat, now

    with pytest.raises(StoreError, match="taken for dead"):
        await upload
    async with session_scope(services.sessionmaker) as session:
        assert await session.get(Instance, me) is not None  # registered anew
        assert list(await session.scalars(select(Chunk.id))) == []
    # Uploads begun since are stored.
    await store_object(services, "after")


async def test_a_chunk_of_an_instance_without_its_row_is_not_recorded(stack: Stack) -> None:
    services = stack.services
    async with session_scope(services.sessionmaker) as session:
        with pytest.raises(InstanceGone):
            await ChunkRepository(session).add_pending(
                document(), "0" * 64, owner="claimed1", owner_registered=True
            )
