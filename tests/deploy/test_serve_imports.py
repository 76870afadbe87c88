"""What a running `teleuploader serve` has imported, read from the process
itself (`PYTHONVERBOSE`: Python writes a line on stderr for every module it
loads, whenever it loads it; an import that fails writes none, unlike
`-X importtime`, which names every attempt).

Each library that the server does not use is memory every idle server holds
(bench/README.md, idle_rss_bench.py): Alembic is for `teleuploader migrate`,
rich and pygments for the client commands, awscrt for the first checksum
that needs it, cryptography for encryption at rest (with keys configured),
SQLAlchemy's Postgres dialect for a server on Postgres;
watchfiles and pydantic.v1 serve nothing the server does, and the test
tools are never for it. Their numbers are in
bench/README.md; this file keeps them out.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
from pathlib import Path

import httpx

from tests.deploy.conftest import TELEUPLOADER, ServiceStarter, base_env, sqlite_url

VERBOSE_IMPORTS = {"PYTHONVERBOSE": "1"}
# Written once a module has loaded:
#   "import 'app.runtime.main' # <...SourceFileLoader object at 0x...>".
_IMPORT_LINE = re.compile(r"^import '([^']+)' # ")

#: Modules a server never needs, and who does.
NOT_FOR_SERVE = {
    "alembic": "`teleuploader migrate`",
    "mako": "Alembic's templates (new migrations)",
    "rich": "the client commands (upload, download, check)",
    "pygments": "rich's syntax highlighting, for the client commands",
    "app.cli.client": "the client commands",
    "app.telegram.simulator": "`teleuploader telegram-sim` and the demo",
    "app.cli.demo": "`teleuploader demo`",
    "awscrt": "the first CRC64NVME or full-object multipart checksum (app/kit/checksums.py)",
    "watchfiles": "uvicorn's --reload, which serve does not offer",
    # 9 MiB of memory: loaded only with ENCRYPTION_KEYS, or to read a sealed chunk.
    "cryptography": "encryption at rest (app/sealing), with master keys configured",
    "app.sealing.frames": "encryption at rest, with master keys configured",
    "app.sealing.keys": "encryption at rest, with master keys configured",
    # About 5 MiB: loaded on first use (app/db/dialects.py); this server is on SQLite.
    "sqlalchemy.dialects.postgresql": "a server on Postgres",
    "asyncpg": "a server on Postgres",
    "pydantic.v1": "FastAPI's refusal of pydantic 1 models: there are none",
    "hypothesis": "the tests",
    "pytest": "the tests",
    "boto3": "the tests' S3 client",
    "botocore": "the tests' S3 client",
    "minio": "the tests' S3 client",
}


def imported(stderr: str) -> set[str]:
    """Every module a process loaded, from its verbose lines."""
    names = set()
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            names.add(match.group(1))
    return names


def unexpected(modules: set[str]) -> dict[str, str]:
    """The modules of NOT_FOR_SERVE (or their submodules) among `modules`."""
    return {
        name: why
        for name, why in NOT_FOR_SERVE.items()
        if any(module == name or module.startswith(name + ".") for module in modules)
    }


def test_an_idle_server_and_its_native_requests_import_no_tool_it_does_not_use(
    start_service: ServiceStarter, migrated_db: Path
) -> None:
    service = start_service(migrated_db, env=VERBOSE_IMPORTS, api_key=True)
    data = os.urandom(300_000)
    stored = httpx.put(
        f"{service.url}/api/files/imports.bin", content=data, headers=service.auth, timeout=30
    )
    assert stored.status_code == 201, stored.text
    fetched = httpx.get(f"{service.url}/f/{stored.json()['public_id']}", timeout=30)
    assert hashlib.sha256(fetched.content).digest() == hashlib.sha256(data).digest()
    service.proc.stop()
    assert service.proc.poll() == 0, service.proc.output()

    modules = imported(service.proc.stderr())
    # The reading works: the server's own modules, the S3 gateway among them
    # (on every request's path, so not loaded lazily).
    assert {"app.runtime.main", "app.http.s3.gateway", "uvicorn"} <= modules, sorted(modules)[:50]
    assert unexpected(modules) == {}


def test_migrate_imports_alembic(tmp_path: Path) -> None:
    """The other side of the check above: Alembic is where it is needed, and
    the reading of the process's imports sees it."""
    env = base_env(tmp_path, DATABASE_URL=sqlite_url(tmp_path / "t.db"), **VERBOSE_IMPORTS)
    result = subprocess.run(
        [str(TELEUPLOADER), "migrate"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "database schema is up to date" in result.stdout
    assert "alembic" in unexpected(imported(result.stderr))


def test_a_websocket_upgrade_is_refused_so_websockets_stays_loaded(
    start_service: ServiceStarter, migrated_db: Path
) -> None:
    """Why websockets is not in NOT_FOR_SERVE: without a WebSocket protocol
    uvicorn answers an upgrade request as plain HTTP and logs two warnings,
    one telling the operator to install a WebSocket library."""
    service = start_service(migrated_db)
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: teleuploader\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 403 Forbidden"
    service.proc.stop()
    assert "WebSocket library" not in service.proc.stdout() + service.proc.stderr()
