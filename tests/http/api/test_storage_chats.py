"""Several storage chats end to end (STORAGE_CHAT_IDS): real HTTP, a real
database (SQLite and Postgres through pgbouncer), the Telegram simulator
holding three chats, each numbering its own messages.

- an upload's chunks spread across the chats, each chunk recording its chat,
  and the file downloads whole;
- a chunk whose uploading bot is gone is read through another bot by a
  forward into the chunk's own chat;
- deleting the file deletes every chunk's message in its own chat (GC);
- `teleuploader check` checks every bot in every chat and names the pair
  that fails.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli.main import main
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import ChunkCopy
from app.db.session import session_scope
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

CHATS = [-1001000000101, -1001000000102, -1001000000103]


async def chunks(service: Service) -> list[ChunkCopy]:
    engine = create_engine(service.settings.database_url)
    try:
        async with session_scope(create_sessionmaker(engine)) as session:
            return list(await session.scalars(select(ChunkCopy)))
    finally:
        await engine.dispose()


def live(service: Service) -> dict[int, list[int]]:
    return {chat: service.sim.live_messages(chat) for chat in CHATS}


async def test_chunks_spread_across_chats_read_back_and_are_deleted_in_their_own_chat(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(storage_chat_ids=CHATS)
    data = payload(12 * CHUNK, seed=3)
    async with service.client() as http:
        put = await http.put("/api/files/spread.bin", content=data, headers=service.auth)
        assert put.status_code == 201, put.text
        public_id = put.json()["public_id"]

        stored = await chunks(service)
        by_chat = Counter(c.chat_id for c in stored)
        assert set(by_chat) == set(CHATS)
        assert max(by_chat.values()) - min(by_chat.values()) <= 1  # evenly
        # Each chunk names a message of its own chat, and every message is one.
        for chat in CHATS:
            assert sorted(c.message_id for c in stored if c.chat_id == chat) == live(service)[chat]

        got = await http.get(f"/f/{public_id}")
        assert got.status_code == 200
        assert hashlib.sha256(got.content).digest() == hashlib.sha256(data).digest()

        # The uploader of some chunks is gone: another bot forwards each of
        # them inside the chunk's own chat and reads it from there.
        gone = stored[0].bot_id
        gone_chats = {c.chat_id for c in stored if c.bot_id == gone}
        service.sim.revoke(gone)
        before = len(service.sim.posts())
        got = await http.get(f"/f/{public_id}")
        assert got.status_code == 200
        assert got.content == data
        forwards = service.sim.posts()[before:]
        assert forwards and all(p.bot_id != gone for p in forwards)
        assert Counter(p.chat_id for p in forwards) == Counter(
            c.chat_id for c in stored if c.bot_id == gone
        )
        assert {p.chat_id for p in forwards} == gone_chats

        deleted = await http.delete(f"/api/files/{public_id}", headers=service.auth)
        assert deleted.status_code == 204

    # Chunks of the revoked bot too: any admin bot deletes in the message's chat.
    async def every_chat_empty() -> bool:
        return all(messages == [] for messages in live(service).values())

    await eventually(every_chat_empty, within=20)


async def run_cli(*args: str) -> int:
    return await asyncio.to_thread(main, list(args))


async def test_check_checks_every_bot_in_every_chat_and_names_the_failing_pair(
    start_service: ServiceFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    service = await start_service(storage_chat_ids=CHATS)
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.delenv("STORAGE_CHAT_ID", raising=False)
    monkeypatch.setenv("STORAGE_CHAT_IDS", ",".join(map(str, CHATS)))
    monkeypatch.setenv("TELEGRAM_API_BASE", service.settings.telegram_api_base)
    monkeypatch.setenv("SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("COLUMNS", "200")  # a table row per line, as on a wide terminal

    assert await run_cli("check") == 0
    healthy = capsys.readouterr().out
    assert "Failing" not in healthy
    assert all(str(chat) in healthy for chat in CHATS)

    bot = service.sim.bot_ids[1]
    service.sim.kick(bot, CHATS[2])
    assert await run_cli("check") == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"Failing: bot {bot} in chat {CHATS[2]}" in out
    assert "kicked" in out


async def test_a_bot_kicked_from_a_chat_works_in_the_others_and_ready_says_where(
    start_service: ServiceFactory,
) -> None:
    kicked = 100002  # make_tokens numbers the bots from 100001

    service = await start_service(
        storage_chat_ids=CHATS,
        metrics_access="public",
        prepare=lambda sim: sim.kick(kicked, CHATS[2]),
    )
    async with service.client() as http:

        async def all_checked() -> bool:
            bots = (await http.get("/ready")).json()["bots"]
            return not any(bot["checking"] for bot in bots)

        await eventually(all_checked)
        bots = {bot["bot_id"]: bot for bot in (await http.get("/ready")).json()["bots"]}
        assert bots[kicked]["usable"] and bots[kicked]["chats"] == CHATS[:2]
        assert all(bot["chats"] == CHATS for bot_id, bot in bots.items() if bot_id != kicked)

        data = payload(12 * CHUNK, seed=5)
        put = await http.put("/api/files/k.bin", content=data, headers=service.auth)
        assert put.status_code == 201, put.text
        got = await http.get(f"/f/{put.json()['public_id']}")
        assert got.content == data
    pairs = {(p.bot_id, p.chat_id) for p in service.sim.posts()}
    assert (kicked, CHATS[0]) in pairs or (kicked, CHATS[1]) in pairs
    assert (kicked, CHATS[2]) not in pairs
    assert {chat for _, chat in pairs} == set(CHATS)
