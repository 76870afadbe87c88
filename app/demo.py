"""`teleuploader demo`: the real service against an in-process Telegram simulator.

Anyone can try uploads and downloads without bot tokens: the demo migrates a
SQLite database in a temporary directory, creates an API key, starts the
simulator and the service, and prints curl commands to try.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from app.config import BotToken, Settings
from app.db.api_keys import ApiKeyRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import upgrade
from app.db.models import KeyScope
from app.db.session import session_scope
from app.logging import configure_logging
from app.main import create_app
from app.serving import serve_in_task
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator

DEMO_CHAT_ID = -1001000000001


async def create_api_key(
    database_url: str, name: str = "demo", *, scope: KeyScope = "admin"
) -> str:
    """The demo's key is the operator's: admin, unless a caller asks for less."""
    engine = create_engine(database_url)
    try:
        async with session_scope(create_sessionmaker(engine)) as session:
            _key, plaintext = await ApiKeyRepository(session).create(name, scope=scope)
    finally:
        await engine.dispose()
    return plaintext


def demo_directory(data_dir: str | None) -> Path:
    directory = Path(data_dir or tempfile.mkdtemp(prefix="teleuploader-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


async def run_demo(*, port: int, bots: int, directory: Path) -> None:
    configure_logging("WARNING", "console")
    database_url = f"sqlite+aiosqlite:///{directory / 'demo.db'}"
    await asyncio.to_thread(upgrade, database_url)
    key = await create_api_key(database_url)

    sim = TelegramSimulator(SimulatorConfig(tokens=make_tokens(bots), chat_ids=[DEMO_CHAT_ID]))
    async with run_simulator(sim) as telegram_url:
        settings = Settings(
            bot_tokens=[BotToken.parse(token) for token in sim.tokens],
            storage_chat_id=DEMO_CHAT_ID,
            telegram_api_base=telegram_url,
            database_url=database_url,
            port=port,
            # Small chunks, so that even a small file shows several bots at work.
            chunk_size=4 * 1024 * 1024,
            sends_per_minute=0,
        )
        async with serve_in_task(create_app(settings), port=port) as base:
            print(_banner(base, key, bots, directory), flush=True)
            await asyncio.Event().wait()


def _banner(base: str, key: str, bots: int, directory: Path) -> str:
    return f"""
TeleUploader demo: {base}  ({bots} simulated bots; database in {directory})

  Web page:  {base}/   (sign in with the API key)
  API key:   {key}

  Upload (multipart):  curl -H 'Authorization: Bearer {key}' -F file=@README.md {base}/api/upload
  Upload (raw PUT):    curl -H 'Authorization: Bearer {key}' -T README.md {base}/api/files/README.md
  List:                curl -H 'Authorization: Bearer {key}' {base}/api/files
  Download:            curl -O -J {base}/f/<public_id>
  Readiness:           curl {base}/ready
  API docs:            {base}/docs

Press Ctrl-C to stop.
"""
