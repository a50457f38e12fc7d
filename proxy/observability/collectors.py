# Strategy: nothing here runs on the request path. Per-request figures are plain ints and
# floats in dicts the Metrics object moves with no lock and no label handling (docs/history.md);
# they, and the state of live objects (the pool's sensors, the request log's queue, the
# purgatories, readiness, the partition table), become Prometheus families only when /metrics
# is scraped, so the hot path never updates a gauge. Purgatory families appear only once a
# purgatory is attached (no made-up zeros).
"""The families built at scrape time: per-API request series, and gauges read from live state."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from proxy.primitives.memory import MemoryPool

if TYPE_CHECKING:
    from proxy.observability.readiness import Readiness
    from proxy.observability.request_log import RequestLog
    from proxy.primitives.purgatory import Purgatory

__all__ = [
    "LATENCY_BUCKETS_S",
    "PREFIX",
    "ApiSeries",
    "KnownPartitions",
    "RequestCollector",
    "StateCollector",
]

PREFIX = "purgatory_proxy"


class KnownPartitions(Protocol):
    """What the metrics read of the held path's partition table (held/partition_state.py),
    named here so that observability does not import the held path."""

    @property
    def evicted(self) -> int: ...

    def __len__(self) -> int: ...


#: Latency buckets in seconds: sub-millisecond forwarding up to long-poll fetches (Kafka's
#: fetch.max.wait.ms is 500 ms by default; consumers often use seconds).
LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Histogram:
    """Bucket counts (not cumulative; the last is +Inf) and a sum, in seconds."""

    __slots__ = ("counts", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.sum_s = 0.0

    def observe(self, value_s: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "<=").
        self.counts[bisect_left(LATENCY_BUCKETS_S, value_s)] += 1
        self.sum_s += value_s

    def cumulative(self) -> list[tuple[str, float]]:
        buckets: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip(_BOUND_LABELS, self.counts, strict=True):
            total += count
            buckets.append((bound, total))
        return buckets


#: ``le`` labels as Prometheus writes them (repr of a float: "0.0005", "1.0", "30.0").
_BOUND_LABELS = (*(repr(float(bound)) for bound in LATENCY_BUCKETS_S), "+Inf")


class ApiSeries:
    """One API's per-request figures."""

    __slots__ = ("bytes_in", "bytes_out", "latency", "muted", "muted_s", "upstream")

    def __init__(self) -> None:
        self.latency = Histogram()
        self.upstream = Histogram()
        self.bytes_in = 0
        self.bytes_out = 0
        self.muted_s = 0.0
        self.muted = 0


class RequestCollector(Collector):
    """The per-request series as Prometheus families, built at scrape time.

    Task-safety: reads the dicts the request path writes; both run on the trio thread (the
    HTTP endpoint scrapes from trio), and the dicts are copied before iterating anyway.
    """

    def __init__(
        self,
        apis: dict[str, ApiSeries],
        outcomes: dict[tuple[str, str], int],
        errors: dict[tuple[str, int], int],
    ) -> None:
        self.apis, self.outcomes, self.errors = apis, outcomes, errors

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        apis = sorted(self.apis.items())
        requests = CounterMetricFamily(
            f"{PREFIX}_requests", "Client requests finished, by API and outcome.",
            labels=["api", "outcome"],
        )  # fmt: skip
        for (api, outcome), count in sorted(self.outcomes.items()):
            requests.add_metric([api, outcome], count)
        yield requests
        errors = CounterMetricFamily(
            f"{PREFIX}_request_errors",
            "Responses with a non-zero top-level error code, by API and code "
            "(only APIs whose error code the proxy can read without decoding).",
            labels=["api", "error_code"],
        )
        for (api, code), count in sorted(self.errors.items()):
            errors.add_metric([api, str(code)], count)
        yield errors
        for name, doc, attribute in (
            ("request_latency_seconds",
             "Client-observed latency: request size read to response written.", "latency"),
            ("upstream_latency_seconds",
             "Upstream latency: request written to the broker to its response read.",
             "upstream"),
        ):  # fmt: skip
            family = HistogramMetricFamily(f"{PREFIX}_{name}", doc, labels=["api"])
            for api, series in apis:
                histogram: Histogram = getattr(series, attribute)
                family.add_metric([api], histogram.cumulative(), histogram.sum_s)
            yield family
        for name, doc, attribute in (
            ("request_bytes", "Request bytes read from clients (size prefix included).",
             "bytes_in"),
            ("response_bytes", "Response bytes written to clients.", "bytes_out"),
            ("request_muted_seconds",
             "Time requests waited for pool memory before their body was read.", "muted_s"),
            ("requests_muted", "Requests that had to wait for pool memory.", "muted"),
        ):  # fmt: skip
            counter = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["api"])
            for api, series in apis:
                counter.add_metric([api], getattr(series, attribute))
            yield counter


