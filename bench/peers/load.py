# Strategy: the librdkafka families of bench.peers, one round at a time, every route of
# the round running at once (bench/peers/routes.running_routes) so each cell measures the
# routes back to back, the first route turning by one each round:
#
#   throughput   per record size: produce N records (acks=all, linger 5 ms) then read them
#                back from offset 0 (bench/throughput/load.py); MB/s, and the forwarder's CPU
#                seconds (psutil, exact) and peak RSS while each half runs.
#   per-request  N records of 100 B, one per Produce request (batch.num.messages=1, acks=all):
#                requests/s, and the forwarder's CPU per request.
#   latency      open loop at fractions of direct's rate on the three-node cluster (the topic
#                has three replicas, min ISR 2): acknowledgement and produce-to-consume HDR
#                histograms (bench/throughput/load.open_loop_latency, no coordinated omission).
#   tls          1 KiB produce then consume with TLS from client to forwarder and forwarder to
#                the cluster's SSL listener, against the same with neither.
#
# Every cell writes to a fresh topic, created and deleted straight at the cluster, so the log
# the broker keeps stays small and no cell reads another's records. A fresh forwarder gets
# `warmup_records` through it first (a JVM compiles its hot paths, pools fill), unmeasured.
# A cell that fails is a row with its error, not the end of the run.
"""The librdkafka-driven families of bench.peers: throughput, per request, latency, TLS."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from hdrh.histogram import HdrHistogram

from bench.peers.routes import Route
from bench.throughput.load import (
    LatencyResult,
    consume_throughput,
    create_topic,
    open_loop_latency,
    produce_throughput,
    watched,
)
from testbed.kafka_cluster import KafkaCluster

__all__ = [
    "GIB",
    "MB",
    "Cell",
    "Row",
    "calibrate",
    "error_text",
    "fresh_topic",
    "latency_cells",
    "ordered",
    "throughput_cells",
    "tls_cells",
    "warm_up",
]

GIB = 1 << 30
MB = 1_000_000
WARMUP_BYTES = 1024
Row = dict[str, Any]


def ordered(routes: Sequence[str], round_no: int) -> list[str]:
    """``routes`` starting with the one ``round_no - 1`` places on: no route always follows
    the same one (a cell after a heavy one finds the machine in another state)."""
    turn = (round_no - 1) % len(routes)
    return [*routes[turn:], *routes[:turn]]


def error_text(exc: BaseException) -> str:
    """One line for a table: the exception's type and the first line of its message."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}"[:300]


@contextlib.contextmanager
def fresh_topic(cluster: KafkaCluster) -> Iterator[str]:
    """A new topic (one partition, the cluster's default replication), deleted afterwards."""
    bootstrap = cluster.bootstrap()
    topic = create_topic(bootstrap, replication_factor=-1)
    try:
        yield topic
    finally:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            with contextlib.suppress(Exception):  # a topic left behind costs only disk
                future.result(timeout=30)


def _rate_row(
    phase: str, record_bytes: int, count: int, measured: tuple[float, float | None, float | None]
) -> Row:
    seconds, cpu_s, rss_mb = measured
    payload = record_bytes * count
    return {
        "phase": phase,
        "record_bytes": record_bytes,
        "records": count,
        "seconds": seconds,
        "records_per_s": count / seconds,
        "mb_per_s": payload / seconds / MB,
        "cpu_s": cpu_s,
        "cpu_s_per_gib": None if cpu_s is None else cpu_s / (payload / GIB),
        "cpu_us_per_record": None if cpu_s is None else 1e6 * cpu_s / count,
        "peak_rss_mb": rss_mb,
    }


def warm_up(cluster: KafkaCluster, route: Route, records: int) -> None:
    """Put ``records`` 1 KiB records through ``route`` and read them back, unmeasured."""
    if records <= 0:
        return
    config = route.client_config
    with fresh_topic(cluster) as topic:
        produce_throughput(route.bootstrap, topic, WARMUP_BYTES, records, client_config=config)
        consume_throughput(route.bootstrap, topic, records, client_config=config)


