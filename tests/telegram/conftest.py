"""Fixtures for tests that talk to the Telegram simulator over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.simulator import (
    SimulatorConfig,
    TelegramSimulator,
    make_tokens,
    run_simulator,
)

CHAT_ID = -1001234567890


@pytest.fixture
def sim() -> TelegramSimulator:
    """Three bots, one storage chat, no faults. Tests change knobs with `sim.configure`."""
    return TelegramSimulator(SimulatorConfig(tokens=make_tokens(3), chat_ids=[CHAT_ID]))


@pytest.fixture
async def sim_url(sim: TelegramSimulator) -> AsyncIterator[str]:
    async with run_simulator(sim) as url:
        yield url


@pytest.fixture
async def bots(sim: TelegramSimulator, sim_url: str) -> AsyncIterator[list[BotClient]]:
    """One project BotClient per simulated bot, closed before the server stops."""
    clients = [BotClient(BotToken.parse(token), api_base=sim_url) for token in sim.tokens]
    try:
        yield clients
    finally:
        for client in clients:
            await client.aclose()


@pytest.fixture
async def http(sim_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A raw HTTP client for what BotClient hides (status codes, exact bodies)."""
    async with httpx.AsyncClient(base_url=sim_url) as client:
        yield client
