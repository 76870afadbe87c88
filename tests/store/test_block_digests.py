"""Which block digest new chunks get (app/store/blocks.py): BLAKE3 once every
live instance reads it; SHA-256, which every release reads, until then. An
instance of an earlier release would take a BLAKE3 chunk's copies for corrupt,
so a rolling upgrade must not make any while one still runs."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select

from app.db.models import Chunk
from app.db.session import session_scope
from app.db.spool import InstanceRepository
from app.store.blocks import (
    BLAKE3,
    BLOCK_SIZE,
    SHA256,
    block_digest,
    block_hashes,
    digest_for_new_chunks,
    digest_of,
)
from tests.running_service import Service, ServiceFactory, eventually, payload

SIZE = 4 * BLOCK_SIZE  # one chunk of four blocks


def test_blake3_only_once_every_live_instance_reads_it() -> None:
    assert digest_for_new_chunks(["sha256,blake3"]) == BLAKE3
    # A row of the earlier release has the column's default.
    assert digest_for_new_chunks(["sha256,blake3", "sha256"]) == SHA256
    assert digest_for_new_chunks(["sha256,blake3", "sha256,blake3,later"]) == BLAKE3


def test_a_chunks_digest_is_named_by_its_row() -> None:
    block = payload(BLOCK_SIZE, seed=1)
    assert block_digest(block, SHA256) != block_digest(block, BLAKE3)
    assert len(block_digest(block, BLAKE3)) == len(block_digest(block, SHA256)) == 16
    assert digest_of(None) == SHA256  # every chunk stored before BLAKE3
    assert digest_of(BLAKE3) == BLAKE3
    with pytest.raises(ValueError, match="unknown to this release"):
        digest_of("later")


async def upload(service: Service, name: str, seed: int) -> tuple[str, bytes]:
    data = payload(SIZE, seed=seed)
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    return response.json()["public_id"], data


async def chunk_digest(service: Service, data: bytes) -> str | None:
    """The block digest of the chunk holding `data`, checked against its bytes."""
    async with session_scope(service.app.state.services.sessionmaker) as session:
        rows = (await session.execute(select(Chunk.block_digest, Chunk.block_hashes))).all()
    (digest,) = [kind for kind, hashes in rows if hashes == block_hashes(data, digest_of(kind))]
    return digest


async def test_a_lone_instance_stores_blake3_chunks_and_checks_every_block(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(chunk_size=SIZE)
    public_id, data = await upload(service, "one.bin", seed=3)
    assert await chunk_digest(service, data) == BLAKE3

    (message_id,) = service.live_messages()
    service.sim.corrupt(service.settings.chat_ids[0], message_id, offset=2 * BLOCK_SIZE + 7)
    async with service.client() as http:
        # The first two blocks are sent before the third is found wrong: the
        # response is cut off there, never completed with the flipped byte.
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"/f/{public_id}")
        before = await http.get(f"/f/{public_id}", headers={"Range": "bytes=0-99"})
        inside = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={2 * BLOCK_SIZE}-"})

    assert (before.status_code, before.content) == (206, data[:100])
    assert (inside.status_code, inside.json()["error"]) == (502, "object_damaged")


async def test_while_an_earlier_release_runs_new_chunks_keep_sha256(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(chunk_size=SIZE, heartbeat_seconds=0.2)
    services = service.app.state.services
    # An instance of the earlier release beside this one (another host, so
    # that its process is not looked for here): its row has what migration
    # 0022 gives one, the column's default.
    async with session_scope(services.sessionmaker) as session:
        await InstanceRepository(session).register("earlier", "elsewhere", 1, block_digests=SHA256)
    await eventually(lambda: services.writer.block_digest == SHA256)

    first_id, first = await upload(service, "first.bin", seed=4)
    assert await chunk_digest(service, first) is None  # SHA-256: the earlier release reads it

    async with session_scope(services.sessionmaker) as session:
        await InstanceRepository(session).remove("earlier")  # it was upgraded too
    await eventually(lambda: services.writer.block_digest == BLAKE3)
    second_id, second = await upload(service, "second.bin", seed=5)
    assert await chunk_digest(service, second) == BLAKE3

    async with service.client() as http:
        for public_id, data in ((first_id, first), (second_id, second)):
            response = await http.get(f"/f/{public_id}")
            assert (response.status_code, response.content) == (200, data)
