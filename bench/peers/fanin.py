# Strategy: the idle fan-in of bench.fanin (bench/fanin/measure.py: N protocol-level consumers
# long-poll an idle topic, a few probe records time delivery) run against Apache Kafka through each
# route of bench.peers. What differs from bench.fanin is the target, `KafkaTarget`:
#
#   counting    the broker's own meters over JMX (testbed/kafka_jmx.py): FetchConsumer is the
#               clients' fetches (replication is FetchFollower), so no relay sits in any route
#               and every route, direct included, reaches the broker the same way.
#   processes   the broker's PID, this process (the consumers) and the route's forwarder.
#   forwarder   fresh for every measurement, so its RSS before the consumers come is its idle
#               size; purgatory-proxy gets bench.fanin's settings for N consumers (session
#               cache of N, a short upstream idle timeout, its route settling past it).
"""Idle fan-in against Apache Kafka, direct and through each forwarder."""

from __future__ import annotations

import os
from dataclasses import dataclass

import trio

from bench.fanin.consumer import FetchSettings
from bench.fanin.measure import Measurement, Plan, measure
from bench.fanin.stack import scrape_metrics
from bench.peers.load import MB, Row
from bench.peers.routes import Route
from testbed.kafka_jmx import RequestMeters

__all__ = ["KafkaTarget", "fanin_row"]

#: What the cluster asks of itself (KRaft, broker registration): not the clients' traffic.
_CLUSTER_OWN = frozenset(
    {
        "AddRaftVoter",
        "AllocateProducerIds",
        "AlterPartition",
        "AssignReplicasToDirs",
        "BeginQuorumEpoch",
        "BrokerHeartbeat",
        "BrokerRegistration",
        "ControllerRegistration",
        "DescribeQuorum",
        "EndQuorumEpoch",
        "FetchSnapshot",
        "RemoveRaftVoter",
        "UpdateRaftVoter",
        "Vote",
    }
)


@dataclass(frozen=True)
class KafkaTarget:
    """bench.fanin.measure.Target for one route into a one-node Apache Kafka."""

    topic: str
    route: Route
    broker_pid: int
    meters: RequestMeters

    @property
    def forwarder_pid(self) -> int | None:
        return self.route.forwarder_pid

    def entry(self, route: str) -> tuple[str, int]:
        assert route == self.route.name, (route, self.route.name)
        host, _, port = self.route.bootstrap.rpartition(":")
        return host, int(port)

    def pids(self) -> dict[str, int]:
        pids = {"broker": self.broker_pid, "consumers": os.getpid()}
        if self.route.forwarder_pid is not None:
            pids["proxy"] = self.route.forwarder_pid
        return pids

    def upstream_counts(self) -> dict[str, int]:
        """The clients' requests: Fetch is Kafka's FetchConsumer (followers' fetches and the
        cluster's own requests left out)."""
        counts = self.meters.counts()
        clients = {
            name: count
            for name, count in counts.items()
            if name not in _CLUSTER_OWN and not name.startswith("Fetch")
        }
        clients["Fetch"] = counts.get("FetchConsumer", 0)
        return clients

    def scrape(self) -> dict[str, float]:
        return {} if self.route.metrics_url is None else scrape_metrics(self.route.metrics_url)


def _summary(counts: dict[str, int]) -> str | None:
    return "; ".join(f"{key}: {value}" for key, value in counts.items()) or None


def fanin_row(
    target: KafkaTarget,
    *,
    n: int,
    max_wait_ms: int,
    window_s: float,
    probes: int,
    settle_s: float,
    quiet_s: float,
) -> Row:
    """Measure ``n`` idle consumers through ``target``'s route; one row."""
    plan = Plan(
        route=target.route.name,
        n=n,
        seconds=window_s,
        probes=probes,
        settle_s=settle_s,
        start_offset=0,
        settings=FetchSettings(max_wait_ms=max_wait_ms),
        quiet_s=quiet_s,
    )
    m: Measurement = trio.run(measure, target, plan)
    forwarder = target.forwarder_pid is not None
    held = sorted(m.held_samples)
    return {
        "phase": "fanin",
        "n": n,
        "max_wait_ms": max_wait_ms,
        "up": m.up,
        "window_s": m.window_s,
        "upstream_fetch_per_s": m.upstream_fetch_per_s,
        "upstream_other_per_s": m.upstream_other_per_s,
        "answers_per_s": m.answers_per_s,
        "broker_cpu_pct": m.cpu_percent.get("broker"),
        "proxy_cpu_pct": m.cpu_percent.get("proxy"),
        "consumers_cpu_pct": m.cpu_percent.get("consumers"),
        "delivery_p50_ms": m.latency_percentile_ms(0.5),
        "delivery_p99_ms": m.latency_percentile_ms(0.99),
        "missed": m.missed,
        "probes": probes,
        # Descriptors the forwarder opened for its consumers (a JVM holds ~100 for its jars).
        "fds_per_consumer": (m.proxy_descriptors - m.proxy_descriptors_idle) / m.up
        if forwarder and m.up
        else None,
        "rss_idle_mb": m.proxy_rss_idle_bytes / MB if forwarder else None,
        "rss_held_mb": m.proxy_rss_held_bytes / MB if forwarder else None,
        "rss_per_consumer_kib": m.proxy_rss_per_held_bytes / 1024 if forwarder else None,
        "held_median": held[len(held) // 2] if held else None,
        "fetch_versions": sorted(m.fetch_versions),
        "sessions": m.sessions,
        "failures": _summary(m.failures),
        "errors": _summary(m.errors),
        "notes": "; ".join(m.notes) or None,
        "setup_s": m.setup_s,
    }