class StateCollector(Collector):
    """Gauges and counters read from live objects when /metrics is scraped."""

    def __init__(self, pool: MemoryPool) -> None:
        self.pool = pool
        self.request_log: RequestLog | None = None
        self.purgatories: dict[str, Purgatory] = {}
        self.partition_states: KnownPartitions | None = None
        self.readiness: Readiness | None = None

    def describe(self) -> list[Metric]:
        return []  # families vary with what is attached; auto-describe would call collect

    def collect(self) -> Iterator[Metric]:
        if self.readiness is not None:
            yield from _readiness_families(self.readiness)
        stats = self.pool.statistics()
        yield _gauge(
            "memory_pool_available_bytes",
            "KIP-72 MemoryPoolAvailable: bytes that may still be allocated "
            "(negative when over-allocated).",
            stats.available_bytes,
        )
        yield _gauge(
            "memory_pool_used_bytes",
            "KIP-72 MemoryPoolUsed: bytes allocated and not yet released.",
            stats.used_bytes,
        )
        yield _gauge(
            "memory_pool_in_processing_bytes",
            "Bytes of requests forwarded and not yet answered, counted in the pool.",
            stats.in_processing_bytes,
        )
        yield _gauge(
            "memory_pool_limit_bytes", "The pool's limit (-1: disabled).", stats.limit_bytes
        )
        yield _gauge(
            "memory_pool_avg_depleted_ratio",
            "KIP-72 MemoryPoolAvgDepletedPercent as a 0-1 ratio: share of the last "
            f"{stats.depleted_window_s:g} s the pool was depleted.",
            stats.depleted_percent / 100,
        )
        yield _counter(
            "memory_pool_depleted_seconds",
            "Total time the pool was depleted.",
            stats.depleted_time_total_s,
        )
        yield _gauge(
            "memory_pool_muted_connections",
            "Connections waiting for pool memory now.",
            stats.muted_now,
        )
        yield _counter(
            "memory_pool_mutes", "Times a connection had to wait for memory.", stats.mutes_total
        )
        if self.request_log is not None:
            rlog = self.request_log
            yield _counter(
                "request_log_written_lines", "Request log lines written.", rlog.written_lines
            )
            yield _counter(
                "request_log_dropped_lines",
                "Request log lines dropped: queue full (slow disk) or write failed.",
                rlog.dropped_lines,
            )
            yield _gauge(
                "request_log_queued_lines",
                "Request log lines waiting for the writer.",
                rlog.queued_lines,
            )
            yield _counter("request_log_rotations", "Request log rotations.", rlog.rotations)
        if self.purgatories:
            yield from self._purgatory_families()
        states = self.partition_states
        if states is not None:
            yield _gauge(
                "partition_states",
                "Partitions whose log end the held fetches know now (bounded: those nothing "
                "names are forgotten).",
                len(states),
            )
            yield _counter(
                "partition_state_evictions",
                "Partitions forgotten because no held fetch, fetch session or watcher named them.",
                states.evicted,
            )

    def _purgatory_families(self) -> Iterator[Metric]:
        names = {
            "pending": ("purgatory_pending", "Operations held now.", GaugeMetricFamily),
            "watched": ("purgatory_watched", "Watcher-list entries now.", GaugeMetricFamily),
            "completed": (
                "purgatory_completions",
                "Operations completed by their condition.",
                CounterMetricFamily,
            ),
            "expired": (
                "purgatory_expirations",
                "Operations completed by their deadline.",
                CounterMetricFamily,
            ),
            "purges": ("purgatory_purges", "Purges of watcher lists.", CounterMetricFamily),
        }
        for field, (name, doc, family_type) in names.items():
            family = family_type(f"{PREFIX}_{name}", doc, labels=["operation"])
            for operation, purgatory in sorted(self.purgatories.items()):
                family.add_metric([operation], getattr(purgatory.statistics(), field))
            yield family
        lag = GaugeMetricFamily(
            f"{PREFIX}_purgatory_clock_lag_seconds",
            "How late the purgatory's clock task last woke for a due bucket.",
            labels=["operation"],
        )
        for operation, purgatory in sorted(self.purgatories.items()):
            lag.add_metric([operation], purgatory.clock_lag_s)
        yield lag
        fetch = self.purgatories.get("fetch")
        if fetch is not None:
            yield _gauge(
                "fanin_held_fetches", "Client fetches held in the proxy now.", fetch.pending
            )


def _readiness_families(readiness: Readiness) -> Iterator[Metric]:
    causes = readiness.causes()
    yield _gauge(
        "ready", "1 when /readyz answers 200, 0 while any cause keeps the proxy unready.",
        0 if causes else 1,
    )  # fmt: skip
    not_ready = GaugeMetricFamily(
        f"{PREFIX}_not_ready",
        "1 for each cause keeping the proxy unready now (listeners, metadata, upstream_auth, "
        "broker, shutdown); /readyz says why in words.",
        labels=["cause"],
    )
    for cause in causes:
        not_ready.add_metric([cause], 1)
    yield not_ready


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)
