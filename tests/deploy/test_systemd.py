"""The systemd unit, and the real service under a fake systemd.

A fake systemd is what systemd itself is to a Type=notify service: an AF_UNIX
datagram socket named by NOTIFY_SOCKET, plus WATCHDOG_USEC. The test starts
`teleuploader serve` as a subprocess with them and reads what it sends.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config.settings import Settings
from tests.deploy.conftest import (
    REPO,
    TELEUPLOADER,
    Processes,
    ServiceStarter,
    Simulator,
    base_env,
    sqlite_url,
    wait_for,
)

UNIT = REPO / "deploy" / "teleuploader.service"
ENV_EXAMPLE = REPO / "deploy" / "env.example"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (a key may repeat, e.g. Environment=)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"assignment outside a section: {line!r}"
        assert not line.endswith("\\"), "keep unit lines unwrapped for this parser"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(section: dict[str, list[str]], key: str) -> str:
    values = section.get(key)
    assert values, f"{key}= is missing"
    assert len(values) == 1, f"{key}= is set {len(values)} times"
    return values[0]


def seconds(value: str) -> float:
    """A systemd time span such as 90, 90s, 1min 30s, 2min."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


# --- the unit file ----------------------------------------------------------------------------


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` on the unit, with one change: ExecStart points at
    this checkout's venv instead of /opt/teleuploader, because verify fails when
    the ExecStart binary does not exist (and it does not on a test machine).
    User=/Group= stay as shipped: verify does not resolve them. Verify exits 0
    even for unknown keys or unparsable values (it only prints them), so any
    output at all fails the test."""
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze missing: install Debian's systemd package"
    text = UNIT.read_text()
    shipped = "ExecStart=/opt/teleuploader/.venv/bin/teleuploader serve"
    assert shipped in text
    copy = tmp_path / "teleuploader.service"
    copy.write_text(text.replace(shipped, f"ExecStart={TELEUPLOADER} serve"))
    result = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", result.stdout
    assert result.stderr.strip() == "", result.stderr


def test_unit_settings() -> None:
    unit = parse_unit(UNIT.read_text())
    service = unit["Service"]
    assert one(service, "Type") == "notify"
    assert one(service, "NotifyAccess") == "main"
    assert seconds(one(service, "WatchdogSec")) == 30
    assert one(service, "ExecStart") == "/opt/teleuploader/.venv/bin/teleuploader serve"
    assert one(service, "EnvironmentFile") == "/etc/teleuploader/env"
    assert one(service, "Restart") == "on-failure"
    assert seconds(one(service, "RestartSec")) > 0
    assert one(service, "User") == "teleuploader"
    assert one(service, "Group") == "teleuploader"
    assert one(service, "WorkingDirectory") == "/var/lib/teleuploader"
    assert one(service, "KillSignal") == "SIGTERM"
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
    }.items():
        assert one(service, key) == value, key
    assert one(service, "RestrictAddressFamilies").split() == ["AF_INET", "AF_INET6", "AF_UNIX"]
    # The only writable place.
    assert service["ReadWritePaths"] == ["/var/lib/teleuploader"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_unit_stop_timeout_covers_the_drain() -> None:
    """With other instances alive the service serves on, unready, for
    SHUTDOWN_DELAY_SECONDS; uvicorn drains HTTP for SHUTDOWN_GRACE_SECONDS + 5,
    then the dispatcher waits up to SHUTDOWN_GRACE_SECONDS for in-flight
    Telegram calls: systemd must not SIGKILL the service before all are over."""
    service = parse_unit(UNIT.read_text())["Service"]
    grace = Settings.model_fields["shutdown_grace_seconds"].default
    delay = Settings.model_fields["shutdown_delay_seconds"].default
    assert (grace, delay) == (30, 5)
    assert seconds(one(service, "TimeoutStopSec")) > delay + 2 * grace + 5


def test_env_example_lists_every_setting() -> None:
    """Every setting of app/config/settings.py is in deploy/env.example, and the example
    itself is valid settings."""
    text = ENV_EXAMPLE.read_text()
    assigned = {
        match.group(1) for match in re.finditer(r"^#?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE)
    }
    missing = []
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        env_name = alias if isinstance(alias, str) else getattr(alias, "choices", [name])[0]
        assert isinstance(env_name, str)
        if name.startswith("legacy_"):
            if env_name not in text:  # old names: mentioned, not set
                missing.append(env_name)
        elif env_name not in assigned:
            missing.append(env_name)
    assert not missing, f"deploy/env.example lacks {missing}"

    values = dict(
        line.split("=", 1)
        for line in text.splitlines()
        if line and not line.startswith("#") and "=" in line
    )
    settings = Settings(_env_file=None, **{key.lower(): value for key, value in values.items()})  # type: ignore[arg-type]
    assert len(settings.bot_tokens) == 2
    # As shipped, SQLite in the working directory; the Postgres lines (step 4)
    # are commented out, and valid once uncommented.
    assert settings.database_url == "sqlite+aiosqlite:///./teleuploader.db"
    postgres = dict(
        line.removeprefix("#").split("=", 1)
        for line in text.splitlines()
        if line.startswith(("#DATABASE_URL=", "#MIGRATION_DATABASE_URL="))
    )
    with_postgres = {key.lower(): value for key, value in (values | postgres).items()}
    settings = Settings(_env_file=None, **with_postgres)  # type: ignore[arg-type]
    assert settings.database_url.endswith(":6432/teleuploader")  # pgbouncer
    assert settings.migration_database_url is not None
    assert settings.migration_database_url.endswith(":5432/teleuploader")  # direct
    # Placeholders only: nothing that looks like a real token or password.
    assert "CHANGE_ME" in postgres["DATABASE_URL"]
    assert all("REPLACE" in token.secret for token in settings.bot_tokens)


# --- the service under a fake systemd -----------------------------------------------------------


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(str(path))
        yield sock, str(path)
    finally:
        sock.close()


def receive(sock: socket.socket, timeout: float) -> list[str]:
    """Messages that arrive within `timeout` seconds."""
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            break
    return messages


def receive_until(sock: socket.socket, wanted: str, timeout: float) -> list[str]:
    """Messages up to and including the first one holding the line `wanted`."""
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {wanted} within {timeout}s; got {messages}")
        sock.settimeout(min(left, 0.5))
        try:
            message = sock.recv(4096).decode()
        except TimeoutError:
            continue
        messages.append(message)
        if wanted in message.splitlines():
            return messages


def test_service_notifies_systemd(
    start_service: ServiceStarter,
    migrated_db: Path,
    notify_socket: tuple[socket.socket, str],
) -> None:
    sock, address = notify_socket
    service = start_service(
        migrated_db,
        env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000"},
        wait_healthy=False,
    )
    proc = service.proc

    try:
        before = receive_until(sock, "READY=1", timeout=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{proc.output()}") from None
    # Nothing but READY=1 first: no watchdog pings before startup is complete.
    assert len(before) == 1, before
    ready = before[0].splitlines()
    assert ready == ["READY=1", "STATUS=ready: 2/2 bots usable"]
    # READY=1 means the port already accepts requests.
    assert httpx.get(f"{service.url}/health", timeout=5).status_code == 200

    # WATCHDOG_USEC=0.2 s: the pings keep coming (their pace under load is
    # measured by bench/http_bench.py).
    for _ in range(4):
        assert receive_until(sock, "WATCHDOG=1", timeout=10)[-1] == "WATCHDOG=1"

    proc.signal(signal.SIGTERM)
    after = receive_until(sock, "STOPPING=1", timeout=10)
    stopping = after[-1].splitlines()
    assert stopping[0] == "STOPPING=1"
    assert stopping[1].startswith("STATUS=stopping"), stopping
    assert "2/2 bots usable" in stopping[1]
    returncode = proc.wait(timeout=20)
    tail = receive(sock, 0.2)  # what the exited process sent last, already here
    assert not any("READY=1" in m.splitlines() for m in after + tail)
    assert "STATUS=stopped" in tail + after, tail
    # A clean SIGTERM shutdown exits 0 (not by the signal uvicorn re-raises).
    assert returncode == 0, proc.output()


def test_unmigrated_database_never_becomes_ready(
    processes: Processes,
    telegram_sim: Simulator,
    tmp_path: Path,
    notify_socket: tuple[socket.socket, str],
) -> None:
    sock, address = notify_socket
    database = tmp_path / "empty.db"  # created by SQLite on connect, with no tables
    env = base_env(
        tmp_path,
        BOT_TOKENS=",".join(telegram_sim.tokens),
        STORAGE_CHAT_ID=str(telegram_sim.chat_id),
        TELEGRAM_API_BASE=telegram_sim.url,
        DATABASE_URL=sqlite_url(database),
        PORT="1",  # never reached
        NOTIFY_SOCKET=address,
        WATCHDOG_USEC="200000",
    )
    proc = processes.start("teleuploader-serve", [TELEUPLOADER, "serve"], env=env)
    wait_for(lambda: proc.poll() is not None, within=30, what="serve to exit")
    assert proc.poll() not in (0, None)
    lines = proc.stderr().strip().splitlines()
    assert len(lines) == 1, proc.output()
    assert "run `teleuploader migrate`" in lines[0]
    assert lines[0].startswith("teleuploader: error: ")
    assert not any("READY=1" in m.splitlines() for m in receive(sock, 0.2))
