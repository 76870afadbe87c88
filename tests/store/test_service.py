"""The object store's promise on replacing a key, through the real service: the
writer that commits last wins, whichever started first, and the loser's
chunks do not stay in Telegram."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.db.objects import ObjectRepository
from tests.db.test_retry import conflict
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


async def test_a_delete_that_loses_a_deadlock_runs_again_and_deletes(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Postgres makes one side of a deadlock its victim (a pending object
    settling while it is deleted locks the same rows): the delete runs again
    instead of answering 500."""
    data = payload(2 * CHUNK, seed=3)
    async with service.client() as http:
        stored = await http.put("/api/files/doomed.bin", content=data, headers=service.auth)
    public_id = stored.json()["public_id"]
    real = ObjectRepository.delete_by_public_id
    runs = 0

    async def loses_once(self: ObjectRepository, *args: Any, **kwargs: Any) -> bool:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise conflict("40P01")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(ObjectRepository, "delete_by_public_id", loses_once)
    async with service.client() as http:
        deleted = await http.delete(f"/api/files/{public_id}", headers=service.auth)
        after = await http.get(f"/f/{public_id}")

    assert deleted.status_code == 204, deleted.text
    assert after.status_code == 404
    assert runs == 2
