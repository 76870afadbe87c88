"""Two instances sweeping at once never retire a live instance's rows.

A sweep reads which instances are alive, then retires the pending chunks and
adopts the spooled parts of the others. An instance that registers between the
read and the sweep is missing from that list: its rows must stay (they belong
to uploads it is running). A dead one's row is deleted before its rows are
swept, so its rows do go. Both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import ChunkRepository
from app.db.models import Chunk, GcEntry, SpooledPart
from app.db.multipart import MultipartRepository
from app.db.session import session_scope
from app.db.spool import InstanceRepository, SpoolRepository
from app.store.blocks import READABLE
from tests.db.helpers import document

Sessions = async_sessionmaker[AsyncSession]
LONG_AGO = datetime.now(UTC) - timedelta(hours=1)


async def _register(sessionmaker: Sessions, instance_id: str) -> None:
    async with session_scope(sessionmaker) as session:
        await InstanceRepository(session).register(instance_id, "host", 1, block_digests=READABLE)


async def test_a_sweep_spares_chunks_of_an_instance_registered_after_it_read_the_live_set(
    sessionmaker: Sessions,
) -> None:
    await _register(sessionmaker, "a")
    async with session_scope(sessionmaker) as session:
        live = await InstanceRepository(session).live_ids(30.0)
    assert live == {"a"}
    # "b" starts now and begins an upload; "gone" died and was claimed.
    await _register(sessionmaker, "b")
    async with session_scope(sessionmaker) as session:
        chunks = ChunkRepository(session)
        running = await chunks.add_pending(document(), "ab" * 32, owner="b")
        dead_document = document()
        await chunks.add_pending(dead_document, "ab" * 32, owner="gone")

    async with session_scope(sessionmaker) as session:
        collected = await ChunkRepository(session).collect_pending_orphans(LONG_AGO, live)
    async with session_scope(sessionmaker) as session:
        left = set(await session.scalars(select(Chunk.id)))
        ledgered = list(await session.scalars(select(GcEntry.message_id)))
    assert collected == 1
    assert left == {running.id}
    assert ledgered == [dead_document.message_id]


async def test_an_adoption_spares_spooled_parts_of_an_instance_registered_after_it_read(
    sessionmaker: Sessions,
) -> None:
    await _register(sessionmaker, "a")
    async with session_scope(sessionmaker) as session:
        live = await InstanceRepository(session).live_ids(30.0)
    await _register(sessionmaker, "b")
    async with session_scope(sessionmaker) as session:
        upload = await MultipartRepository(session).create(
            bucket="bucket", key="big", content_type="text/plain", user_metadata={}
        )
        spool = SpoolRepository(session)
        for number, owner in ((1, "b"), (2, "gone")):
            await spool.put(
                upload.id,
                number,
                size=5,
                etag='"x"',
                path=f"{owner}/{number}.part",
                owner=owner,
                bucket="bucket",
                key="big",
            )

    async with session_scope(sessionmaker) as session:
        adopted = await SpoolRepository(session).adopt("a", live)
    async with session_scope(sessionmaker) as session:
        owners = dict((await session.execute(select(SpooledPart.path, SpooledPart.owner))).all())
    assert adopted == [5]
    assert owners == {"b/1.part": "b", "gone/2.part": "a"}
