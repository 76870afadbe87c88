"""One running service per test module of WebDAV (its tests are many and
quick; a service each would cost more than they do): SQLite, the trash on,
with keys of every scope."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from app.cli.demo import create_api_key
from tests.db.helpers import Database
from tests.running_service import Service, ServiceLauncher

HOUR = 3600


@dataclass
class DavService:
    service: Service
    # The service's own key is `admin`; these are the narrower ones.
    read_key: str
    write_key: str
    other_write_key: str

    @property
    def url(self) -> str:
        return self.service.url

    def client(self, key: str | None = None, **options: object) -> httpx.AsyncClient:
        """A client sending `key` (the admin key by default) as Basic's password."""
        return self.service.client(auth=("anyone", key or self.service.key), **options)


@pytest.fixture(scope="module")
def dav_database(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Database:
    path = tmp_path_factory.mktemp("dav") / "dav.db"
    shutil.copyfile(sqlite_template, path)
    url = f"sqlite+aiosqlite:///{path}"
    return Database(backend="sqlite", url=url, migration_url=url)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dav_service(dav_database: Database) -> AsyncIterator[DavService]:
    launcher = ServiceLauncher(dav_database)
    try:
        service = await launcher.start(trash_retention_seconds=HOUR)
        url = service.settings.database_url
        yield DavService(
            service,
            read_key=await create_api_key(url, "dav-read", scope="read"),
            write_key=await create_api_key(url, "dav-write", scope="write"),
            other_write_key=await create_api_key(url, "dav-write-2", scope="write"),
        )
    finally:
        await launcher.aclose()
