"""The object store's promise on replacing a key, through the real service: the
writer that commits last wins, whichever started first, and the loser's
chunks do not stay in Telegram."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

from tests.running_service import CHAT_ID, CHUNK, Service, eventually, payload


async def test_replacing_a_key_is_last_writer_wins_by_commit_not_by_start(
    service: Service,
) -> None:
    a_data = payload(3 * CHUNK, seed=1)
    b_data = payload(2 * CHUNK + 5, seed=2)
    finish_a = asyncio.Event()

    async def a_body() -> AsyncIterator[bytes]:
        yield a_data[: 2 * CHUNK]
        await finish_a.wait()
        yield a_data[2 * CHUNK :]

    async with service.client() as http:
        a_put = asyncio.create_task(
            http.put("/api/files/report.bin", content=a_body(), headers=service.auth)
        )

        async def a_has_started() -> bool:  # its first chunks are in Telegram
            return len(service.live_messages()) == 2

        await eventually(a_has_started)
        a_first_chunks = set(service.live_messages())

        b_put = await http.put("/api/files/report.bin", content=b_data, headers=service.auth)
        assert b_put.status_code == 201, b_put.text
        assert not a_put.done()
        finish_a.set()
        a_put_response = await a_put
        assert a_put_response.status_code == 201, a_put_response.text

        public_id = a_put_response.json()["public_id"]
        assert b_put.json()["public_id"] == public_id  # the same file, replaced twice
        got = await http.get(f"/f/{public_id}")
        info = (await http.get(f"/file/{public_id}/info")).json()

    assert got.content == a_data
    assert info["sha256"] == hashlib.sha256(a_data).hexdigest()
    # B's chunks were released when A replaced them; only A's stay.
    a_chunks = {
        message_id
        for message_id in service.live_messages()
        if service.sim.document_bytes(CHAT_ID, message_id) in a_data
    }
    assert a_first_chunks <= a_chunks and len(a_chunks) == 3

    async def only_a_left() -> bool:
        return set(service.live_messages()) == a_chunks

    await eventually(only_a_left)
