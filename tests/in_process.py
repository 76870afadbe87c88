"""The service in process: its ASGI app driven by httpx's ASGITransport, with the
lifespan run here (no HTTP server in between), in front of the Telegram
simulator. For tests that send what an HTTP server would refuse before the app
sees it, and for fuzzing, where a socket per request would cost too much."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from app.cli.demo import create_api_key
from app.runtime.main import create_app
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from tests.db.helpers import Database
from tests.running_service import CHAT_ID, make_settings, take_tuning


@dataclass
class InProcess:
    client: httpx.AsyncClient
    key: str
    sim: TelegramSimulator

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@asynccontextmanager
async def in_process(database: Database, **overrides: Any) -> AsyncIterator[InProcess]:
    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID]))
    spool = tempfile.mkdtemp(prefix="teleuploader-spool-")
    try:
        async with run_simulator(sim) as telegram_url:
            overrides.setdefault("spool_dir", spool)
            tuning = take_tuning(overrides)
            settings = make_settings(database, telegram_url, sim.tokens, **overrides)
            key = await create_api_key(settings.database_url, name=f"t-{secrets.token_hex(4)}")
            app = create_app(settings, tuning)
            async with app.router.lifespan_context(app) as state:

                async def with_state(scope: Scope, receive: Receive, send: Send) -> None:
                    # What an ASGI server does with the lifespan's state.
                    scope["state"] = dict(state or {})
                    await app(scope, receive, send)

                transport = httpx.ASGITransport(app=with_state, raise_app_exceptions=False)
                async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
                    yield InProcess(client=client, key=key, sim=sim)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
