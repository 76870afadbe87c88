"""Prometheus metrics (prometheus-client), one registry per running service.

Counters and histograms are updated where things happen (HTTP middleware,
dispatcher attempts, upload and download byte counts, dropped downloads);
per-bot gauges, the GC backlog, database pool usage and the download budget are
read from the live objects at scrape time.
Bots are labelled by their numeric id, never by token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.store.state_metrics import (
    ChatsCollector,
    DurabilityCollector,
    FlushLagCollector,
    JournalCollector,
    UploadBudgetCollector,
    UploadBudgetUse,
)
from app.store.upkeep_metrics import SnapshotStatus, UpkeepCollector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from app.db.copies import Health
    from app.store.download_budget import BudgetStatus
    from app.store.flush_lag import FlushLag
    from app.store.journal import JournalStatus
    from app.telegram.chat_fill import ChatFill
    from app.telegram.dispatcher import BotStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300)
# Time to first byte starts lower: a small GET answers in milliseconds.
_FIRST_BYTE_BUCKETS = (0.005, 0.01, 0.025, *_LATENCY_BUCKETS)

#: The API a request came in through (`native`, `tus`, `s3`), set by the HTTP
#: layer for each request: the object bytes it moves are counted under it.
REQUEST_API: ContextVar[str] = ContextVar("teleuploader_request_api", default="other")

#: The methods the APIs serve (HTTP, WebDAV); any other is labelled OTHER. A
#: method is any token a client sends, and each new one was a label set kept
#: for good, in the registry and in the children's cache (issue 55).
KNOWN_METHODS = frozenset(
    {
        *("GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH"),
        *("PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"),
    }
)
OTHER_METHOD = "OTHER"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.http_requests = Counter(
            "teleuploader_http_requests",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        # (route, method, status) -> its children of the two above; routes are
        # templates, methods KNOWN_METHODS and statuses few: it stays small.
        self._request_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self.http_duration = Histogram(
            "teleuploader_http_request_duration_seconds",
            "Time from request start to the end of the response body.",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.http_first_byte = Histogram(
            "teleuploader_http_first_byte_seconds",
            "Time from the start of a GET request to the first byte of its response body.",
            ["route"],
            buckets=_FIRST_BYTE_BUCKETS,
            registry=self.registry,
        )
        self._first_byte_children: dict[str, Histogram] = {}
        self.bytes_uploaded = Counter(
            "teleuploader_uploaded_bytes",
            "Bytes of object content received from clients (stored or not), by API.",
            ["api"],
            registry=self.registry,
        )
        self.bytes_downloaded = Counter(
            "teleuploader_downloaded_bytes",
            "Bytes of object content sent to clients, by API.",
            ["api"],
            registry=self.registry,
        )
        # API -> its child of each of the two above (a handful of APIs).
        self._uploaded: dict[str, Counter] = {}
        self._downloaded: dict[str, Counter] = {}
        self.downloads_dropped = Counter(
            "teleuploader_downloads_dropped",
            "Downloads ended because they stalled: client_stalled (the client took "
            "nothing) or telegram_stalled (no byte came: Telegram, or no free connection).",
            ["reason"],
            registry=self.registry,
        )
        self.telegram_call_duration = Histogram(
            "teleuploader_telegram_call_duration_seconds",
            "Duration of one Telegram Bot API call (one attempt), by bot, method and outcome.",
            ["bot_id", "method", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

        self.background_rounds = Counter(
            "teleuploader_background_rounds",
            "Rounds of the background loops (gc, chat_fill, instance_heartbeat, bot_lease, "
            "shared_paths, tus_cleanup, bot_recheck, throughput_sample, snapshot, journal), "
            "by outcome: "
            "ok, or failed (logged as <loop>_round_failed).",
            ["loop", "outcome"],
            registry=self.registry,
        )
        self.background_round_duration = Histogram(
            "teleuploader_background_round_duration_seconds",
            "Duration of one round of a background loop.",
            ["loop"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.gc_undeletable = Counter(
            "teleuploader_gc_undeletable",
            "Telegram messages this process left in the channel for good: posted more "
            "than 48 hours before their deletion came (no call made; logged as "
            "gc_left_in_channel), or Telegram refused for good (gc_message_not_deletable, "
            "gc_gave_up_undeletable). teleuploader_messages_left_in_channel counts them all.",
            registry=self.registry,
        )
        self.abandoned_sends = Counter(
            "teleuploader_abandoned_sends",
            "Uploads to Telegram given up on a timeout while Telegram may still post them: "
            "each may leave a message no chunk row knows of (an orphan).",
            ["bot_id"],
            registry=self.registry,
        )

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One HTTP request. The labelled children are looked up once per
        label set and kept: `labels()` validates and locks on every call,
        about 2 % of a small HEAD's CPU for the two of them."""
        if method not in KNOWN_METHODS:
            method = OTHER_METHOD
        key = (route, method, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children[key] = (
                self.http_requests.labels(route, method, str(status)),
                self.http_duration.labels(route, method),
            )
        count, duration = children
        count.inc()
        duration.observe(seconds)

    def observe_first_byte(self, route: str, seconds: float) -> None:
        """A GET request's time to the first byte of its body."""
        child = self._first_byte_children.get(route)
        if child is None:
            child = self._first_byte_children[route] = self.http_first_byte.labels(route)
        child.observe(seconds)

    def count_uploaded(self, size: int) -> None:
        """Object bytes received, under the API of the request at hand."""
        api = REQUEST_API.get()
        child = self._uploaded.get(api)
        if child is None:
            child = self._uploaded[api] = self.bytes_uploaded.labels(api)
        child.inc(size)

    def count_downloaded(self, size: int) -> None:
        """Object bytes sent, under the API of the request at hand."""
        api = REQUEST_API.get()
        child = self._downloaded.get(api)
        if child is None:
            child = self._downloaded[api] = self.bytes_downloaded.labels(api)
        child.inc(size)

    def byte_totals(self) -> tuple[float, float]:
        """Object bytes (uploaded, downloaded) so far, every API together."""
        return _total(self.bytes_uploaded), _total(self.bytes_downloaded)

    def observe_round(self, loop: str, outcome: str, seconds: float) -> None:
        self.background_rounds.labels(loop, outcome).inc()
        self.background_round_duration.labels(loop).observe(seconds)

    def observe_abandoned_send(self, bot_id: int) -> None:
        self.abandoned_sends.labels(str(bot_id)).inc()

    def observe_attempt(self, bot_id: int, method: str, outcome: str, seconds: float) -> None:
        self.telegram_call_duration.labels(str(bot_id), method, outcome).observe(seconds)

    def watch(
        self,
        *,
        bots: Callable[[], list[BotStatus]],
        gc_backlog: Callable[[], int],
        db_pool: Callable[[], tuple[int, int]],
        downloads: Callable[[], BudgetStatus],
    ) -> None:
        """Read live state at scrape time: per-bot status, GC backlog, DB pool,
        download budget."""
        self.registry.register(_LiveCollector(bots, gc_backlog, db_pool, downloads))

    def watch_durability(
        self, health: Callable[[], Health | None], repaired: Callable[[], int]
    ) -> None:
        """Read what the scrub last counted, and its repairs, at scrape time."""
        self.registry.register(DurabilityCollector(health, repaired))

    def watch_chats(self, fill: ChatFill, left: Callable[[], int]) -> None:
        """Read each storage chat's fill, and the messages left in the chats
        for good (as the GC last counted them), at scrape time."""
        self.registry.register(ChatsCollector(fill, left))

    def watch_journal(self, status: Callable[[], JournalStatus]) -> None:
        """Read the journal's last round at scrape time."""
        self.registry.register(JournalCollector(status))

    def watch_uploads(self, budget: Callable[[], UploadBudgetUse]) -> None:
        """Read the upload buffer budget and the spool at scrape time."""
        self.registry.register(UploadBudgetCollector(budget))

    def watch_flush_lag(self, lag: Callable[[], FlushLag], alert: float) -> None:
        """Read the spool's flush lag, as last measured, at scrape time, and
        the lag past which /ready says degraded (FLUSH_LAG_ALERT)."""
        self.registry.register(FlushLagCollector(lag, alert))

    def watch_upkeep(
        self, snapshots: Callable[[], SnapshotStatus], fleet: Callable[[], int]
    ) -> None:
        """Read the snapshots' state and the fleet's size at scrape time."""
        self.registry.register(UpkeepCollector(snapshots, fleet))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _total(counter: Counter) -> float:
    return sum(
        sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


class _LiveCollector(Collector):
    def __init__(
        self,
        bots: Callable[[], list[BotStatus]],
        gc_backlog: Callable[[], int],
        db_pool: Callable[[], tuple[int, int]],
        downloads: Callable[[], BudgetStatus],
    ) -> None:
        self._bots = bots
        self._gc_backlog = gc_backlog
        self._db_pool = db_pool
        self._downloads = downloads

    def collect(self) -> Iterator[Metric]:
        statuses = self._bots()
        gauges = {
            "queue": GaugeMetricFamily(
                "teleuploader_bot_queue_depth", "Jobs waiting in a bot's queue.", labels=["bot_id"]
            ),
            "in_flight": GaugeMetricFamily(
                "teleuploader_bot_in_flight",
                "Telegram calls running on a bot (0 or 1).",
                labels=["bot_id"],
            ),
            "cooldown": GaugeMetricFamily(
                "teleuploader_bot_cooldown_seconds",
                "Seconds left of a bot's cooldown after a 429.",
                labels=["bot_id"],
            ),
            "usable": GaugeMetricFamily(
                "teleuploader_bot_usable",
                "1 while a bot is in the pool, 0 once removed.",
                labels=["bot_id"],
            ),
        }
        sends = CounterMetricFamily(
            "teleuploader_bot_sends", "Documents stored by a bot.", labels=["bot_id"]
        )
        sent_bytes = CounterMetricFamily(
            "teleuploader_bot_sent_bytes", "Bytes stored by a bot.", labels=["bot_id"]
        )
        limited = CounterMetricFamily(
            "teleuploader_bot_rate_limited", "429 answers a bot received.", labels=["bot_id"]
        )
        errors = CounterMetricFamily(
            "teleuploader_bot_errors",
            "Failed Telegram calls by kind (rate_limited, abandoned: timed out while Telegram "
            "may still be working, transient, permanent, chat_refused: out of one storage "
            "chat, bot_unusable: out of the pool).",
            labels=["bot_id", "kind"],
        )
        for status in statuses:
            bot = str(status.bot_id)
            gauges["queue"].add_metric([bot], status.queued)
            gauges["in_flight"].add_metric([bot], 1 if status.running else 0)
            gauges["cooldown"].add_metric([bot], status.cooling_down_for)
            gauges["usable"].add_metric([bot], 1 if status.usable else 0)
            sends.add_metric([bot], status.sends)
            sent_bytes.add_metric([bot], status.bytes_sent)
            limited.add_metric([bot], status.rate_limited)
            for kind, count in status.errors.items():
                errors.add_metric([bot, kind], count)
        yield from gauges.values()
        yield from (sends, sent_bytes, limited, errors)
        yield GaugeMetricFamily(
            "teleuploader_gc_backlog",
            "Telegram messages waiting to be deleted (GC ledger).",
            value=self._gc_backlog(),
        )
        in_use, size = self._db_pool()
        pool = GaugeMetricFamily(
            "teleuploader_db_pool_connections", "Database pool connections.", labels=["state"]
        )
        pool.add_metric(["in_use"], in_use)
        pool.add_metric(["size"], size)
        yield pool
        yield from _download_gauges(self._downloads())


def _download_gauges(budget: BudgetStatus) -> Iterator[Metric]:
    buffer = GaugeMetricFamily(
        "teleuploader_download_buffer_bytes",
        "Bytes fetched from Telegram for downloads and not yet sent, and the limit.",
        labels=["state"],
    )
    buffer.add_metric(["in_use"], budget.bytes_in_use)
    buffer.add_metric(["limit"], budget.buffer_bytes)
    yield buffer
    connections = GaugeMetricFamily(
        "teleuploader_download_connections",
        "Telegram file downloads open, and the limit.",
        labels=["state"],
    )
    connections.add_metric(["in_use"], budget.connections_in_use)
    connections.add_metric(["limit"], budget.connections)
    yield connections
    yield GaugeMetricFamily(
        "teleuploader_downloads_active", "Downloads being streamed.", value=budget.readers
    )
    yield GaugeMetricFamily(
        "teleuploader_downloads_waiting",
        "Downloads whose client waits for a Telegram connection to be free.",
        value=budget.waiting_readers,
    )
