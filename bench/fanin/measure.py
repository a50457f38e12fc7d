# Strategy: one measurement = one route (direct or proxy) at one N, in one trio.run:
#
#   1. start N consumers (bench/fanin/consumer.py) at the topic's end, connecting at most
#      CONNECT_CONCURRENCY at a time; once all have connected (or failed), let them fetch;
#      wait until each has had its first Fetch answer (or has failed), then let the fleet
#      settle for a moment.
#      Through the proxy, the settle lasts at least `quiet_s`: the proxy's
#      connections.upstream_idle_timeout_ms plus a margin. A consumer's warm-up (ApiVersions)
#      is forwarded on the client connection's own upstream connection, which the proxy closes
#      only after that long unused; the window then sees idle consumers as they stay, each
#      fetching on the proxy's shared channels.
#   2. window: for `seconds`, the topic stays idle. Before and after, read the relays' request
#      counts, the CPU seconds of the broker, the relays, the proxy and this process, and the
#      consumers' answer count; sample the proxy's RSS every second and scrape its /metrics
#      halfway, and count the proxy's open descriptors (/proc/PID/fd) there. The upstream
#      Fetch rate is the relays' Fetch count difference / window.
#   3. probes: a few times, at a random point of the consumers' 500 ms poll cycle, produce one
#      record (acks=1) along the same route -- through the proxy's leader port, or straight
#      to the relay -- and time, per consumer, from just before the Produce is sent until the
#      consumer's first answer that holds the record. Every consumer's delivery latency of
#      every probe goes into one list; p50/p99 are read from it.
#
# A consumer may hold the probe's record before the producer holds its acknowledgement, so
# the probe keeps what consumers report until the offset is known (bench/fanin/consumer.Probe).
# A Produce answered with an error (REQUEST_TIMED_OUT) may still have been written; the probe
# then assumes the next offset and learns the truth from where the consumers move to.
#
# What the measurement runs against is a `Target`: where each route's consumers connect, the
# PIDs whose CPU is read, the forwarder whose RSS and descriptors are read, and who counts the
# requests the broker is asked (bench/fanin/stack.Stack: Tansu behind counting relays;
# bench/peers/fanin.py: Apache Kafka, counted by its own meters).
"""One fan-in measurement: N idle consumers on one route, counted, timed and weighed."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Protocol

import trio

from bench.fanin.client import KafkaError, ProduceError, Producer, TopicRoute, lookup
from bench.fanin.consumer import FetchSettings, Fleet, Probe, consume
from bench.fanin.stack import cpu_seconds, open_descriptors, rss_bytes
from wire.errors import WireError

__all__ = ["CONNECT_CONCURRENCY", "Measurement", "Plan", "Target", "measure"]

#: Consumers connecting (TCP + ApiVersions) at once: a ramp, not a SYN flood.
CONNECT_CONCURRENCY = 200
#: How long a probe waits for every consumer to have its record.
PROBE_TIMEOUT_S = 10.0
#: Pause between probes, so each starts from a fleet that is polling again.
PROBE_GAP_S = 0.3
_RSS_SAMPLE_S = 1.0
#: What a broken or refused connection raises here (ProduceError is caught before these).
_CONNECTION_ERRORS = (OSError, trio.BrokenResourceError, KafkaError, WireError)


class Target(Protocol):
    """The processes one measurement runs against (calls may block: run in a thread)."""

    @property
    def topic(self) -> str:
        """The idle topic the consumers poll (partition 0)."""
        ...

    @property
    def forwarder_pid(self) -> int | None:
        """The forwarder whose RSS and descriptors are read (None: nothing forwards)."""
        ...

    def entry(self, route: str) -> tuple[str, int]:
        """Where ``route``'s consumers and producer ask for metadata (host, port)."""
        ...

    def pids(self) -> dict[str, int]:
        """Name -> PID of every process whose CPU the measurement reads ("broker", "proxy",
        "consumers", ...)."""
        ...

    def upstream_counts(self) -> dict[str, int]:
        """Requests the broker completed so far, by API name ("Fetch", ...)."""
        ...

    def scrape(self) -> dict[str, float]:
        """The forwarder's /metrics samples now (empty when it serves none)."""
        ...


@dataclass(frozen=True)
class Plan:
    """What one measurement does."""

    route: str  # "direct" or "proxy"
    n: int
    seconds: float
    probes: int
    settle_s: float
    #: Records already in the topic: consumers start here and the next probe lands here.
    start_offset: int
    settings: FetchSettings = field(default_factory=FetchSettings)
    #: The least settle time (the proxy's upstream idle timeout and a margin; 0 direct).
    quiet_s: float = 0.0

    @property
    def setup_timeout_s(self) -> float:
        # At N = 10,000 on 2 shared cores the direct route's consumers connect while the
        # ones already up poll at 2N/s: about 130 s was not enough for all of them.
        return 30.0 + self.n / 40


