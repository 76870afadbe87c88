"""Scrape-time gauges of the store's own state: the upload budget and the
spool, the flush lag, durability as the scrub last counted it, the storage
chats' fill and the journal's last round. Each collector reads a live object
when Prometheus scrapes; `Metrics.watch_*` registers them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from app.db.copies import Health
    from app.store.flush_lag import FlushLag
    from app.store.journal import JournalStatus
    from app.telegram.chat_fill import ChatFill


@dataclass(frozen=True, slots=True)
class UploadBudgetUse:
    buffers_in_use: int
    buffers: int
    waiting_uploads: int
    spool_bytes: int
    spool_max_bytes: int
    # The spool's filesystem: (bytes free to the service, its size); None
    # without a spool.
    spool_disk: tuple[int, int] | None = None


class UploadBudgetCollector(Collector):
    def __init__(self, budget: Callable[[], UploadBudgetUse]) -> None:
        self._budget = budget

    def collect(self) -> Iterator[Metric]:
        use = self._budget()
        buffers = GaugeMetricFamily(
            "teleuploader_upload_buffers",
            "Chunk buffers of the process-wide upload budget (UPLOAD_BUFFER_CHUNKS).",
            labels=["state"],
        )
        buffers.add_metric(["in_use"], use.buffers_in_use)
        buffers.add_metric(["size"], use.buffers)
        yield buffers
        yield GaugeMetricFamily(
            "teleuploader_upload_buffer_waiters",
            "Uploads waiting for a buffer (not read from their sockets meanwhile).",
            value=use.waiting_uploads,
        )
        spool = GaugeMetricFamily(
            "teleuploader_spool_bytes",
            "Bytes in the staging spool, acknowledged and waiting for Telegram.",
            labels=["state"],
        )
        spool.add_metric(["used"], use.spool_bytes)
        spool.add_metric(["max"], use.spool_max_bytes)
        yield spool
        if use.spool_disk is not None:
            disk = GaugeMetricFamily(
                "teleuploader_spool_disk_bytes",
                "The filesystem of SPOOL_DIR: bytes free to the service, and its size. "
                "A full disk sends parts the slow way (to Telegram before the answer).",
                labels=["state"],
            )
            disk.add_metric(["free"], use.spool_disk[0])
            disk.add_metric(["size"], use.spool_disk[1])
            yield disk


class FlushLagCollector(Collector):
    def __init__(self, lag: Callable[[], FlushLag], alert: float) -> None:
        self._lag = lag
        self._alert = alert

    def collect(self) -> Iterator[Metric]:
        lag = self._lag()
        yield GaugeMetricFamily(
            "teleuploader_spool_unflushed_bytes",
            "Bytes acknowledged from this instance's spool and not yet in Telegram: "
            "until they are, they live on this machine's disk only.",
            value=lag.unflushed_bytes,
        )
        yield GaugeMetricFamily(
            "teleuploader_spool_oldest_unflushed_seconds",
            "Age of the oldest of those bytes (0: none); /ready says degraded past "
            "FLUSH_LAG_ALERT.",
            value=lag.oldest_seconds,
        )
        yield GaugeMetricFamily(
            "teleuploader_spool_flush_lag_alert_seconds",
            "FLUSH_LAG_ALERT: the age of the oldest unflushed byte past which /ready says "
            "degraded (the alert rules compare against it).",
            value=self._alert,
        )


class DurabilityCollector(Collector):
    def __init__(self, health: Callable[[], Health | None], repaired: Callable[[], int]) -> None:
        self._health = health
        self._repaired = repaired

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "teleuploader_copies_repaired",
            "Chunk copies stored again by the scrub from an intact copy (REPLICAS).",
            value=self._repaired(),
        )
        health = self._health()
        if health is None:
            return  # not counted yet: the first scrub round does
        objects = GaugeMetricFamily(
            "teleuploader_objects_damaged",
            "Objects with a chunk below REPLICAS intact copies (degraded), or with none "
            "left (lost: answered as damaged, never served), as the scrub last counted.",
            labels=["state"],
        )
        objects.add_metric(["degraded"], health.objects_degraded)
        objects.add_metric(["lost"], health.objects_lost)
        yield objects
        chunks = GaugeMetricFamily(
            "teleuploader_chunks_damaged",
            "Chunks below REPLICAS intact copies (degraded) or with none (lost).",
            labels=["state"],
        )
        chunks.add_metric(["degraded"], health.chunks_degraded)
        chunks.add_metric(["lost"], health.chunks_lost)
        yield chunks
        yield GaugeMetricFamily(
            "teleuploader_chunk_copies", "Chunk copies stored in Telegram.", value=health.copies
        )
        if health.oldest_check is not None:
            yield GaugeMetricFamily(
                "teleuploader_copies_oldest_check_timestamp_seconds",
                "The scrub's reach: when the copy checked longest ago was last checked (or, "
                "never checked, stored), Unix time; older than SCRUB_PERIOD_SECONDS means "
                "the scrub falls behind.",
                value=health.oldest_check.timestamp(),
            )


class ChatsCollector(Collector):
    def __init__(self, fill: ChatFill, left: Callable[[], int]) -> None:
        self._fill = fill
        self._left = left

    def collect(self) -> Iterator[Metric]:
        chats = GaugeMetricFamily(
            "teleuploader_chat_messages",
            "Messages in a storage chat: its newest message id the service has seen "
            "(every message ever posted there, by anyone, deleted or not). At "
            "teleuploader_chat_message_limit the chat takes no new writes.",
            labels=["chat"],
        )
        for chat_id, newest in sorted(self._fill.newest.items()):
            chats.add_metric([str(chat_id)], newest)
        yield chats
        yield GaugeMetricFamily(
            "teleuploader_chat_message_limit",
            "CHAT_MESSAGE_LIMIT: the messages a storage chat may hold before it takes no "
            "new writes (0: no limit).",
            value=self._fill.limit,
        )
        yield GaugeMetricFamily(
            "teleuploader_messages_left_in_channel",
            "Messages the service no longer needs and can no longer delete: posted more "
            "than 48 hours before their deletion came, or refused by Telegram. They stay "
            "in the storage chats for good (docs/trash.md). Every instance's, as the "
            "database counted them at the GC's last round.",
            value=self._left(),
        )


class JournalCollector(Collector):
    def __init__(self, status: Callable[[], JournalStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        yield GaugeMetricFamily(
            "teleuploader_journal_pending_rows",
            "Changes not yet shipped to the storage chats (journal rows), as of the last round.",
            value=status.pending_rows,
        )
        yield CounterMetricFamily(
            "teleuploader_journal_batches",
            "Journal batches this process shipped to the storage chats.",
            value=status.batches,
        )
        if status.last_batch_at is not None:
            yield GaugeMetricFamily(
                "teleuploader_journal_last_batch_timestamp_seconds",
                "When this process last shipped a journal batch (Unix time).",
                value=status.last_batch_at.timestamp(),
            )
        yield GaugeMetricFamily(
            "teleuploader_journal_failing",
            "1 while the journal's last round failed (logged as journal_round_failed).",
            value=1 if status.failing else 0,
        )
