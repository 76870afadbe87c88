"""A running TeleUploader (real HTTP, real database) in front of the Telegram
simulator, for tests of the HTTP surfaces (native API, S3 API, CLI).

The simulator is as strict as the service's settings allow: getFile refuses
files larger than the service's CHUNK_SIZE (every chunk is at most that), and
at teardown no bot token may ever have had two Bot API calls in flight at once
(the dispatcher's promise; Telegram answers a second concurrent upload with a
long 429).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, fields, replace
from typing import Any

import httpx
from fastapi import FastAPI

from app.cli.demo import create_api_key
from app.config.settings import BotToken, Settings
from app.config.tuning import Tuning
from app.kit.serving import serve_in_task
from app.runtime.main import create_app
from app.sealing.layout import sealed_size
from app.telegram.client import tls_context
from app.telegram.simulator import (
    BotStats,
    SimulatorConfig,
    TelegramSimulator,
    make_tokens,
    run_simulator,
)
from tests.db.helpers import Database

CHAT_ID = -1001987654321
CHUNK = 64 * 1024
INLINE = 1024


@dataclass
class Service:
    url: str
    key: str
    sim: TelegramSimulator
    settings: Settings
    app: FastAPI

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def client(self, **options: Any) -> httpx.AsyncClient:
        # The process's one TLS context: a client making its own loads the
        # CA roots again (40-60 ms), in almost every test.
        options.setdefault("verify", tls_context())
        return httpx.AsyncClient(base_url=self.url, timeout=30, **options)

    def live_messages(self) -> list[int]:
        return self.sim.live_messages(CHAT_ID)


def make_settings(
    database: Database, telegram_url: str, tokens: list[str], **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        "bot_tokens": [BotToken.parse(token) for token in tokens],
        "storage_chat_id": CHAT_ID,
        "telegram_api_base": telegram_url,
        "database_url": database.url,
        "chunk_size": CHUNK,
        "inline_threshold": INLINE,
        "max_upload_size": 4 * 1024 * 1024,
        "sends_per_minute": 0,
        "shutdown_grace_seconds": 5,
        "log_level": "WARNING",
        # Deletes are final, as the tests of everything but the trash expect
        # (that the old messages go, that a key is free): TRASH_RETENTION_SECONDS=0
        # is the behaviour they pin. tests/http/api/test_trash.py turns it on.
        "trash_retention_seconds": 0,
        # Snapshots add messages to the chats (tests count them) and a send at
        # every stop: tests/store/test_snapshots.py turns them on.
        "snapshot_interval_seconds": 0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


#: The tests' tuning: parts scaled down with the chunks (S3's 5 MiB:
#: test_conformance.py); a read asks Telegram again after 50 ms, not 500
#: (a copy taken down is asked about four times before a forward settles it).
TEST_TUNING = Tuning(s3_min_part_size=CHUNK, read_retry_seconds=0.05)
_TUNING_FIELDS = frozenset(field.name for field in fields(Tuning))


def take_tuning(overrides: dict[str, Any]) -> Tuning:
    """The Tuning fields among a test's overrides, taken out of them (they
    are constructor parameters, not settings), on top of TEST_TUNING."""
    chosen = {name: overrides.pop(name) for name in _TUNING_FIELDS & overrides.keys()}
    return replace(TEST_TUNING, **chosen)


ServiceFactory = Callable[..., Awaitable[Service]]


class ServiceLauncher:
    """Starts simulators and services; `aclose` stops all of them."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._stack = AsyncExitStack()
        self._sims: list[TelegramSimulator] = []
        self._servers: dict[str, AsyncExitStack] = {}

    async def start(
        self,
        bots: int = 3,
        *,
        wait_ready: bool = True,
        prepare: Callable[[TelegramSimulator], None] | None = None,
        sim: TelegramSimulator | None = None,
        **overrides: Any,
    ) -> Service:
        """A service on a simulator of its own (or on `sim`, another stopped
        service's: a restart); by default once `/ready` is 200 (the bots are
        checked in the background after it starts listening). `prepare(sim)`
        runs before the service starts. With `storage_chat_ids`, the
        simulator holds those chats (and STORAGE_CHAT_ID is left unset)."""
        chat_ids = overrides.get("storage_chat_ids") or [CHAT_ID]
        if "storage_chat_ids" in overrides:
            overrides.setdefault("storage_chat_id", None)
        if sim is None:
            sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(bots), chat_ids=chat_ids))
            self._sims.append(sim)
        if prepare is not None:
            prepare(sim)
        telegram_url = await self._stack.enter_async_context(run_simulator(sim))
        spool = tempfile.mkdtemp(prefix="teleuploader-spool-")
        self._stack.callback(shutil.rmtree, spool, ignore_errors=True)
        overrides.setdefault("spool_dir", spool)
        tuning = take_tuning(overrides)
        settings = make_settings(self._database, telegram_url, sim.tokens, **overrides)
        # Telegram's cap is 20 MB; every chunk of this service is at most
        # chunk_size, sealed (master keys or an S3 client's key): with its
        # frames' tags.
        sim.configure(max_getfile_bytes=sealed_size(settings.chunk_size))
        key = await create_api_key(settings.database_url, name=f"test-{secrets.token_hex(4)}")
        app = create_app(settings, tuning)
        server = await self._stack.enter_async_context(AsyncExitStack())
        url = await server.enter_async_context(serve_in_task(app))
        self._servers[url] = server
        service = Service(url=url, key=key, sim=sim, settings=settings, app=app)
        if wait_ready:
            # Awaited, not polled: most of a test's start-up was spent
            # between polls of /ready.
            await asyncio.wait_for(app.state.services.wait_ready(), 30)
            async with service.client() as http:
                assert (await http.get("/ready")).status_code == 200
        return service

    async def stop(self, service: Service) -> None:
        """Stop one service (cleanly, as SIGTERM would); its simulator stays."""
        await self._servers.pop(service.url).aclose()

    async def aclose(self) -> None:
        """Stop everything, then check the simulators' records (the services'
        shutdown calls included)."""
        await self._stack.aclose()
        for sim in self._sims:
            assert_one_call_per_lane(sim.stats())