def produce_consume(
    cluster: KafkaCluster, route: Route, *, record_bytes: int, count: int
) -> list[Row]:
    """Produce ``count`` records through ``route``, then consume them: one row each."""
    config = route.client_config
    with fresh_topic(cluster) as topic:
        produced = watched(
            route.forwarder_pid,
            lambda: produce_throughput(
                route.bootstrap, topic, record_bytes, count, client_config=config
            ),
        )
        consumed = watched(
            route.forwarder_pid,
            lambda: consume_throughput(route.bootstrap, topic, count, client_config=config),
        )
    return [
        _rate_row("produce", record_bytes, count, produced),
        _rate_row("consume", record_bytes, count, consumed),
    ]


def per_request(cluster: KafkaCluster, route: Route, *, record_bytes: int, count: int) -> list[Row]:
    """``count`` records through ``route``, each its own Produce request (acks=all)."""
    with fresh_topic(cluster) as topic:
        measured = watched(
            route.forwarder_pid,
            lambda: produce_throughput(
                route.bootstrap, topic, record_bytes, count, 1, client_config=route.client_config
            ),
        )
    return [_rate_row("per-request", record_bytes, count, measured)]


@dataclass(frozen=True)
class Cell:
    """One cell of a family: its label, what it measures on one route (rows), and the keys
    every row of the cell carries (its error row too) so the report can find it."""

    label: str
    measure: Callable[[KafkaCluster, Route], list[Row]]
    keys: Row = field(default_factory=dict)


def throughput_cells(
    sizes: Sequence[tuple[int, int]], one_per_request: tuple[int, int]
) -> list[Cell]:
    """The throughput family: produce-then-consume per record size, and the per-request cell."""
    cells = [
        Cell(
            f"{size} B",
            partial(produce_consume, record_bytes=size, count=n),
            {"record_bytes": size},
        )
        for size, n in sizes
    ]
    size, n = one_per_request
    measure = partial(per_request, record_bytes=size, count=n)
    cells.append(Cell("per-request", measure, {"phase": "per-request"}))
    return cells


def tls_cells(records: int) -> list[Cell]:
    """The TLS family's cell (run once per mode): 1 KiB produce then consume."""
    measure = partial(produce_consume, record_bytes=1024, count=records)
    return [Cell("1 KiB", measure, {"record_bytes": 1024})]


def calibrate(cluster: KafkaCluster, route: Route, records: int) -> float:
    """Direct's closed-loop 1 KiB produce rate on ``cluster`` (records/s): what the latency
    family's offered loads are fractions of."""
    with fresh_topic(cluster) as topic:
        seconds = produce_throughput(route.bootstrap, topic, 1024, records)
    return records / seconds


def latency(
    cluster: KafkaCluster,
    route: Route,
    *,
    fraction: float,
    rate: float,
    duration_s: float,
    warmup_s: float,
) -> list[Row]:
    """Open loop at ``fraction`` x ``rate`` records/s through ``route`` for ``duration_s``."""
    measured: list[LatencyResult] = []

    def run() -> float:
        started = time.perf_counter()
        measured.append(
            open_loop_latency(route.bootstrap, topic, fraction * rate, duration_s, warmup_s)
        )
        return time.perf_counter() - started

    with fresh_topic(cluster) as topic:
        _, cpu_s, _ = watched(route.forwarder_pid, run)
    (result,) = measured
    return [
        {
            "phase": "latency",
            "load_fraction": fraction,
            "target_rate": result.target_rate,
            "achieved_rate": result.achieved_rate,
            "acked": result.acked,
            "cpu_s": cpu_s,
            **_percentiles("ack", result.ack),
            **_percentiles("e2e", result.end_to_end),
        }
    ]


def latency_cells(
    fractions: Sequence[float], rate: float, duration_s: float, warmup_s: float
) -> list[Cell]:
    """The latency family: one open-loop cell per offered fraction of direct's ``rate``."""
    return [
        Cell(
            f"{fraction:.0%}",
            partial(
                latency, fraction=fraction, rate=rate, duration_s=duration_s, warmup_s=warmup_s
            ),
            {"load_fraction": fraction},
        )
        for fraction in fractions
    ]


def _percentiles(prefix: str, histogram: HdrHistogram) -> dict[str, float | None]:
    if histogram.get_total_count() == 0:
        return {f"{prefix}_p50_ms": None, f"{prefix}_p99_ms": None, f"{prefix}_p999_ms": None}
    return {
        f"{prefix}_p50_ms": histogram.get_value_at_percentile(50) / 1000,
        f"{prefix}_p99_ms": histogram.get_value_at_percentile(99) / 1000,
        f"{prefix}_p999_ms": histogram.get_value_at_percentile(99.9) / 1000,
    }
