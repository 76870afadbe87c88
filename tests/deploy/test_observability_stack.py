"""The alert rules and the dashboard against a real Prometheus (Debian's
`prometheus`) scraping a running `teleuploader serve`, with the Telegram
simulator in a process of its own.

Prometheus scrapes every second and evaluates a test copy of
deploy/prometheus/alerts.yml every second: the copy differs only in time, each
`for:` set to 0s and each range (`[2m]`, `[5m]`, `[1h]`) to 10s, so that what
takes minutes in production takes seconds here. The test then forces three
conditions, one after the other, and waits for each alert to be firing in
Prometheus's /api/v1/alerts:

* a storage chat lost with REPLICAS=1, then a scrub: TeleUploaderObjectsLost;
* the flush held at the simulator (its sendDocument gate) while a tus upload
  sits in the spool past FLUSH_LAG_ALERT (2 s): TeleUploaderSpoolFlushLagging;
* the simulator stopped: every call goes unanswered, TeleUploaderNoUsableBot.

Before the simulator stops, every query of deploy/grafana/teleuploader.json
runs against the same Prometheus and returns at least one series.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy.conftest import (
    START_TIMEOUT,
    TELEUPLOADER,
    Proc,
    Processes,
    base_env,
    free_port,
    port_open,
    run_cli,
    sqlite_url,
    wait_for,
)
from tests.deploy.test_grafana_dashboard import dashboard, queries
from tests.deploy.test_prometheus_rules import RULES
from tests.running_service import payload

CHATS = (-1001, -1002)
CHUNK = 64 * 1024
ALERT_TIMEOUT = 30.0


def fast_rules(target: Path) -> Path:
    """The rules with every `for:` at 0s and every range at 10s."""
    document = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
            rule["expr"] = re.sub(r"\[\d+[smh]\]", "[10s]", rule["expr"])
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


@dataclass
class Stack:
    sim_proc: Proc
    sim_url: str
    service: str
    key: str
    prometheus: str

    def alerts_firing(self) -> set[str]:
        answer = httpx.get(f"{self.prometheus}/api/v1/alerts", timeout=5).json()
        return {
            alert["labels"]["alertname"]
            for alert in answer["data"]["alerts"]
            if alert["state"] == "firing"
        }

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(
            f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=5
        ).json()
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_firing(self, alert: str, *, poke: Callable[[], object] = lambda: None) -> None:
        def firing() -> bool:
            poke()
            return alert in self.alerts_firing()

        wait_for(firing, within=ALERT_TIMEOUT, what=f"{alert} to fire in Prometheus")


@pytest.fixture
def stack(tmp_path: Path, processes: Processes, migrated_db: Path) -> Iterator[Stack]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is not installed: scripts/test installs Debian's package")
    sim_port, service_port, prometheus_port = free_port(), free_port(), free_port()
    tokens_file = tmp_path / "tokens.txt"
    chats = [arg for chat in CHATS for arg in ("--chat-id", str(chat))]
    sim = processes.start(
        "telegram-sim",
        [
            TELEUPLOADER,
            "telegram-sim",
            "--port",
            str(sim_port),
            "--bots",
            "2",
            *chats,
            "--tokens-file",
            tokens_file,
        ],
        env=base_env(tmp_path),
    )
    wait_for(
        lambda: port_open(sim_port) and tokens_file.is_file(),
        within=START_TIMEOUT,
        what="the Telegram simulator",
        proc=sim,
    )
    sim_url = f"http://127.0.0.1:{sim_port}"
    settings = base_env(
        tmp_path,
        BOT_TOKENS=",".join(tokens_file.read_text().split()),
        STORAGE_CHAT_IDS=",".join(str(chat) for chat in CHATS),
        TELEGRAM_API_BASE=sim_url,
        DATABASE_URL=sqlite_url(migrated_db),
        HOST="127.0.0.1",
        PORT=str(service_port),
        CHUNK_SIZE=str(CHUNK),
        REPLICAS="1",
        SENDS_PER_MINUTE="0",
        FLUSH_LAG_ALERT="2",
        JOURNAL_SECONDS="1",
        SNAPSHOT_INTERVAL_SECONDS="3600",
        SHUTDOWN_GRACE_SECONDS="2",
        LOG_FORMAT="json",
    )
    key = run_cli(["keys", "create", "ops", "--scope", "admin"], env=settings, cwd=tmp_path)
    key = key.strip()
    service = processes.start("teleuploader-serve", [TELEUPLOADER, "serve"], env=settings)
    url = f"http://127.0.0.1:{service_port}"
    wait_for(lambda: _ready(url), within=START_TIMEOUT, what="/ready", proc=service)

    rules = fast_rules(tmp_path / "alerts.yml")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {
                        "job_name": "teleuploader",
                        "authorization": {"credentials": key},
                        "static_configs": [{"targets": [f"127.0.0.1:{service_port}"]}],
                    }
                ],
            }
        )
    )
    prom = processes.start(
        "prometheus",
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        env=base_env(tmp_path),
    )
    stack = Stack(sim, sim_url, url, key, f"http://127.0.0.1:{prometheus_port}")
    wait_for(
        lambda: _scraped(stack),
        within=2 * START_TIMEOUT,  # a loaded machine: its database, then the first scrape
        what="Prometheus's first scrape",
        proc=prom,
    )
    yield stack


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _scraped(stack: Stack) -> bool:
    try:
        # Prometheus answers 503 "Service Unavailable" (not JSON) until its
        # storage is open: not yet.
        starting = httpx.get(f"{stack.prometheus}/-/ready", timeout=5).status_code != 200
        return not starting and bool(stack.query('up{job="teleuploader"} == 1'))
    except httpx.HTTPError:
        return False


def test_three_alerts_fire_and_every_panel_has_data(stack: Stack) -> None:
    auth = {"Authorization": f"Bearer {stack.key}"}
    with httpx.Client(base_url=stack.service, headers=auth, timeout=30) as http:
        _alerts_fire_and_panels_have_data(stack, http)


def _alerts_fire_and_panels_have_data(stack: Stack, http: httpx.Client) -> None:
    # Files of several chunks, spread over both chats.
    bodies = {f"f{index}.bin": payload(3 * CHUNK, seed=index) for index in range(4)}
    for name, body in bodies.items():
        stored = http.put(f"/api/files/{name}", content=body)
        assert stored.status_code == 201, stored.text
        assert http.get(f"/f/{stored.json()['public_id']}").content == body
    assert http.get("/f/no-such-file").status_code == 404
    assert http.post("/api/admin/snapshot").status_code == 200
    # A change after the snapshot goes out in a journal batch (JOURNAL_SECONDS=1)
    # while sendDocument still runs: the journal's age panel has its series.
    later = http.put("/api/files/after-snapshot.bin", content=payload(CHUNK, seed=7))
    assert later.status_code == 201, later.text
    wait_for(
        lambda: bool(stack.query("teleuploader_journal_last_batch_timestamp_seconds")),
        within=ALERT_TIMEOUT,
        what="a journal batch after the snapshot",
    )

    # Each alert fires because of its condition, not before it.
    quiet = stack.alerts_firing()
    for alert in ("TeleUploaderObjectsLost", "TeleUploaderSpoolFlushLagging"):
        assert alert not in quiet, quiet

    # 1. A storage chat is lost, each chunk has one copy: a scrub finds objects lost.
    lost = httpx.post(f"{stack.sim_url}/_sim/chats/{CHATS[0]}/lose", timeout=5)
    assert lost.status_code == 200, lost.text
    assert http.post("/api/admin/scrub", json={"deep": False}).status_code == 202
    stack.wait_firing("TeleUploaderObjectsLost")

    # 2. The flush is held at Telegram's door while a tus upload waits in the spool.
    httpx.post(f"{stack.sim_url}/_sim/hold/sendDocument", timeout=5).raise_for_status()
    spooled = payload(2 * CHUNK, seed=99)
    created = http.post(
        "/api/tus/",
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": str(len(spooled))},
    )
    assert created.status_code == 201, created.text
    patched = http.patch(
        created.headers["location"],
        content=spooled,
        headers={
            "Tus-Resumable": "1.0.0",
            "Upload-Offset": "0",
            "Content-Type": "application/offset+octet-stream",
        },
    )
    assert patched.status_code == 204, patched.text
    # /ready measures the lag at once (the metric is refreshed every 10 s).
    stack.wait_firing(
        "TeleUploaderSpoolFlushLagging", poke=lambda: httpx.get(f"{stack.service}/ready")
    )
    assert http.get("/ready").json()["status"] == "degraded"

    # The dashboard, while everything runs: every query has data.
    missing = _panels_without_data(stack)
    assert not missing, f"panels whose query returned no series: {missing}"

    # 3. Telegram is gone: every call goes unanswered.
    assert "TeleUploaderNoUsableBot" not in stack.alerts_firing()
    stack.sim_proc.stop()
    stack.wait_firing("TeleUploaderNoUsableBot")


def _panels_without_data(stack: Stack) -> list[str]:
    """Titles of the panels whose query returns nothing, once the data had
    a few scrapes to arrive."""
    pending = [
        (title, expr.replace("$job", ".+").replace("$__rate_interval", "1m"))
        for title, expr in queries(dashboard())
    ]
    deadline = time.monotonic() + ALERT_TIMEOUT
    while pending and time.monotonic() < deadline:
        pending = [(title, expr) for title, expr in pending if not stack.query(expr)]
        if pending:
            time.sleep(0.5)
    return [f"{title}: {expr}" for title, expr in pending]