@dataclass
class Measurement:
    """Everything one measurement found (rates per second of the window)."""

    route: str
    n: int
    up: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    window_s: float = 0.0
    setup_s: float = 0.0
    upstream_fetch_per_s: float = 0.0
    upstream_other_per_s: float = 0.0
    answers_per_s: float = 0.0
    fetch_versions: dict[int, int] = field(default_factory=dict)
    sessions: int = 0
    full_requests: int = 0
    incremental_requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    cpu_percent: dict[str, float] = field(default_factory=dict)
    proxy_rss_idle_bytes: int = 0
    proxy_rss_held_bytes: int = 0
    #: Descriptors the proxy held halfway through the window, and before consumers came.
    proxy_descriptors: int = 0
    proxy_descriptors_idle: int = 0
    settle_s: float = 0.0
    #: Until every consumer had connected (TCP + ApiVersions), before any fetched.
    connect_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    #: The proxy's held fetches, sampled with its RSS (once a second) through the window.
    held_samples: list[float] = field(default_factory=list)
    metrics_delta: dict[str, float] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    ack_ms: list[float] = field(default_factory=list)
    missed: int = 0
    #: Produce error code -> probes answered with it.
    produce_errors: dict[int, int] = field(default_factory=dict)
    records_produced: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def poll_cycle_ms(self) -> float | None:
        """Mean time from one Fetch to the next per consumer (500 ms + overheads if idle)."""
        return 1000 * self.up / self.answers_per_s if self.answers_per_s else None

    @property
    def proxy_rss_per_held_bytes(self) -> float:
        if not self.up:
            return 0.0
        return (self.proxy_rss_held_bytes - self.proxy_rss_idle_bytes) / self.up

    def latency_percentile_ms(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


_WATCHED_METRICS = (
    "purgatory_proxy_purgatory_pending",
    "purgatory_proxy_purgatory_expirations_total",
    "purgatory_proxy_purgatory_completions_total",
    "purgatory_proxy_upstream_fetches_total",
    "purgatory_proxy_memory_pool_used_bytes",
    "purgatory_proxy_connections",
    "purgatory_proxy_upstream_connections_open",
)


_HELD_FETCHES = 'purgatory_proxy_purgatory_pending{operation="fetch"}'


def _watched(samples: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in samples.items() if k.startswith(_WATCHED_METRICS)}


def _rss_bytes(pid: int | None) -> int:
    return 0 if pid is None else rss_bytes(pid)


async def measure(stack: Target, plan: Plan) -> Measurement:
    """Run ``plan`` against ``stack`` (see the module comment)."""
    result = Measurement(plan.route, plan.n)
    try:
        # Where the consumers and the producer connect: the partition's leader, as named.
        route = await lookup(*stack.entry(plan.route), stack.topic)
    except _CONNECTION_ERRORS as exc:
        result.notes.append(f"metadata lookup failed: {exc!r}")
        return result
    pids = stack.pids()
    proxy_pid = stack.forwarder_pid
    fleet = Fleet(plan.n, trio.CapacityLimiter(CONNECT_CONCURRENCY))
    result.proxy_rss_idle_bytes = _rss_bytes(proxy_pid)
    result.proxy_descriptors_idle = 0 if proxy_pid is None else open_descriptors(proxy_pid)
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for index in range(plan.n):
            nursery.start_soon(consume, index, route, plan.settings, fleet, plan.start_offset)
        with trio.move_on_after(plan.setup_timeout_s) as connecting:
            await fleet.connected_all.wait()
        if connecting.cancelled_caught:
            result.notes.append(
                f"{fleet.connected:,} of {plan.n:,} consumers connected within "
                f"{plan.setup_timeout_s:g} s; those start polling now"
            )
        result.connect_s = trio.current_time() - started
        fleet.go.set()
        with trio.move_on_after(plan.setup_timeout_s):
            await fleet.settled.wait()
        result.setup_s = trio.current_time() - started
        result.settle_s = max(plan.settle_s, plan.quiet_s)
        await trio.sleep(result.settle_s)
        result.up = len(fleet.live)

        # -- window ------------------------------------------------------------------------
        counts_before = await trio.to_thread.run_sync(stack.upstream_counts)
        metrics_before = _watched(await trio.to_thread.run_sync(stack.scrape))
        cpu_before = _cpu(pids)
        answers_before = fleet.answers
        t0 = trio.current_time()
        rss_samples: list[int] = []
        deadline = t0 + plan.seconds
        scraped_mid = False
        while (now := trio.current_time()) < deadline:
            rss_samples.append(_rss_bytes(proxy_pid))
            if plan.route != "direct":
                # One scrape is one instant: consumers answered together (an expiry tick)
                # are between fetches for a moment, so the count is sampled all along.
                sample = await trio.to_thread.run_sync(stack.scrape)
                held = sample.get(_HELD_FETCHES)
                if held is not None:
                    result.held_samples.append(held)
            if not scraped_mid and now - t0 >= plan.seconds / 2:
                scraped_mid = True
                if proxy_pid is not None:
                    result.proxy_descriptors = open_descriptors(proxy_pid)
                result.metrics = _watched(await trio.to_thread.run_sync(stack.scrape))
            # Wake at the next sample, at mid-window (a short window too), or at its end.
            wake = min(trio.current_time() + _RSS_SAMPLE_S, deadline)
            if not scraped_mid:
                wake = min(wake, t0 + plan.seconds / 2)
            await trio.sleep_until(wake)
        t1 = trio.current_time()
        cpu_after = _cpu(pids)
        answers_after = fleet.answers
        counts_after = await trio.to_thread.run_sync(stack.upstream_counts)
        metrics_after = _watched(await trio.to_thread.run_sync(stack.scrape))
        window = result.window_s = t1 - t0
        fetches = counts_after.get("Fetch", 0) - counts_before.get("Fetch", 0)
        others = sum(counts_after.values()) - sum(counts_before.values()) - fetches
        result.upstream_fetch_per_s = fetches / window
        result.upstream_other_per_s = others / window
        result.answers_per_s = (answers_after - answers_before) / window
        result.cpu_percent = {
            name: 100 * (cpu_after[name] - cpu_before[name]) / window for name in pids
        }
        result.proxy_rss_held_bytes = int(statistics.median(rss_samples))
        result.metrics_delta = {
            k: v - metrics_before.get(k, 0.0) for k, v in metrics_after.items() if "_total" in k
        }

        # -- delivery probes ---------------------------------------------------------------
        await _probe_deliveries(route, plan, fleet, result)
        nursery.cancel_scope.cancel()
    return _finish(result, fleet)


async def _probe_deliveries(
    route: TopicRoute, plan: Plan, fleet: Fleet, result: Measurement
) -> None:
    """Produce ``plan.probes`` records one at a time and time their delivery to ``fleet``.

    Error handling: a producer connection that breaks is noted and opened again for the
    next probe; one that cannot be opened ends the probes (noted).
    """
    producer: Producer | None = None
    offset = plan.start_offset
    try:
        for k in range(plan.probes):
            if producer is None:
                try:
                    producer = await Producer.open(route)
                except _CONNECTION_ERRORS as exc:
                    result.notes.append(f"probe {k}: the producer could not connect: {exc!r}")
                    return
            await trio.sleep(random.uniform(0, plan.settings.max_wait_ms / 1000))
            probe = Probe(sent_at=trio.current_time(), expected=set(fleet.live))
            fleet.probe = probe
            acked: int | None = None
            try:
                acked = await producer.produce(f"probe {k}".encode())
            except ProduceError as exc:
                # The record may have been written all the same: judge by where the
                # consumers go next.
                result.produce_errors[exc.error_code] = (
                    result.produce_errors.get(exc.error_code, 0) + 1
                )
            except _CONNECTION_ERRORS as exc:
                result.notes.append(f"probe {k}: the producer's connection broke: {exc!r}")
                await producer.aclose()
                producer = None
            result.ack_ms.append((trio.current_time() - probe.sent_at) * 1000)
            probe.acknowledged(offset if acked is None else acked)
            with trio.move_on_after(PROBE_TIMEOUT_S):
                await probe.done.wait()
            fleet.probe = None
            result.latencies_ms += probe.latencies_ms()
            result.missed += len(probe.expected) - len(probe.arrivals)
            offset = max(offset, probe.highest_next_offset, -1 if acked is None else acked + 1)
            await trio.sleep(PROBE_GAP_S)
    finally:
        result.records_produced = offset - plan.start_offset
        if producer is not None:
            await producer.aclose()


def _finish(result: Measurement, fleet: Fleet) -> Measurement:
    result.failures = dict(fleet.failures)
    result.errors = dict(fleet.errors)
    result.fetch_versions = dict(fleet.fetch_versions)
    result.sessions = fleet.sessions
    result.full_requests = fleet.full_requests
    result.incremental_requests = fleet.incremental_requests
    return result
