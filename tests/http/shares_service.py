"""One service for a whole test module of share links (tests/http/api/test_shares.py,
tests/http/web/test_share_page.py, tests/cli/test_shares.py): starting one per
test would cost most of their time. Each test makes its own files and shares,
so tests do not see each other's counts.

The service runs on SQLite (what it answers does not depend on the database;
tests/db/test_shares.py runs the counting SQL on both backends), with the
trash on (a trashed file's share stops, a restored one's comes back) and the
S3 API on (an S3 object is shared only by an admin key).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import delete, update

from app.cli.demo import create_api_key
from app.db.models import KeyScope, Share, ShareFailure
from app.db.session import session_scope
from app.db.types import utcnow
from tests.db.helpers import Database
from tests.http.s3.test_api_boto3 import ACCESS_KEY, SECRET
from tests.running_service import Service, ServiceLauncher


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shares_service(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Service]:
    path = tmp_path_factory.mktemp("shares") / "test.db"
    shutil.copyfile(sqlite_template, path)
    url = f"sqlite+aiosqlite:///{path}"
    launcher = ServiceLauncher(Database(backend="sqlite", url=url, migration_url=url))
    try:
        yield await launcher.start(
            trash_retention_seconds=3600,
            s3_credentials={ACCESS_KEY: SECRET},
            max_upload_size=64 * 1024 * 1024,
        )
    finally:
        await launcher.aclose()


async def new_key(service: Service, scope: KeyScope) -> dict[str, str]:
    """The Authorization header of a new key of `scope`."""
    name = f"{scope}-{secrets.token_hex(4)}"
    key = await create_api_key(service.settings.database_url, name=name, scope=scope)
    return {"Authorization": f"Bearer {key}"}


async def put(service: Service, name: str, data: bytes, **headers: str) -> dict[str, Any]:
    async with service.client() as http:
        answer = await http.put(
            f"/api/files/{name}", content=data, headers={**service.auth, **headers}
        )
    assert answer.status_code == 201, answer.text
    found: dict[str, Any] = answer.json()
    return found


async def share(
    service: Service, auth: dict[str, str] | None = None, **body: Any
) -> dict[str, Any]:
    async with service.client() as http:
        answer = await http.post("/api/shares", json=body, headers=auth or service.auth)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


async def share_of(service: Service, share_id: int) -> dict[str, Any]:
    async with service.client() as http:
        answer = await http.get(f"/api/shares/{share_id}", headers=service.auth)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def token_of(made: dict[str, Any]) -> str:
    return str(made["url"]).rsplit("/s/", 1)[1]


async def expire(service: Service, share_id: int) -> None:
    """As if its expiry had passed (no test waits for time to pass)."""
    services = service.app.state.services
    async with session_scope(services.sessionmaker) as session:
        await session.execute(
            update(Share)
            .where(Share.id == share_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )


async def forget_wrong_passwords(service: Service) -> None:
    """Every client of these tests is 127.0.0.1: one test's wrong passwords
    would limit the next one's (the limit per address)."""
    services = service.app.state.services
    async with session_scope(services.sessionmaker) as session:
        await session.execute(delete(ShareFailure))


def client(service: Service, agent: str = "tests", **options: Any) -> httpx.AsyncClient:
    """A recipient without a key: one User-Agent is one downloader."""
    return service.client(headers={"User-Agent": agent}, **options)
