# Strategy: one prometheus-client registry per Proxy (not the library's global one, so tests
# and embedders can run several proxies in one process). Per-request series (requests by API and
# outcome, errors by code, latencies, bytes, muted time) are plain ints and floats that
# ``observe`` moves with no lock and no label handling (docs/history.md), made into Prometheus
# families only when scraped; connection and upstream counters are prometheus-client's own,
# moved once per connection; state (the pool's sensors, the request log's queue, the
# purgatories, readiness) is read by a collector at scrape time, so the hot path never updates
# a gauge. Counters that alerts watch have every label value from the start at 0 (increase()
# cannot see a series appear); no ``_created`` series (a timestamp nobody graphs); purgatory
# families only once a purgatory is attached (no made-up zeros).
"""Prometheus metrics of one proxy: per-API request series, connections, pool, purgatory."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from importlib.metadata import version
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from proxy.errors import ConnectionClosed
from proxy.primitives.memory import MemoryPool

if TYPE_CHECKING:
    from proxy.observability.readiness import Readiness
    from proxy.observability.request_log import RequestLog, RequestRecord
    from proxy.primitives.purgatory import Purgatory

__all__ = ["LATENCY_BUCKETS_S", "REFUSAL_REASONS", "Metrics"]

PREFIX = "purgatory_proxy"


class KnownPartitions(Protocol):
    """What the metrics read of the held path's partition table (held/partition_state.py),
    named here so that observability does not import the held path."""

    @property
    def evicted(self) -> int: ...

    def __len__(self) -> int: ...


#: Every reason a connection is refused at accept (proxy/connection/admission.py and the
#: descriptor budget in listeners.py): the labels of connections_refused_total.
REFUSAL_REASONS = (
    "max_connections",
    "descriptors",
    "max_connections_per_ip",
    "creation_rate",
    "creation_rate_per_ip",
)
_RESULTS = ("ok", "failed")


def _close_reasons() -> set[str]:
    """Every label connections_closed_total can carry: each ConnectionClosed's kind (the tree
    in proxy/errors.py), and shutdown (a connection ended by the drain)."""
    kinds = {ConnectionClosed.kind, "shutdown"}
    pending = [ConnectionClosed]
    while pending:
        for subclass in pending.pop().__subclasses__():
            kinds.add(subclass.kind)
            pending.append(subclass)
    return kinds


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


class Metrics:
    """Every series the proxy exports, and the few calls that move them.

    Args:
        pool: the process's memory pool; its sensors are read at scrape time.

    Task-safety: ``observe`` and the connection events are called from trio tasks, and the
    scrape runs in trio too (proxy.observability.http), so the plain per-request numbers need no
    lock.
    """

    def __init__(self, pool: MemoryPool) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in the library
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Info(f"{PREFIX}_build", "The running build.", registry=r).info(
            {"version": version("purgatory-proxy")}
        )
        self.connections_accepted = Counter(
            f"{PREFIX}_connections_accepted",
            "Client connections accepted, by listener.",
            ["listener"],
            registry=r,
        )
        self.accept_failures = Counter(
            f"{PREFIX}_accept_failures",
            "accept() failures for lack of descriptors or memory, client and HTTP listeners "
            "(the listener retries).",
            registry=r,
        )
        self.connections_refused = Counter(
            f"{PREFIX}_connections_refused",
            "Client connections closed as they were accepted, by the limit they hit "
            "(max_connections, max_connections_per_ip, creation_rate, creation_rate_per_ip).",
            ["reason"],
            registry=r,
        )
        self.connections_open = Gauge(
            f"{PREFIX}_connections_open", "Client connections open now.", registry=r
        )
        self.connections_closed = Counter(
            f"{PREFIX}_connections_closed",
            "Client connections closed, by reason.",
            ["reason"],
            registry=r,
        )
        self.upstream_open = Gauge(
            f"{PREFIX}_upstream_connections_open",
            "Connections to upstream brokers open now.",
            registry=r,
        )
        self.upstream_connects = Counter(
            f"{PREFIX}_upstream_connects",
            "Upstream connection attempts (one per client connection), by result.",
            ["result"],
            registry=r,
        )
        self.metadata_refreshes = Counter(
            f"{PREFIX}_metadata_refreshes",
            "Upstream metadata fetches by the refresher; a failed streak retries with backoff.",
            ["result"],
            registry=r,
        )
        self.upstream_fetches = Counter(
            f"{PREFIX}_upstream_fetches",
            "Fetches the proxy sent upstream for held client fetches, by kind: immediate (a "
            "client fetch forwarded at once), refetch (after a wake-up), watcher (long-polls).",
            ["kind"],
            registry=r,
        )
        self.read_aheads = Counter(
            f"{PREFIX}_read_aheads",
            "Read-aheads for active consumers (proxy/held/fetch/ahead.py), by outcome: "
            "sent (an upstream fetch sent before the client asked), used (it was the client's "
            "next fetch's first look; also counted as upstream_fetches immediate), discarded "
            "(the next fetch asked for something else, or the connection closed), expired (not "
            "claimed within the client's max wait, at least 500 ms).",
            ["outcome"],
            registry=r,
        )
        self.tls_handshake_failures = Counter(
            f"{PREFIX}_tls_handshake_failures",
            "Client TLS handshakes that failed (proxy.security.tls.ServerTls), by listener and "
            "reason "
            "class: timeout, not_tls, client_certificate, closed, other.",
            ["listener", "reason"],
            registry=r,
        )
        self.tls_reloads = Counter(
            f"{PREFIX}_tls_reloads",
            "TLS file reloads on SIGHUP (proxy/reload.py), by side (listeners, upstream) and "
            "result: ok, or failed (the previous files stay in use; one log line says why).",
            ["side", "result"],
            registry=r,
        )
        for reason in REFUSAL_REASONS:  # at 0 from the start: see the header
            self.connections_refused.labels(reason)
        for kind in _close_reasons():
            self.connections_closed.labels(kind)
        for result in _RESULTS:
            self.upstream_connects.labels(result)
            self.metadata_refreshes.labels(result)
        self._state = _StateCollector(pool)
        r.register(self._state)
        self._apis: dict[str, _ApiSeries] = {}
        self._outcomes: dict[tuple[str, str], int] = {}
        self._errors: dict[tuple[str, int], int] = {}
        r.register(_RequestCollector(self._apis, self._outcomes, self._errors))

    # -- attaching state that is read at scrape time -----------------------------------

    def attach_request_log(self, request_log: RequestLog) -> None:
        self._state.request_log = request_log

    def attach_purgatory(self, operation: str, purgatory: Purgatory) -> None:
        """Export ``purgatory``'s counters with label ``operation`` ("fetch", "produce")."""
        self._state.purgatories[operation] = purgatory

    def attach_readiness(self, readiness: Readiness) -> None:
        """Export ``readiness`` (what /readyz answers) as ``ready`` and ``not_ready{cause}``."""
        self._state.readiness = readiness

    def attach_partition_states(self, states: KnownPartitions) -> None:
        """Export the size of the held fetches' partition-state table and its evictions."""
        self._state.partition_states = states

    # -- events ------------------------------------------------------------------------

    def observe(self, record: RequestRecord) -> None:
        """Account one finished request (the hot path: a few dict hits and additions)."""
        api = record.api
        series = self._apis.get(api)
        if series is None:
            series = self._apis[api] = _ApiSeries()
        key = (api, record.outcome)
        outcomes = self._outcomes
        outcomes[key] = outcomes.get(key, 0) + 1
        series.latency.observe(record.latency_ms / 1000)
        if record.outcome != "no_response" and record.broker != "local":
            series.upstream.observe(record.upstream_ms / 1000)
        series.bytes_in += record.request_bytes
        series.bytes_out += record.response_bytes
        if record.muted_ms:
            series.muted_s += record.muted_ms / 1000
            series.muted += 1
        if record.error_code:
            errors, error_key = self._errors, (api, record.error_code)
            errors[error_key] = errors.get(error_key, 0) + 1


class _Histogram:
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


class _ApiSeries:
    """One API's per-request figures."""

    __slots__ = ("bytes_in", "bytes_out", "latency", "muted", "muted_s", "upstream")

    def __init__(self) -> None:
        self.latency = _Histogram()
        self.upstream = _Histogram()
        self.bytes_in = 0
        self.bytes_out = 0
        self.muted_s = 0.0
        self.muted = 0


class _RequestCollector(Collector):
    """The per-request series as Prometheus families, built at scrape time.

    Task-safety: reads the dicts the request path writes; both run on the trio thread (the
    HTTP endpoint scrapes from trio), and the dicts are copied before iterating anyway.
    """

    def __init__(
        self,
        apis: dict[str, _ApiSeries],
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
                histogram: _Histogram = getattr(series, attribute)
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


class _StateCollector(Collector):
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
