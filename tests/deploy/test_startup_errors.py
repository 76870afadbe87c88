"""Every start-up failure a user can cause is one line on stderr and exit
status 2, naming the setting to fix: a database that cannot be used (for
`migrate`, `serve` and `keys`), a port already in use (found before the
service takes a bot lease or calls Telegram) and a bad bot token. Run as an
operator runs them: the installed command, in a clean environment."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.conftest import POSTGRES_URL, SKIP_POSTGRES
from tests.deploy.conftest import TELEUPLOADER, Simulator, base_env, free_port, sqlite_url

PASSWORD = "s3cret-pass"


def _teleuploader(
    args: list[str], env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TELEUPLOADER), *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _assert_one_line(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("teleuploader: error: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    assert PASSWORD not in result.stderr
    return lines[0]


def _postgres(user: str, port: int | None = None) -> str:
    url = POSTGRES_URL.replace("postgres@", f"{user}:{PASSWORD}@", 1)
    return url if port is None else url.replace(":5432/", f":{port}/")


# (DATABASE_URL, what the line must say besides the setting's name)
DATABASES = {
    "wrong role": (lambda tmp: _postgres("no_such_role"), ['role "no_such_role" does not exist']),
    "postgres not listening": (
        lambda tmp: _postgres("postgres", port=_closed_port()),
        ["connection refused", "is Postgres running"],
    ),
    "sqlite in a missing directory": (
        lambda tmp: f"sqlite:///{tmp}/no/such/dir/t.db",
        ["directory", "/no/such/dir", "does not exist"],
    ),
    "mysql": (
        lambda tmp: "mysql://root@127.0.0.1/teleuploader",
        ["unsupported database URL scheme 'mysql'", "postgresql://", "sqlite://"],
    ),
}


def _closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket closed


@pytest.mark.parametrize("command", [["migrate"], ["serve"], ["keys", "list"]])
@pytest.mark.parametrize("case", list(DATABASES))
def test_a_database_that_cannot_be_used_is_one_line_naming_the_setting(
    case: str, command: list[str], tmp_path: Path
) -> None:
    if SKIP_POSTGRES and "postgres" in DATABASES[case][0](tmp_path):
        pytest.skip("TEST_SKIP_POSTGRES=1")
    url_of, expected = DATABASES[case]
    url = url_of(tmp_path)
    env = base_env(
        tmp_path,
        DATABASE_URL=url,
        BOT_TOKENS="100001:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        STORAGE_CHAT_ID="-1001",
        TELEGRAM_API_BASE=f"http://127.0.0.1:{_closed_port()}",
    )

    result = _teleuploader(command, env, tmp_path)

    _assert_one_line(result, "DATABASE_URL", *expected)
    assert result.stdout == ""


def test_migrate_names_migration_database_url_when_that_is_the_one_used(tmp_path: Path) -> None:
    env = base_env(
        tmp_path,
        DATABASE_URL=sqlite_url(tmp_path / "fine.db"),
        MIGRATION_DATABASE_URL=f"sqlite:///{tmp_path}/missing/t.db",
    )
    line = _assert_one_line(_teleuploader(["migrate"], env, tmp_path), "MIGRATION_DATABASE_URL")
    assert "DATABASE_URL (sqlite" not in line.replace("MIGRATION_DATABASE_URL", "")


@pytest.fixture
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_a_port_in_use_is_one_line_before_any_lease_or_telegram_call(
    tmp_path: Path, migrated_db: Path, telegram_sim: Simulator, port_in_use: int
) -> None:
    env = base_env(
        tmp_path,
        DATABASE_URL=sqlite_url(migrated_db),
        BOT_TOKENS=",".join(telegram_sim.tokens),
        STORAGE_CHAT_ID=str(telegram_sim.chat_id),
        TELEGRAM_API_BASE=telegram_sim.url,
        PORT=str(port_in_use),
    )

    result = _teleuploader(["serve"], env, tmp_path)

    _assert_one_line(result, f"127.0.0.1:{port_in_use} is already in use", "PORT")
    assert result.stdout == ""  # no log lines
    stats = httpx.get(f"{telegram_sim.url}/_sim/stats", timeout=10).json()
    assert all(not bot["calls"] for bot in stats["bots"].values()), json.dumps(stats)
    with sqlite3.connect(migrated_db) as db:
        assert db.execute("SELECT count(*) FROM bot_leases").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM instances").fetchone() == (0,)


def test_a_bad_token_is_one_line_saying_which_and_why(tmp_path: Path) -> None:
    good = "100001:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    env = base_env(tmp_path, BOT_TOKENS=f"{good},100002:{PASSWORD}", STORAGE_CHAT_ID="-1001")
    _assert_one_line(
        _teleuploader(["serve"], env, tmp_path),
        "BOT_TOKENS: token 2 of 2 (100002:***): its secret is 11 characters long",
    )
