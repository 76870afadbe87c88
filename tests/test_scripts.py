"""scripts/test, what CI runs, refuses the switch that skips the Postgres tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test"


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
