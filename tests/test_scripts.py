"""scripts/test, what CI runs, refuses the switch that skips the Postgres
tests; scripts/setup installs from the lock only when it changed, and
scripts/run installs the runtime alone."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "test"


def test_scripts_test_refuses_to_skip_postgres(tmp_path: Path) -> None:
    # PATH names an empty directory: should the check ever go missing, the
    # script fails at its first external command instead of installing
    # packages and running the suite inside this test.
    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(empty), "TEST_SKIP_POSTGRES": "1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("test: refusing to run with TEST_SKIP_POSTGRES set"), (
        result.stderr
    )
    assert result.stdout == ""


class Checkout:
    """A copy of the checkout's scripts and lock, whose scripts/uv only notes
    how it was called: what scripts/setup would install, without installing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "scripts").mkdir(parents=True)
        for name in ("setup", "run"):
            shutil.copy2(REPO / "scripts" / name, root / "scripts" / name)
        for name in ("uv.lock", "pyproject.toml"):
            shutil.copy2(REPO / name, root / name)
        self.calls = root / "uv-calls"
        stub = root / "scripts" / "uv"
        stub.write_text(f'#!/bin/sh\necho "$*" >> {self.calls}\n')
        stub.chmod(0o755)
        venv_bin = root / ".venv" / "bin"
        venv_bin.mkdir(parents=True)
        (venv_bin / "python").symlink_to(sys.executable)
        # A teleuploader that says what it was asked, for scripts/run.
        command = venv_bin / "teleuploader"
        command.write_text(f'#!/bin/sh\necho "teleuploader $*" >> {self.calls}\n')
        command.chmod(0o755)

    def stamp(self, mode: str) -> None:
        digest = hashlib.sha256(
            (self.root / "uv.lock").read_bytes() + (self.root / "pyproject.toml").read_bytes()
        ).hexdigest()
        (self.root / ".venv" / ".teleuploader-install").write_text(f"{digest} {mode}\n")

    def run(self, *argv: str) -> list[str]:
        """Run a script; what scripts/uv and teleuploader were asked, in order."""
        self.calls.unlink(missing_ok=True)
        result = subprocess.run(
            [str(self.root / "scripts" / argv[0]), *argv[1:]],
            env={"PATH": os.environ["PATH"], "HOME": str(self.root)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout == ""
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def checkout(tmp_path: Path) -> Checkout:
    return Checkout(tmp_path / "checkout")


def test_setup_installs_nothing_while_the_lock_is_unchanged(checkout: Checkout) -> None:
    checkout.stamp("dev")
    assert checkout.run("setup") == []
    # A development install covers the runtime: scripts/run installs nothing.
    assert checkout.run("setup", "--runtime") == []
    assert checkout.run("run") == ["teleuploader migrate", "teleuploader serve"]


def test_run_installs_the_runtime_alone_and_only_once(checkout: Checkout) -> None:
    calls = checkout.run("run", "demo", "--port", "4001")

    syncs = [call for call in calls if call.startswith("sync")]
    assert syncs == ["sync --frozen --quiet --no-extra dev --inexact --compile-bytecode"]
    assert calls[-1] == "teleuploader demo --port 4001"
    assert checkout.run("run", "demo") == ["teleuploader demo"]


def test_setup_installs_again_when_the_lock_or_the_mode_changed(checkout: Checkout) -> None:
    checkout.stamp("runtime")
    assert checkout.run("setup", "--runtime") == []
    syncs = [call for call in checkout.run("setup") if call.startswith("sync")]
    assert syncs == ["sync --frozen --quiet --extra dev"]

    with (checkout.root / "uv.lock").open("a") as lock:
        lock.write("\n")
    syncs = [call for call in checkout.run("setup") if call.startswith("sync")]
    assert syncs == ["sync --frozen --quiet --extra dev"]
    assert checkout.run("setup") == []
