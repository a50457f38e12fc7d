# Strategy: every cell (round x route x record size, and round x route x offered rate) gets a
# fresh broker and a fresh forwarder (bench/throughput/routes.py): Tansu's memory storage
# keeps every record in RAM, and a forwarder must not carry the previous cell's heap into the
# next. Routes alternate within each round, so slow drift of the shared machine lands on every
# route alike. Phase 1 measures throughput (closed loop), phase 2 latency (open loop at
# fractions of the direct 1 KiB produce rate measured in phase 1), HDR histograms merged over
# rounds and saved compressed in the rows, so a saved run can be reported again.
"""Run a throughput benchmark's cells, and rebuild a saved run's results."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from bench.throughput.config import Config
from bench.throughput.load import (
    consume_throughput,
    create_topic,
    open_loop_latency,
    produce_throughput,
    watched,
)
from bench.throughput.routes import running_route

__all__ = ["GIB", "MB", "Results", "ms_at", "results_from_rows", "run"]

GIB = 1 << 30
MB = 1_000_000


@dataclass
class Results:
    """Every row measured, plus the latency histograms merged per (route, load fraction)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    ack: dict[tuple[str, float], HdrHistogram] = field(default_factory=dict)
    end_to_end: dict[tuple[str, float], HdrHistogram] = field(default_factory=dict)


def _throughput_cell(
    route_name: str, round_no: int, record_bytes: int, count: int, per_request: bool = False
) -> list[dict[str, Any]]:
    """Produce then consume ``count`` records on a fresh route (produce only if per_request)."""
    rows = []
    with running_route(route_name) as route:
        topic = create_topic(route.bootstrap)
        actions: list[tuple[str, Callable[[], float]]] = [
            ("produce", lambda: produce_throughput(route.bootstrap, topic, record_bytes, count)),
            ("consume", lambda: consume_throughput(route.bootstrap, topic, count)),
        ]
        if per_request:
            actions = [
                (
                    "produce-per-request",
                    lambda: produce_throughput(route.bootstrap, topic, record_bytes, count, 1),
                )
            ]
        for kind, action in actions:
            elapsed_s, cpu_s, rss_mb = watched(route.forwarder_pid, action)
            payload = record_bytes * count
            rows.append(
                {
                    "phase": kind,
                    "route": route_name,
                    "round": round_no,
                    "record_bytes": record_bytes,
                    "records": count,
                    "seconds": elapsed_s,
                    "records_per_s": count / elapsed_s,
                    "mb_per_s": payload / elapsed_s / MB,
                    "forwarder_cpu_s": cpu_s,
                    "forwarder_cpu_s_per_gib": None if cpu_s is None else cpu_s / (payload / GIB),
                    "forwarder_cpu_us_per_record": None if cpu_s is None else 1e6 * cpu_s / count,
                    "forwarder_peak_rss_mb": rss_mb,
                }
            )
    return rows


def _latency_cell(
    config: Config, route_name: str, round_no: int, fraction: float, rate: float, results: Results
) -> None:
    with running_route(route_name) as route:
        topic = create_topic(route.bootstrap)
        measured = open_loop_latency(
            route.bootstrap, topic, rate, config.latency_duration_s, config.latency_warmup_s
        )
    key = (route_name, fraction)
    for merged, histogram in (
        (results.ack, measured.ack),
        (results.end_to_end, measured.end_to_end),
    ):
        if key not in merged:
            merged[key] = HdrHistogram(1, 60_000_000, 3)
        merged[key].add(histogram)
    results.rows.append(
        {
            "phase": "latency",
            "route": route_name,
            "round": round_no,
            "load_fraction": fraction,
            "target_rate": rate,
            "achieved_rate": measured.achieved_rate,
            "acked": measured.acked,
            "ack_p50_ms": ms_at(measured.ack, 50),
            "ack_p99_ms": ms_at(measured.ack, 99),
            "ack_p999_ms": ms_at(measured.ack, 99.9),
            # Compressed HDR histograms, so --render can merge rounds without re-measuring.
            "ack_hdr": measured.ack.encode().decode(),
            "e2e_hdr": measured.end_to_end.encode().decode(),
            "e2e_p50_ms": ms_at(measured.end_to_end, 50),
            "e2e_p99_ms": ms_at(measured.end_to_end, 99),
        }
    )


def ms_at(histogram: HdrHistogram, percentile: float) -> float | None:
    """The ``percentile`` of ``histogram`` (µs) in ms; None if it is empty."""
    if histogram.get_total_count() == 0:
        return None
    return float(histogram.get_value_at_percentile(percentile)) / 1000


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(config: Config, log: Callable[[str], None] = _log) -> Results:
    """Measure every cell of ``config``, routes interleaved within each round."""
    results = Results()
    cells = [(b, n, False) for b, n in config.sizes]
    if config.per_request is not None:
        cells.append((*config.per_request, True))
    for round_no in range(1, config.rounds + 1):
        for record_bytes, count, per_request in cells:
            for route_name in config.routes:
                rows = _throughput_cell(route_name, round_no, record_bytes, count, per_request)
                results.rows.extend(rows)
                log(
                    f"round {round_no} {route_name:>15} {record_bytes:>6} B: "
                    + ", ".join(
                        f"{r['phase']} {r['mb_per_s']:.1f} MB/s {r['records_per_s']:.0f} rec/s"
                        for r in rows
                    )
                )
    direct_rates = [
        r["records_per_s"]
        for r in results.rows
        if r["phase"] == "produce" and r["route"] == "direct" and r["record_bytes"] == 1024
    ]
    max_rate = statistics.mean(direct_rates) if direct_rates else config.fallback_rate
    for round_no in range(1, config.rounds + 1):
        for fraction in config.load_fractions:
            for route_name in config.routes:
                _latency_cell(config, route_name, round_no, fraction, fraction * max_rate, results)
                row = results.rows[-1]
                log(
                    f"round {round_no} {route_name:>15} {fraction:.0%} load "
                    f"({row['target_rate']:.0f}/s): "
                    f"ack p50 {row['ack_p50_ms']} ms p99 {row['ack_p99_ms']} ms, "
                    f"e2e p50 {row['e2e_p50_ms']} ms"
                )
    return results


def results_from_rows(rows: list[dict[str, Any]]) -> Results:
    """Rebuild a run's results (merged histograms included) from its ``--json`` rows."""
    results = Results(rows=rows)
    for row in rows:
        if row["phase"] != "latency":
            continue
        key = (row["route"], row["load_fraction"])
        for merged, field_name in ((results.ack, "ack_hdr"), (results.end_to_end, "e2e_hdr")):
            if key not in merged:
                merged[key] = HdrHistogram(1, 60_000_000, 3)
            merged[key].add(HdrHistogram.decode(row[field_name].encode()))
    return results
