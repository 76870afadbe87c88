"""What the commands that open the database share: one-line errors, and a
database that cannot be used told as one line naming its setting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from app.config.settings import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

T = TypeVar("T")


class CliError(Exception):
    """A problem to report in one line."""


@contextmanager
def database_problems(setting: str, url: str) -> Iterator[None]:
    """Turn a database that cannot be used into one line naming `setting`."""
    from app.db.problems import explain, problem_before_connecting, shown_url

    early = problem_before_connecting(url)
    if early is not None:
        raise CliError(f"{setting} ({shown_url(url)}): {early}")
    try:
        yield
    except Exception as exc:
        reason = explain(exc, url)
        if reason is None:
            raise
        raise CliError(f"{setting} ({shown_url(url)}): {reason}") from None


def with_database(
    run: Callable[[Settings, async_sessionmaker[AsyncSession]], Awaitable[T]],
) -> tuple[Settings, T]:
    """Run `run` against the configured database (its schema must be current)."""
    from app.db.engine import create_engine, create_sessionmaker
    from app.db.migrations import check_schema

    settings = load_settings()

    async def go() -> T:
        engine = create_engine(settings.database_url)
        try:
            await check_schema(engine)
            return await run(settings, create_sessionmaker(engine))
        finally:
            await engine.dispose()

    with database_problems("DATABASE_URL", settings.database_url):
        return settings, asyncio.run(go())
