"""deploy/prometheus/alerts.yml with the real Prometheus tools (Debian's
`prometheus` package: `promtool`): the rules parse, their unit tests
(alerts.test.yml) pass, and every rule has a test in which it fires.
tests/deploy/test_observability_stack.py sees three of them fire against a
running service."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import REPO

RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "alerts.test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: scripts/test installs Debian's prometheus package")
    return found


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load(RULES)["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_the_rules_unit_tests_pass() -> None:
    result = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_rule_is_tested_firing_and_says_what_to_do() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in load(RULE_TESTS)["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    assert set(names) == fired, "every rule fires in some unit test"
    assert set(names) == quiet, "every rule stays quiet in some unit test"
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        # What to do, not only what happened: a command, a setting or a step.
        assert len(rule["annotations"]["description"].split(". ")) >= 2, rule["alert"]
