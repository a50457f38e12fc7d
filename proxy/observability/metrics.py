# Strategy: one prometheus-client registry per Proxy (not the library's global one, so tests
# and embedders can run several proxies in one process). Per-request series (requests by API and
# outcome, errors by code, latencies, bytes, muted time) are plain numbers that ``observe``
# moves and proxy/observability/collectors.py turns into families when scraped; connection and
# upstream counters are prometheus-client's own, moved once per connection; state is read by a
# collector at scrape time. Counters that alerts watch have every label value from the start
# at 0 (increase() cannot see a series appear); no ``_created`` series (a timestamp nobody
# graphs).
"""Prometheus metrics of one proxy: per-API request series, connections, pool, purgatory."""

from __future__ import annotations

from importlib.metadata import version
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from proxy.errors import ConnectionClosed
from proxy.observability.collectors import (
    PREFIX,
    ApiSeries,
    KnownPartitions,
    RequestCollector,
    StateCollector,
)
from proxy.primitives.memory import MemoryPool

if TYPE_CHECKING:
    from proxy.observability.readiness import Readiness
    from proxy.observability.request_log import RequestLog, RequestRecord
    from proxy.primitives.purgatory import Purgatory

__all__ = ["REFUSAL_REASONS", "Metrics"]


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
            "client fetch forwarded at once), poll (a busy consumer's fetch forwarded as its own "
            "long-poll), refetch (after a wake-up), watcher (long-polls).",
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
        self._state = StateCollector(pool)
        r.register(self._state)
        self._apis: dict[str, ApiSeries] = {}
        self._outcomes: dict[tuple[str, str], int] = {}
        self._errors: dict[tuple[str, int], int] = {}
        r.register(RequestCollector(self._apis, self._outcomes, self._errors))

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
            series = self._apis[api] = ApiSeries()
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
