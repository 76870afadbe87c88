"""The design card's stack with none of our code: what idle_rss_bench.py
reads the service's idle memory against.

An empty FastAPI app under uvicorn (uvloop, httptools, as `serve` runs),
with one `/ready` route, settings read by pydantic-settings, a structlog
logger, and an httpx client (its TLS roots loaded, as a bot client's are)
open for the app's life. The database is SQLite through aiosqlite, as the
service's default: with `STACK_WITH_SQLALCHEMY=1` through SQLAlchemy's
asyncio extension (an engine and one statement run), else through aiosqlite
alone. Run by the bench as

    python -m uvicorn --app-dir bench stack_app:app --loop uvloop --http httptools
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import structlog
from fastapi import FastAPI
from pydantic_settings import BaseSettings, SettingsConfigDict


class StackSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STACK_")

    database: str = "stack.db"
    with_sqlalchemy: bool = False


settings = StackSettings()
log = structlog.get_logger("stack_app")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with httpx.AsyncClient():
        if settings.with_sqlalchemy:
            from sqlalchemy import text
            from sqlalchemy.ext.asyncio import create_async_engine

            engine = create_async_engine(f"sqlite+aiosqlite:///{settings.database}")
            async with engine.connect() as connection:
                await connection.execute(text("select 1"))
            yield
            await engine.dispose()
        else:
            import aiosqlite

            async with aiosqlite.connect(settings.database) as connection:
                await connection.execute("select 1")
                yield


app = FastAPI(lifespan=lifespan)


@app.get("/ready")
async def ready() -> dict[str, str]:
    return {"status": "ready"}
