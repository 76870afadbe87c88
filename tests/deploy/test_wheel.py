"""The package works without the checkout: an sdist and a wheel built from
this checkout, installed into a new venv in another directory, migrate,
create a key, check the bots, serve, and upload and download through the
installed command.

The wheel is built from the sdist (as `uv build` does), so both must carry
everything the program reads at run time (migrations, the web page). The
runtime dependencies are installed at the versions of uv.lock, from uv's
cache (`--no-deps`: the lock is the whole set), so the test costs seconds.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.deploy.conftest import (
    REPO,
    START_TIMEOUT,
    Processes,
    Simulator,
    base_env,
    free_port,
    wait_for,
)

UV = REPO / "scripts" / "uv"
MIGRATION = "app/db/migrations/versions/0001_initial.py"


@dataclass(frozen=True)
class Installed:
    venv: Path
    sdist: Path
    wheel: Path

    @property
    def teleuploader(self) -> Path:
        return self.venv / "bin" / "teleuploader"


def _uv(*args: str | os.PathLike[str], cwd: Path = REPO) -> None:
    result = subprocess.run(
        [str(UV), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"uv {args}: {result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it."""
    out = tmp_path_factory.mktemp("dist")
    _uv("build", "--quiet", "--out-dir", out, REPO)
    (sdist,) = out.glob("teleuploader-*.tar.gz")
    (wheel,) = out.glob("teleuploader-*.whl")
    return sdist, wheel


@pytest.fixture(scope="module", params=["locked", "oldest"])
def installed(
    request: pytest.FixtureRequest,
    dist: tuple[Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Installed:
    """The wheel in a new venv, far from the checkout, with the runtime
    dependencies at the versions of uv.lock, or at the oldest versions
    pyproject.toml allows (uv's lowest-direct resolution: each dependency
    named there at its lower bound, what they need in turn at its newest),
    which shows that those lower bounds really work."""
    sdist, wheel = dist
    work = tmp_path_factory.mktemp(str(request.param))
    requirements = work / "requirements.txt"
    venv = work / "venv"
    _uv("venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    if request.param == "locked":
        _uv("export", "--frozen", "--quiet", "--no-emit-project", "--output-file", requirements)
    else:
        _uv(
            "pip", "compile", "--quiet", "--python", python, "--resolution", "lowest-direct",
            REPO / "pyproject.toml", "--output-file", requirements,
        )  # fmt: skip
    # Byte-code compiled once here, as pip does, not by every command run.
    install = ("pip", "install", "--quiet", "--python", python, "--no-deps", "--compile-bytecode")
    _uv(*install, "-r", requirements)
    _uv(*install, wheel)
    return Installed(venv=venv, sdist=sdist, wheel=wheel)


def test_sdist_and_wheel_carry_the_migrations_and_the_page(dist: tuple[Path, Path]) -> None:
    sdist_path, wheel_path = dist
    with tarfile.open(sdist_path) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    with zipfile.ZipFile(wheel_path) as wheel:
        in_wheel = set(wheel.namelist())
    shipped = (MIGRATION, "app/db/migrations/env.py", "app/http/web/static/index.html")
    for path in (*shipped, "LICENSE"):
        assert path in in_sdist, path
    for path in shipped:
        assert path in in_wheel, path
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in in_wheel)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An empty directory outside the checkout, as a user's would be."""
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    assert REPO not in directory.parents
    return directory


def _run(installed: Installed, args: list[str], *, env: Mapping[str, str], cwd: Path) -> str:
    result = subprocess.run(
        [str(installed.teleuploader), *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (
        f"teleuploader {' '.join(args)} exited {result.returncode}\n"
        f"stdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result.stdout


def test_the_installed_program_migrates_serves_uploads_and_downloads(
    installed: Installed,
    elsewhere: Path,
    telegram_sim: Simulator,
    processes: Processes,
) -> None:
    port = free_port()
    env = base_env(
        elsewhere,
        BOT_TOKENS=",".join(telegram_sim.tokens),
        STORAGE_CHAT_ID=str(telegram_sim.chat_id),
        TELEGRAM_API_BASE=telegram_sim.url,
        PORT=str(port),
        CHUNK_SIZE=str(256 * 1024),
        SENDS_PER_MINUTE="0",
    )
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", "import app; print(app.__file__)"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(installed.venv), where

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _run(installed, ["--version"], env=env, cwd=elsewhere) == f"teleuploader {version}\n"
    assert "up to date" in _run(installed, ["migrate"], env=env, cwd=elsewhere)
    assert (elsewhere / "teleuploader.db").is_file()
    key = _run(installed, ["keys", "create", "me"], env=env, cwd=elsewhere).strip()
    assert key.startswith("tu_")
    _run(installed, ["check"], env=env, cwd=elsewhere)

    service = processes.start("serve", [installed.teleuploader, "serve"], env=env, cwd=elsewhere)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _ready(base), within=START_TIMEOUT, what="/ready", proc=service)
    page = httpx.get(f"{base}/", timeout=10)
    assert page.status_code == 200 and "<html" in page.text.lower()

    source = elsewhere / "big.bin"
    source.write_bytes(os.urandom(1024 * 1024 + 17))  # five chunks, through the bots
    client_env = {**env, "TELEUPLOADER_URL": base, "TELEUPLOADER_KEY": key}
    link = _run(installed, ["upload", str(source)], env=client_env, cwd=elsewhere).strip()
    assert link.startswith(f"{base}/f/"), link
    _run(installed, ["download", link, "-o", "copy.bin"], env=client_env, cwd=elsewhere)
    copy = elsewhere / "copy.bin"
    assert (
        hashlib.sha256(copy.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("installed", ["locked"], indirect=True)
def test_the_installed_demo_starts_and_stops(
    installed: Installed, elsewhere: Path, processes: Processes
) -> None:
    demo_port = free_port()
    demo = processes.start(
        "demo",
        [installed.teleuploader, "demo", "--port", str(demo_port)],
        env=base_env(elsewhere),
        cwd=elsewhere,
    )
    base = f"http://127.0.0.1:{demo_port}"
    wait_for(lambda: _ready(base), within=START_TIMEOUT, what="the demo's /ready", proc=demo)
    assert base in demo.stdout()
    demo.signal(signal.SIGINT)
    assert demo.wait(START_TIMEOUT) == 0, demo.output()