def assert_one_call_per_lane(by_bot: Mapping[Any, BotStats | Mapping[str, Any]]) -> None:
    """No bot token ever had two upload-lane calls (uploads, forwards, pins)
    in flight at once, nor two small calls (the simulator's per-bot
    `max_concurrent_posting_calls` and `max_concurrent_small_calls`; its
    stats by bot id, or their JSON from /_sim/stats): the dispatcher's
    promise (app/telegram/worker.py)."""
    stats = {
        bot: dataclasses.asdict(s) if isinstance(s, BotStats) else s for bot, s in by_bot.items()
    }
    crowded = {
        str(bot): (
            bot_stats["max_concurrent_posting_calls"],
            bot_stats["max_concurrent_small_calls"],
        )
        for bot, bot_stats in stats.items()
        if max(bot_stats["max_concurrent_posting_calls"], bot_stats["max_concurrent_small_calls"])
        > 1
    }
    overlaps = {
        str(bot): bot_stats["overlaps"] for bot, bot_stats in stats.items() if str(bot) in crowded
    }
    assert not crowded, (
        "a bot token had two calls of one lane in flight at once (bot id: most "
        f"upload-lane calls, most small calls at once): {crowded}; what overlapped: {overlaps}"
    )


async def eventually(check: Callable[[], Awaitable[bool] | bool], within: float = 10.0) -> None:
    """Wait until `check()` (a plain or an async callable) holds (background
    work such as GC), or fail."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        held = check()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


def parse_metrics(text: str) -> dict[str, float]:
    """A /metrics page as {series with its labels: value}, ours only."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("teleuploader_"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic bytes that differ from chunk to chunk (and from seed to seed)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])
