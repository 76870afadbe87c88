"""`teleuploader demo`: the real service against a Telegram simulator in the
same process, so anyone can try uploads and downloads without bot tokens.

The demo migrates an SQLite database, makes an API key and an S3 access key,
starts the simulator and the service, writes a sample file big enough to be
cut into chunks for the bots, and prints commands to try. Everything lives in
one directory: a temporary one, removed when the demo stops (Ctrl-C or
SIGTERM), or `--data-dir`, kept, where the simulator keeps its messages and
files too, so that a second start serves the files of the first with the same
keys.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.config.settings import BotToken, Settings
from app.db.api_keys import ApiKeyNameTaken, ApiKeyRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import upgrade
from app.db.models import KeyScope
from app.db.session import session_scope
from app.kit.logging import configure_logging
from app.kit.serving import serve_in_task
from app.runtime.main import create_app
from app.telegram.simulator import SimulatorConfig, make_tokens, run_simulator
from app.telegram.simulator.persistent import PersistentSimulator

DEMO_CHAT_ID = -1001000000001
# Small chunks, so that even the sample shows several bots at work.
DEMO_CHUNK_SIZE = 4 * 1024 * 1024
SAMPLE_SIZE = 12 * 1024 * 1024
S3_ACCESS_KEY = "demo"


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


@contextmanager
def demo_directory(data_dir: str | None) -> Iterator[Path]:
    """`data_dir` (kept), or a temporary directory removed at the end."""
    if data_dir is not None:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
        return
    directory = Path(tempfile.mkdtemp(prefix="teleuploader-demo-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class Credentials:
    api_key: str
    s3_secret: str


async def _credentials(directory: Path, database_url: str) -> Credentials:
    """The keys of an earlier run in this directory, if they still work; new
    ones otherwise. Kept in the directory (mode 600), which is the demo's."""
    path = directory / "demo-credentials.json"
    saved: dict[str, str] = {}
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
    api_key = saved.get("api_key")
    if api_key is None or not await _key_works(database_url, api_key):
        api_key = await _new_key(database_url)
    credentials = Credentials(api_key, saved.get("s3_secret") or secrets.token_urlsafe(24))
    path.touch(mode=0o600)
    path.write_text(json.dumps(credentials.__dict__), encoding="utf-8")
    return credentials


async def _key_works(database_url: str, plaintext: str) -> bool:
    engine = create_engine(database_url)
    try:
        async with session_scope(create_sessionmaker(engine)) as session:
            return await ApiKeyRepository(session).verify(plaintext) is not None
    finally:
        await engine.dispose()


async def _new_key(database_url: str) -> str:
    # A kept database may hold the name already (its key file was removed).
    for number in range(1, 1000):
        try:
            return await create_api_key(database_url, "demo" if number == 1 else f"demo-{number}")
        except ApiKeyNameTaken:
            continue
    raise RuntimeError("no free name for the demo's API key")


def _sample(directory: Path) -> Path:
    path = directory / "sample.bin"
    if not path.is_file() or path.stat().st_size != SAMPLE_SIZE:
        with path.open("wb") as out:
            for _ in range(SAMPLE_SIZE // (1024 * 1024)):
                out.write(os.urandom(1024 * 1024))
    return path


async def run_demo(*, port: int, bots: int, directory: Path, kept: bool) -> None:
    """Serve until SIGTERM, or cancelled (Ctrl-C). `kept`: the directory
    outlives the demo."""
    # Handled here, not through SIGINT: a demo started in the background by a
    # shell ignores SIGINT, and must still stop (and clean up) on SIGTERM.
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    configure_logging("WARNING", "console")
    database_url = f"sqlite+aiosqlite:///{directory / 'demo.db'}"
    await asyncio.to_thread(upgrade, database_url)
    credentials = await _credentials(directory, database_url)
    sample = await asyncio.to_thread(_sample, directory)

    sim = PersistentSimulator(
        SimulatorConfig(tokens=make_tokens(bots), chat_ids=[DEMO_CHAT_ID]),
        directory / "telegram",
    )
    try:
        async with run_simulator(sim) as telegram_url:
            settings = Settings(
                bot_tokens=[BotToken.parse(token) for token in sim.tokens],
                storage_chat_id=DEMO_CHAT_ID,
                telegram_api_base=telegram_url,
                database_url=database_url,
                spool_dir=str(directory / "spool"),
                port=port,
                chunk_size=DEMO_CHUNK_SIZE,
                sends_per_minute=0,
                s3_credentials={S3_ACCESS_KEY: credentials.s3_secret},
            )
            async with serve_in_task(create_app(settings), port=port) as base:
                print(_banner(base, credentials, bots, directory, sample, kept), flush=True)
                await stop.wait()
    finally:
        sim.close()


def _banner(
    base: str, credentials: Credentials, bots: int, directory: Path, sample: Path, kept: bool
) -> str:
    key = credentials.api_key
    ending = (
        f"everything stays in {directory} for the next start"
        if kept
        else "the temporary directory goes with it; --data-dir DIR keeps it"
    )
    auth = f"-H 'Authorization: Bearer {key}'"
    mib = SAMPLE_SIZE // (1024 * 1024)
    return f"""
TeleUploader demo: {base}  ({bots} simulated bots; everything in {directory})

  Web page:  {base}/   (sign in with the API key)
  API docs:  {base}/docs
  API key:   {key}

  Upload (multipart):  curl {auth} -F file=@{sample} {base}/api/upload
  Upload (raw PUT):    curl {auth} -T {sample} {base}/api/files/sample.bin
  List:                curl {auth} {base}/api/files
  Download:            curl -O -J {base}/f/<public_id>
  Readiness:           curl {base}/ready
  With the CLI:        export TELEUPLOADER_URL={base} TELEUPLOADER_KEY={key}
                       teleuploader upload {sample}

  ({sample.name} is {mib} MiB of random bytes: cut into {DEMO_CHUNK_SIZE // (1024 * 1024)} MiB \
chunks, it goes to several bots at once.)

  S3 API (on in the demo; in the service, S3_CREDENTIALS=ACCESS_KEY:SECRET turns it on):
    export AWS_ACCESS_KEY_ID={S3_ACCESS_KEY} AWS_SECRET_ACCESS_KEY={credentials.s3_secret} \
AWS_DEFAULT_REGION=us-east-1
    aws --endpoint-url {base} s3 mb s3://demo
    aws --endpoint-url {base} s3 cp {sample} s3://demo/

Press Ctrl-C to stop ({ending}).
"""
