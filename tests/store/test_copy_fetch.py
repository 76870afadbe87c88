"""Reading one copy, checked block by block (app/store/copy_fetch.py), against
the simulator's file server: with Range honoured, a read deep into a chunk
downloads from the block it needs; without, it reads from the first byte and
sends the same checked bytes."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select, update

from app.db.models import Chunk
from app.db.session import session_scope
from app.store.blocks import BLOCK_SIZE, SHA256, block_hashes, hashes_root
from tests.running_service import Service, ServiceFactory, eventually, payload

SIZE = 4 * BLOCK_SIZE  # one chunk of four blocks


async def stored(service: Service) -> tuple[str, bytes]:
    data = payload(SIZE, seed=5)
    async with service.client() as http:
        response = await http.put("/api/files/four.bin", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    return response.json()["public_id"], data


def bytes_served(service: Service) -> int:
    return sum(bot.bytes_sent for bot in service.sim.stats().values())


@pytest.mark.parametrize("honour_range", [True, False])
async def test_a_read_deep_in_a_chunk_gets_the_right_bytes_and_only_the_blocks_it_needs(
    start_service: ServiceFactory, honour_range: bool
) -> None:
    service = await start_service(chunk_size=SIZE)
    public_id, data = await stored(service)
    service.sim.configure(honour_range=honour_range)
    service.sim.reset_stats()
    first, last = 3 * BLOCK_SIZE + 100, 3 * BLOCK_SIZE + 199  # in the last block

    async with service.client() as http:
        response = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={first}-{last}"})

    assert response.status_code == 206
    assert response.content == data[first : last + 1]
    if honour_range:
        # The last block alone came from Telegram: it is all that was checked.
        assert bytes_served(service) == BLOCK_SIZE
    else:
        # The server sent the file from its first byte; three blocks were
        # skipped unheld, the fourth checked.
        assert bytes_served(service) == SIZE


async def test_a_flipped_byte_outside_the_range_does_not_fail_it_but_one_inside_does(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(chunk_size=SIZE)
    public_id, data = await stored(service)
    (message_id,) = service.live_messages()
    service.sim.corrupt(service.settings.chat_ids[0], message_id, offset=BLOCK_SIZE + 5)

    async with service.client() as http:
        elsewhere = await http.get(f"/f/{public_id}", headers={"Range": "bytes=-100"})
        inside = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={BLOCK_SIZE}-"})

    assert elsewhere.status_code == 206
    assert elsewhere.content == data[-100:]
    assert inside.status_code == 502
    assert inside.json()["error"] == "object_damaged"


async def test_a_chunk_stored_before_block_hashes_is_checked_whole_and_then_given_them(
    start_service: ServiceFactory,
) -> None:
    """Chunks from before verified reads carry the SHA-256 of their bytes
    only (migration 0015): their first read checks the copy whole, and it
    records their block hashes for the next (SHA-256 ones, which every
    release reads)."""
    service = await start_service(chunk_size=SIZE)
    public_id, data = await stored(service)
    services = service.app.state.services
    hashes = block_hashes(data, SHA256)
    root = hashes_root(hashes)
    legacy = {
        "block_hashes": None,
        "block_digest": None,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    async with session_scope(services.sessionmaker) as session:
        await session.execute(update(Chunk).values(**legacy))

    async with service.client() as http:
        part = await http.get(f"/f/{public_id}", headers={"Range": "bytes=10-19"})
    assert (part.status_code, part.content) == (206, data[10:20])

    async def backfilled() -> bool:
        async with session_scope(services.sessionmaker) as session:
            return bool(await session.scalar(select(Chunk.block_hashes)) == hashes)

    await eventually(backfilled)
    async with session_scope(services.sessionmaker) as session:
        assert await session.scalar(select(Chunk.sha256)) == root

    # A legacy chunk with a flipped byte is refused, not served.
    async with session_scope(services.sessionmaker) as session:
        await session.execute(update(Chunk).values(**legacy))
    (message_id,) = service.live_messages()
    service.sim.corrupt(service.settings.chat_ids[0], message_id, offset=SIZE - 1)
    async with service.client() as http:
        refused = await http.get(f"/f/{public_id}", headers={"Range": "bytes=10-19"})
    assert refused.status_code == 502
