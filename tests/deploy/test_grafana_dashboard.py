"""deploy/grafana/teleuploader.json against what Grafana's import needs.

Grafana itself cannot be installed here (no Debian package, and nothing but
the package registries is reachable), so the file is checked for the fields
the dashboard JSON model of Grafana 10.4 (schemaVersion 39; Grafana 11 reads
it too) requires for an import, and for the references that would break one:
every panel's datasource is the `datasource` variable, every variable used
is defined, ids are unique, panels fit the 24-column grid without overlap.
That every panel's query returns data is checked against a real Prometheus
scraping a running service (tests/deploy/test_observability_stack.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.deploy.conftest import REPO

DASHBOARD = REPO / "deploy" / "grafana" / "teleuploader.json"
SCHEMA_VERSION = 39  # Grafana 10.4
PANEL_TYPES = {"row", "timeseries", "stat"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query, in order."""
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def test_the_dashboard_has_what_an_import_needs() -> None:
    board = dashboard()
    assert board["schemaVersion"] == SCHEMA_VERSION
    assert board["id"] is None  # an import assigns one
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", board["uid"])
    assert board["title"] == "TeleUploader"
    for key in ("panels", "templating", "annotations", "time", "tags"):
        assert key in board, key
    requires = {(item["type"], item["id"]) for item in board["__requires"]}
    used = {("panel", panel["type"]) for panel in board["panels"] if panel["type"] != "row"}
    assert used <= requires
    assert ("datasource", "prometheus") in requires


def test_every_panel_is_well_formed_and_placed() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        assert panel["title"]
        place = panel["gridPos"]
        assert place["x"] >= 0 and place["w"] > 0 and place["x"] + place["w"] <= 24, panel
        cells = {
            (row, column)
            for row in range(place["y"], place["y"] + place["h"])
            for column in range(place["x"], place["x"] + place["w"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"].strip()


def test_every_variable_a_query_uses_is_defined() -> None:
    board = dashboard()
    defined = {variable["name"] for variable in board["templating"]["list"]}
    assert defined == {"datasource", "job"}
    builtin = {"__rate_interval", "__interval", "__range"}
    for title, expr in queries(board):
        used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", expr))
        assert used <= defined | builtin, (title, used)
        # Every series of a deployment's job, and only of it.
        assert '{job=~"$job"' in expr, title


def test_the_dashboard_shows_what_operators_asked_for() -> None:
    """The issue's list: each item has its panel, read from the metric it needs."""
    exprs = "\n".join(expr for _title, expr in queries(dashboard()))
    for metric in (
        "teleuploader_uploaded_bytes_total",
        "teleuploader_downloaded_bytes_total",
        "teleuploader_http_first_byte_seconds_bucket",
        "teleuploader_bot_in_flight",
        "teleuploader_bot_cooldown_seconds",
        "teleuploader_bot_rate_limited_total",
        "teleuploader_spool_bytes",
        "teleuploader_spool_oldest_unflushed_seconds",
        "teleuploader_objects_damaged",
        "teleuploader_copies_repaired_total",
        "teleuploader_copies_oldest_check_timestamp_seconds",
        "teleuploader_journal_last_batch_timestamp_seconds",
        "teleuploader_snapshot_last_timestamp_seconds",
        "teleuploader_chat_messages",
        "teleuploader_http_requests_total",
        "teleuploader_bot_errors_total",
    ):
        assert metric in exprs, metric
