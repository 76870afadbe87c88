"""The service listens at once, whatever Telegram does: /health answers while
every bot's getMe is still unanswered, /ready and uploads say "not yet" (503),
and the service becomes ready as soon as a bot passes."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from structlog.testing import capture_logs

from app.db.chunks import ChunkRepository
from app.db.session import session_scope
from app.runtime.startup import StartupError, refuse_unreadable_chunks, start_services
from app.telegram.simulator import make_tokens
from tests.db.helpers import Database, document
from tests.running_service import CHUNK, ServiceFactory, eventually, make_settings, payload

MiB = 1024 * 1024

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)

BOTS = 5


async def test_the_service_answers_health_while_getme_hangs_and_is_ready_once_a_bot_passes(
    start_service: ServiceFactory,
) -> None:
    # Telegram takes every getMe and answers none of them (yet).
    async with asyncio.timeout(20):  # the old startup never got past getMe
        service = await start_service(
            bots=BOTS, wait_ready=False, prepare=lambda sim: sim.hold("getMe")
        )
        await service.sim.wait_held("getMe", BOTS)
    async with service.client() as http:
        health = await http.get("/health")
        ready = await http.get("/ready")
        upload = await http.put(
            "/api/files/early.bin", content=payload(2 * CHUNK), headers=service.auth
        )
        assert health.status_code == 200
        assert (ready.status_code, ready.json()) == (503, {"status": "not_ready"})
        assert upload.status_code == 503, upload.text
        assert upload.json()["error"] == "storage_unavailable"
        assert "getMe" in upload.json()["detail"]
        # The bots are being checked: sooner than for a pool with none left (30).
        assert 1 <= int(upload.headers["retry-after"]) <= 5

        service.sim.release("getMe")

        async def is_ready() -> bool:
            return (await http.get("/ready")).status_code == 200

        await eventually(is_ready)
        stored = await http.put(
            "/api/files/later.bin", content=payload(2 * CHUNK), headers=service.auth
        )
        assert stored.status_code == 201, stored.text


@pytest.mark.parametrize("public_base_url", [None, "https://files.example.com"])
async def test_a_start_without_public_base_url_warns_that_links_follow_the_host_header(
    start_service: ServiceFactory, public_base_url: str | None
) -> None:
    with capture_logs() as logs:
        await start_service(bots=1, public_base_url=public_base_url)
    warnings = [entry for entry in logs if entry["event"] == "public_base_url_unset"]
    if public_base_url is None:
        assert len(warnings) == 1
        assert warnings[0]["log_level"] == "warning"
        assert "PUBLIC_BASE_URL" in warnings[0]["detail"]
    else:
        assert warnings == []


async def test_a_move_to_the_cloud_with_chunks_only_a_local_server_reads_is_refused(
    database: Database, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """Chunks above the cloud's getFile cap (20 MiB: telegram-bot-api
    Client.h) were stored through a local Bot API server: pointed at
    api.telegram.org, the service would never read them back. It refuses
    to start, in one line that says how many and what to do."""
    async with session_scope(sessionmaker) as session:
        chunks = ChunkRepository(session)
        for size in (19 * MiB, 20 * MiB, 21 * MiB, 40 * MiB):
            await chunks.add_pending(document(size=size), "ab" * 32)
    tokens = make_tokens(1)
    cloud = make_settings(database, "https://api.telegram.org", tokens)
    local = make_settings(
        database, "http://127.0.0.1:8081", tokens, telegram_local_server=True, chunk_size=40 * MiB
    )

    with pytest.raises(StartupError) as caught:
        await start_services(cloud)
    await refuse_unreadable_chunks(local, sessionmaker)  # where they were stored: fine

    message = str(caught.value)
    assert message.startswith("2 stored chunks are larger than the 20 MiB")
    assert "TELEGRAM_LOCAL_SERVER=true" in message and "\n" not in message
