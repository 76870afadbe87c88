"""deploy/ says what deploy/README.md says: the env file's mode, that the
example starts on SQLite until a database is chosen, the connections a
process opens, against which pgbouncer is sized, and Caddy's keep-alive
against the service's."""

from __future__ import annotations

import configparser
import re

from app.config.settings import Settings
from app.db.engine import POOL_OVERFLOW, POOL_SIZE
from app.kit.serving import KEEP_ALIVE_SECONDS
from tests.deploy.conftest import REPO

DEPLOY = REPO / "deploy"
GUIDE = (DEPLOY / "README.md").read_text()
ENV_EXAMPLE = (DEPLOY / "env.example").read_text()
PGBOUNCER = (DEPLOY / "pgbouncer.ini").read_text()
# The engine's pool, and on Postgres a second one of the same size for the
# single-statement reads (app/db/single_statements.py).
CONNECTIONS_PER_PROCESS = 2 * (POOL_SIZE + POOL_OVERFLOW)


def _settings_names() -> set[str]:
    names = set()
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        choices = getattr(alias, "choices", [alias])
        names |= {choice for choice in choices if isinstance(choice, str) and choice.isupper()}
    return names


def test_the_env_example_sets_only_real_settings_and_leaves_the_database_to_choose() -> None:
    active = [
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert set(active) <= _settings_names(), set(active) - _settings_names()
    # Commented out: SQLite until Postgres is set up (deploy/README.md, step 4).
    assert "DATABASE_URL" not in active
    assert "MIGRATION_DATABASE_URL" not in active
    assert "#DATABASE_URL=postgresql://" in ENV_EXAMPLE


def test_the_env_files_mode_is_the_one_the_guide_gives() -> None:
    install = re.compile(
        r"install (.*?)(?:/opt/teleuploader/)?deploy/env\.example /etc/teleuploader/env"
    )
    in_guide = {m.group(1).strip() for m in install.finditer(GUIDE)}
    in_example = {m.group(1).strip() for m in install.finditer(ENV_EXAMPLE)}
    assert in_guide == in_example == {"-m 0600"}
    assert "/etc/teleuploader/env` (mode 600" in GUIDE


def test_pgbouncer_is_sized_for_the_connections_each_process_opens() -> None:
    said = f"up to {CONNECTIONS_PER_PROCESS} client connections"
    assert said in PGBOUNCER
    assert said in " ".join(GUIDE.split())
    ini = configparser.ConfigParser(comment_prefixes=(";",), inline_comment_prefixes=(";",))
    ini.read_string(PGBOUNCER)
    pgbouncer = ini["pgbouncer"]
    # Room for a few instances and the commands of `tu`.
    assert int(pgbouncer["max_client_conn"]) >= 4 * CONNECTIONS_PER_PROCESS
    assert int(pgbouncer["max_db_connections"]) >= int(pgbouncer["default_pool_size"])
    for name in ("default_pool_size", "max_db_connections", "max_client_conn"):
        assert f"`{name} = {pgbouncer[name]}`" in GUIDE, name


def test_caddy_closes_its_idle_upstream_connections_before_the_service_does() -> None:
    # The other way round, Caddy can send a request on a connection the
    # service is closing that instant, and answer its client 502.
    caddyfile = (REPO / "Caddyfile").read_text()
    (value, unit), *others = re.findall(r"^\s*keepalive (\d+)(s|m)\s*$", caddyfile, re.MULTILINE)
    assert not others
    caddy_seconds = int(value) * (60 if unit == "m" else 1)
    assert caddy_seconds < KEEP_ALIVE_SECONDS


def _final_stage_env(containerfile: str) -> dict[str, str]:
    """The ENV of the Containerfile's last stage (what the service runs with)."""
    last = containerfile.rsplit("\nFROM ", 1)[1]
    env: dict[str, str] = {}
    for instruction in re.findall(r"^ENV ((?:.*\\\n)*.*)$", last, re.MULTILINE):
        for pair in instruction.replace("\\\n", " ").split():
            name, _, value = pair.partition("=")
            env[name] = value
    return env


def test_the_unit_and_the_image_run_with_two_malloc_arenas() -> None:
    # glibc's per-thread arenas kept the memory the service's threads freed:
    # the RSS of a soak crept minute by minute (issue 55, bench/README.md).
    unit = (DEPLOY / "teleuploader.service").read_text()
    assert re.findall(r"^Environment=MALLOC_ARENA_MAX=(\S+)$", unit, re.MULTILINE) == ["2"]
    image = _final_stage_env((REPO / "Containerfile").read_text())
    assert image.get("MALLOC_ARENA_MAX") == "2"
    assert "MALLOC_ARENA_MAX=2" in GUIDE
