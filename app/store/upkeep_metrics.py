"""Scrape-time gauges of the deployment's upkeep, for its alerts and its
dashboard (deploy/prometheus, deploy/grafana): when this process last wrote
a snapshot and whether that fails, and how many instances share the database.
Registered by `Metrics.watch_upkeep`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


@dataclass(frozen=True, slots=True)
class SnapshotStatus:
    last_taken_at: datetime | None  # the last snapshot this process wrote
    failing: bool  # its last attempt failed


class UpkeepCollector(Collector):
    def __init__(self, snapshots: Callable[[], SnapshotStatus], fleet: Callable[[], int]) -> None:
        self._snapshots = snapshots
        self._fleet = fleet

    def collect(self) -> Iterator[Metric]:
        status = self._snapshots()
        if status.last_taken_at is not None:
            yield GaugeMetricFamily(
                "teleuploader_snapshot_last_timestamp_seconds",
                "When this process last wrote a snapshot of the metadata to the storage "
                "chats (Unix time); one instance of a fleet writes them at a time.",
                value=status.last_taken_at.timestamp(),
            )
        yield GaugeMetricFamily(
            "teleuploader_snapshot_failing",
            "1 while this process's last snapshot failed (logged as snapshot_round_failed "
            "or final_snapshot_failed); the previous snapshot stays usable.",
            value=1 if status.failing else 0,
        )
        yield GaugeMetricFamily(
            "teleuploader_fleet_instances",
            "Live instances on this database (heartbeat within BOT_LEASE), this one "
            "included, as this instance's last lease round counted them.",
            value=self._fleet(),
        )
