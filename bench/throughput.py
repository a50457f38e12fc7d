# Strategy: one run measures three routes to the same embedded Tansu broker side by side --
# direct, through purgatory-proxy, and through `tansu proxy` (the peer) -- interleaved
# A B C A B C, so slow drift of this shared 2-core machine lands on every route alike.
# Every cell (round x route x record size, and round x route x offered rate) gets a fresh
# broker and a fresh forwarder: Tansu's memory storage keeps every record in RAM, and a
# forwarder must not carry the previous cell's heap into the next.
#
# Phase 1, throughput: librdkafka produces N records (acks=all, linger 5 ms) as fast as it
# can, then a consumer reads the topic from offset 0. The forwarder's CPU seconds and peak
# RSS are read with psutil while each half runs.
# Phase 2, latency: open loop at 10 / 50 / 80 % of the direct produce rate measured in
# phase 1 (1 KiB records), acknowledgement and produce->consume latency into HDR histograms,
# merged over rounds.
#
# The client, the broker and the forwarder share the machine's 2 cores, so every forwarder
# CPU cycle is taken from the client or the broker: absolute numbers are low and noisy,
# ratios measured in one run are what to compare.
#
# A/B mode (`--baseline DIR`): the proxy of this tree against the proxy of another checkout
# (an older commit), both started the same way, on the 1 KiB cells and the one-record-per-
# request cell only, the routes' order turning each round; it writes its own section
# (throughput-ab), so a change to the request path is judged against what it replaces.
"""Forwarding throughput and latency: direct vs purgatory-proxy vs tansu proxy.

Run ``python -m bench.throughput`` (about 9 minutes; ``--quick`` about 2 minutes, ``--json
FILE`` to save the run, ``--render FILE`` to report a saved run without measuring). Results
go to docs/benchmarks.md and docs/img/throughput.png (``--out DIR``: under DIR instead;
``--no-write``: nowhere). ``--smoke`` runs every route and phase on tiny sizes in about a
minute, to check the harness. The profile under the same loads is
``python -m bench._throughput_profile`` (py-spy). ``--baseline DIR [--label NAME] [--rounds
N]`` measures this tree's proxy side by side with the one in DIR (the "throughput-ab" section).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from bench._throughput_load import (
    consume_throughput,
    create_topic,
    open_loop_latency,
    produce_throughput,
    watched,
)
from bench._throughput_routes import BASELINE_PREFIX, ROUTES, running_route
from testbed.report import BENCHMARKS_MD, machine_line, write_section

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "docs" / "img" / "throughput.png"
GIB = 1 << 30
MB = 1_000_000
#: Kroxylicious' sizing guide: about 25 millicores per MB/s forwarded = 0.025 CPU s per MB.
KROXYLICIOUS_CPU_S_PER_GIB = 0.025 * GIB / MB


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    #: (record bytes, records) for the throughput phase.
    sizes: tuple[tuple[int, int], ...]
    rounds: int
    #: Offered loads as fractions of the direct 1 KiB produce rate.
    load_fractions: tuple[float, ...]
    latency_duration_s: float
    latency_warmup_s: float
    #: (record bytes, records) produced one record per Produce request: the per-request path.
    per_request: tuple[int, int] | None
    #: Used when the run measures no 1 KiB direct produce rate to take fractions of.
    fallback_rate: float = 1000.0
    routes: tuple[str, ...] = ROUTES


FULL = Config(
    sizes=((100, 500_000), (1024, 200_000), (65536, 4_000)),
    per_request=(100, 40_000),
    rounds=3,
    # 5 % is added below the 10/50/80: at 50 % and above the open-loop client
    # (producer, delivery callbacks and the timing consumer share one GIL) plus the broker
    # already saturate the 2 cores on the direct route, so those points compare queues.
    load_fractions=(0.05, 0.1, 0.5, 0.8),
    latency_duration_s=5.0,
    latency_warmup_s=1.0,
)
QUICK = Config(
    sizes=((100, 50_000), (1024, 20_000), (65536, 400)),
    per_request=(100, 5_000),
    rounds=2,
    load_fractions=(0.1, 0.5, 0.8),
    latency_duration_s=2.0,
    latency_warmup_s=0.5,
)
#: Every route and phase on tiny sizes, in about a minute: proves the harness still runs end
#: to end (tests/integration/test_throughput_smoke.py runs it); its numbers mean nothing.
SMOKE = Config(
    sizes=((100, 300), (1024, 200)),
    per_request=(100, 50),
    rounds=1,
    load_fractions=(0.5,),
    latency_duration_s=1.0,
    latency_warmup_s=0.2,
)


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
            "ack_p50_ms": _ms(measured.ack, 50),
            "ack_p99_ms": _ms(measured.ack, 99),
            "ack_p999_ms": _ms(measured.ack, 99.9),
            # Compressed HDR histograms, so --render can merge rounds without re-measuring.
            "ack_hdr": measured.ack.encode().decode(),
            "e2e_hdr": measured.end_to_end.encode().decode(),
            "e2e_p50_ms": _ms(measured.end_to_end, 50),
            "e2e_p99_ms": _ms(measured.end_to_end, 99),
        }
    )


def _ms(histogram: HdrHistogram, percentile: float) -> float | None:
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


def baseline_config(root: str, rounds: int = 3) -> Config:
    """Side by side with the proxy of another source tree: the 1 KiB cells and the
    one-record-per-request cell, routes interleaved, no latency phase (the request path's
    ratios)."""
    return Config(
        sizes=((1024, 100_000),),
        # 100,000 requests: about 7 s per cell. At 20,000 (1.3 s) one tree's rounds spread by
        # 40 % and three rounds showed a difference that longer cells did not reproduce.
        per_request=(100, 100_000),
        rounds=rounds,
        load_fractions=(),
        latency_duration_s=0.0,
        latency_warmup_s=0.0,
        # This tree runs through the same launcher as the baseline (`python -P`), so the two
        # proxies differ only in their code, not in how they were started.
        routes=("direct", BASELINE_PREFIX + str(ROOT), BASELINE_PREFIX + root),
    )


def baseline_table(config: Config, results: Results, label: str) -> str:
    """Medians over rounds: rates as ratios to direct, and the proxy's CPU per request."""

    def median(route: str, phase: str, key: str) -> float | None:
        values = [
            r[key]
            for r in results.rows
            if r["route"] == route and r["phase"] == phase and r[key] is not None
        ]
        return statistics.median(values) if values else None

    lines = [
        "| route | produce 1 KiB / direct | consume 1 KiB / direct | 1 record/request: "
        "requests/s | / direct | proxy CPU µs per request |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    direct = {
        phase: median("direct", phase, "records_per_s")
        for phase in ("produce", "consume", "produce-per-request")
    }
    for route in config.routes:
        name = route
        if route == BASELINE_PREFIX + str(ROOT):
            name = "purgatory-proxy (this tree)"
        elif route.startswith(BASELINE_PREFIX):
            name = label
        rates = {phase: median(route, phase, "records_per_s") for phase in direct}
        cpu = median(route, "produce-per-request", "forwarder_cpu_us_per_record")
        lines.append(
            f"| {name} | {_ratio(rates['produce'], direct['produce'])} "
            f"| {_ratio(rates['consume'], direct['consume'])} "
            f"| {_fmt(rates['produce-per-request'], 0)} "
            f"| {_ratio(rates['produce-per-request'], direct['produce-per-request'])} "
            f"| {_fmt(cpu, 0)} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- reporting


def _mean(rows: Sequence[dict[str, Any]], key: str, **match: Any) -> float | None:
    values = [
        r[key]
        for r in rows
        if all(r.get(k) == v for k, v in match.items()) and r.get(key) is not None
    ]
    return statistics.mean(values) if values else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def summary_rows(config: Config, results: Results) -> list[tuple[str, dict[str, float | None]]]:
    """(metric label, value per route) for the ratio table: throughputs and latencies."""
    table: list[tuple[str, dict[str, float | None]]] = []
    for phase in ("produce", "consume"):
        for record_bytes, _count in config.sizes:
            label = f"{phase} {_size(record_bytes)} MB/s"
            table.append(
                (
                    label,
                    {
                        route: _mean(
                            results.rows,
                            "mb_per_s",
                            phase=phase,
                            route=route,
                            record_bytes=record_bytes,
                        )
                        for route in config.routes
                    },
                )
            )
    if config.per_request is not None:
        record_bytes = config.per_request[0]
        table.append(
            (
                f"produce {_size(record_bytes)}, 1 record/request, requests/s",
                {
                    route: _mean(
                        results.rows, "records_per_s", phase="produce-per-request", route=route
                    )
                    for route in config.routes
                },
            )
        )
    for fraction in config.load_fractions:
        for label, merged, percentile in (
            ("ack p50 ms", results.ack, 50.0),
            ("ack p99 ms", results.ack, 99.0),
            ("ack p99.9 ms", results.ack, 99.9),
            ("e2e p50 ms", results.end_to_end, 50.0),
            ("e2e p99 ms", results.end_to_end, 99.0),
        ):
            table.append(
                (
                    f"{fraction:.0%} load: {label}",
                    {
                        route: _ms(merged[(route, fraction)], percentile)
                        if (route, fraction) in merged
                        else None
                        for route in config.routes
                    },
                )
            )
    return table


def _size(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB" if record_bytes >= 1024 else f"{record_bytes} B"


def ratio_table(config: Config, results: Results) -> str:
    """The Markdown table of per-route values and the two ratios the issue asks for."""
    names = list(config.routes)
    lines = [
        "| metric | " + " | ".join(names) + " | proxy/direct | proxy/tansu-proxy |",
        "|---|" + "---:|" * (len(names) + 2),
    ]
    for label, values in summary_rows(config, results):
        proxy = values.get("purgatory-proxy")
        digits = (
            2 if label.endswith(" ms") else (0 if label.endswith("/s") and "MB" not in label else 1)
        )
        lines.append(
            f"| {label} | "
            + " | ".join(_fmt(values.get(n), digits) for n in names)
            + f" | {_ratio(proxy, values.get('direct'))}"
            + f" | {_ratio(proxy, values.get('tansu-proxy'))} |"
        )
    return "\n".join(lines)


def cost_table(config: Config, results: Results) -> str:
    """Forwarder CPU seconds per GiB of payload and peak RSS, per phase and record size."""
    forwarders = [n for n in config.routes if n != "direct"]
    lines = [
        "| phase, record size | "
        + " | ".join(f"{n} CPU s/GiB" for n in forwarders)
        + " | "
        + " | ".join(f"{n} peak RSS MB" for n in forwarders)
        + " |",
        "|---|" + "---:|" * (2 * len(forwarders)),
    ]
    for phase in ("produce", "consume"):
        for record_bytes, _count in config.sizes:
            match = {"phase": phase, "record_bytes": record_bytes}
            cpu = [
                _fmt(_mean(results.rows, "forwarder_cpu_s_per_gib", route=n, **match), 1)
                for n in forwarders
            ]
            rss = [
                _fmt(_mean(results.rows, "forwarder_peak_rss_mb", route=n, **match), 0)
                for n in forwarders
            ]
            lines.append(f"| {phase} {_size(record_bytes)} | " + " | ".join(cpu + rss) + " |")
    if config.per_request is not None:
        match = {"phase": "produce-per-request"}
        per_request_us = [
            _fmt(_mean(results.rows, "forwarder_cpu_us_per_record", route=n, **match), 0)
            for n in forwarders
        ]
        rss = [
            _fmt(_mean(results.rows, "forwarder_peak_rss_mb", route=n, **match), 0)
            for n in forwarders
        ]
        lines.append(
            f"| produce {_size(config.per_request[0])}, 1 record/request: CPU µs per request | "
            + " | ".join(per_request_us + rss)
            + " |"
        )
    return "\n".join(lines)


def achieved_table(config: Config, results: Results) -> str:
    """Offered vs achieved rate of the open-loop runs (a route that cannot keep up shows)."""
    lines = [
        "| load | offered records/s | " + " | ".join(f"{n} achieved" for n in config.routes) + " |"
    ]
    lines.append("|---|---:|" + "---:|" * len(config.routes))
    for fraction in config.load_fractions:
        offered = _mean(results.rows, "target_rate", phase="latency", load_fraction=fraction)
        achieved = [
            _fmt(
                _mean(
                    results.rows, "achieved_rate", phase="latency", route=n, load_fraction=fraction
                ),
                0,
            )
            for n in config.routes
        ]
        lines.append(f"| {fraction:.0%} | {_fmt(offered, 0)} | " + " | ".join(achieved) + " |")
    return "\n".join(lines)


def goals_table(config: Config, results: Results) -> str:
    """The issue's goals next to what this run measured (met / not met)."""
    lines = ["| goal | measured | met |", "|---|---:|:---:|"]

    def verdict(ok: bool) -> str:
        return "yes" if ok else "**no**"

    for phase in ("produce", "consume"):
        for record_bytes, _count in config.sizes:
            match = {"phase": phase, "record_bytes": record_bytes}
            proxy = _mean(results.rows, "mb_per_s", route="purgatory-proxy", **match)
            direct = _mean(results.rows, "mb_per_s", route="direct", **match)
            tansu = _mean(results.rows, "mb_per_s", route="tansu-proxy", **match)
            if proxy is None or not direct or not tansu:
                continue
            label = f"{phase} {_size(record_bytes)}"
            lines.append(
                f"| {label}: proxy ≥ 0.9 x direct | {proxy / direct:.2f} x | "
                f"{verdict(proxy >= 0.9 * direct)} |"
            )
            lines.append(
                f"| {label}: proxy ≥ tansu proxy | {proxy / tansu:.2f} x | "
                f"{verdict(proxy >= tansu)} |"
            )
    direct_p50 = {
        f: _ms(results.ack[("direct", f)], 50.0)
        for f in config.load_fractions
        if ("direct", f) in results.ack
    }
    floor_ms = min((v for v in direct_p50.values() if v is not None), default=None)
    for fraction in config.load_fractions:
        for percentile, limit_ms in ((50.0, 0.5), (99.0, 2.0)):
            direct_h = results.ack.get(("direct", fraction))
            proxy_h = results.ack.get(("purgatory-proxy", fraction))
            if direct_h is None or proxy_h is None:
                continue
            added = (_ms(proxy_h, percentile) or 0.0) - (_ms(direct_h, percentile) or 0.0)
            goal = " (the goal's load)" if fraction == 0.5 else ""
            label = f"| {fraction:.0%} load{goal}: added ack p{percentile:g} ≤ {limit_ms:g} ms"
            # A point where direct's own median is 4x its lightest-load median measures the
            # queue of a saturated machine, not what the forwarder adds.
            own_p50 = direct_p50.get(fraction)
            if floor_ms and own_p50 is not None and own_p50 > 4 * floor_ms:
                lines.append(
                    f"{label} | {added:+.2f} ms | n/a: direct saturated "
                    f"(its p50 {own_p50:.0f} ms) |"
                )
                continue
            lines.append(f"{label} | {added:+.2f} ms | {verdict(added <= limit_ms)} |")
    return "\n".join(lines)


def rounds_table(config: Config, results: Results, loads: int = 2) -> str:
    """Ack p50 / p99 (ms) per round at the lightest loads: one noisy round shows as such."""
    names = list(config.routes)
    lines = [
        "| load | round | " + " | ".join(f"{n} p50 / p99" for n in names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for fraction in sorted(config.load_fractions)[:loads]:
        for round_no in range(1, config.rounds + 1):
            cells = []
            for name in names:
                match = {"phase": "latency", "route": name, "round": round_no}
                p50 = _mean(results.rows, "ack_p50_ms", load_fraction=fraction, **match)
                p99 = _mean(results.rows, "ack_p99_ms", load_fraction=fraction, **match)
                cells.append(f"{_fmt(p50, 2)} / {_fmt(p99, 2)}")
            lines.append(f"| {fraction:.0%} | {round_no} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(config: Config, results: Results, path: Path) -> None:
    """Throughput bars per record size (produce, consume) and ack latency vs load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.8 / len(config.routes)
    for ax, phase in zip(axes[:2], ("produce", "consume"), strict=True):
        for i, route in enumerate(config.routes):
            xs = [j + i * width for j in range(len(config.sizes))]
            ys = [
                _mean(results.rows, "mb_per_s", phase=phase, route=route, record_bytes=b) or 0.0
                for b, _ in config.sizes
            ]
            ax.bar(xs, ys, width, label=route)
        ax.set_xticks(
            [j + width for j in range(len(config.sizes))], [_size(b) for b, _ in config.sizes]
        )
        ax.set_title(f"{phase} throughput (records of size)")
        ax.set_ylabel("MB/s of payload")
        ax.legend()
    ax = axes[2]
    for route in config.routes:
        for percentile, style in ((50.0, "-o"), (99.0, "--s")):
            xs = [f * 100 for f in config.load_fractions if (route, f) in results.ack]
            ys = [
                _ms(results.ack[(route, f)], percentile) or 0.0
                for f in config.load_fractions
                if (route, f) in results.ack
            ]
            ax.plot(xs, ys, style, label=f"{route} p{percentile:g}")
    ax.set_yscale("log")
    ax.set_xlabel("offered load, % of direct 1 KiB produce rate")
    ax.set_ylabel("produce ack latency, ms")
    ax.set_title("open-loop ack latency (1 KiB, acks=all)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(
    config: Config, results: Results, command: str, wall_s: float, profile_notes: str
) -> str:
    """The docs/benchmarks.md section: setup, ratio table, costs, plot, profile."""
    loads = ", ".join(f"{f:.0%}" for f in config.load_fractions)
    sizes = ", ".join(f"{_size(b)} x {n:,}" for b, n in config.sizes)
    return f"""## Forwarding throughput and latency (`bench/throughput.py`)

{machine_line()} `{command}`, {wall_s / 60:.1f} min wall.

**2 cores, shared:** the librdkafka client, the Tansu broker and the forwarder all run on this
machine's 2 cores, so any CPU the forwarder burns is taken from the client or the broker. The
direct route has one process fewer competing. Compare ratios from one run, not absolute values.

Setup: routes alternate direct → purgatory-proxy → tansu proxy within each of {config.rounds}
rounds, each cell with a fresh broker (memory storage) and forwarder. Produce: confluent-kafka,
acks=all, linger 5 ms, one partition, records {sizes}; consume: the same topic read from offset
0. Latency: open loop, 1 KiB records, linger 5 ms, offered at {loads}
of the direct 1 KiB produce rate for {config.latency_duration_s:g} s ({config.latency_warmup_s:g} s
warm-up not recorded), latency measured from each record's due time (no coordinated
omission); HDR histograms merged over rounds. Values are means over rounds.

{ratio_table(config, results)}

Reading the latency rows: acknowledgement latency includes the 5 ms linger. End-to-end p50 is
~60 ms on every route, direct included: that is the consumer's fetch cycle against Tansu, not
forwarding. At 50 % and 80 % the direct route queues too (its own ack p50 leaves the
few-ms range and the open-loop table below shows the client falling behind): the open-loop
client (producer, delivery callbacks and the timing consumer share one Python process) plus
the broker saturate the 2 cores, so those rows compare queues, not forwarding cost. The 5 %
and 10 % rows are the unsaturated ones.

Goals against this run (each row states one: the proxy at 0.9x direct or better, and no slower
than the tansu proxy):

{goals_table(config, results)}

Acknowledgement latency per round at the unsaturated loads (ms; a single disturbed round, e.g.
another job on the shared machine, shows here rather than hiding in a merged p99):

{rounds_table(config, results)}

Forwarder cost (payload bytes; Kroxylicious' sizing anchor, 25 millicores per MB/s, is
{KROXYLICIOUS_CPU_S_PER_GIB:.1f} CPU s/GiB):

{cost_table(config, results)}

Open-loop rates (records/s):

{achieved_table(config, results)}

![throughput and latency](img/{CHART.name})

{profile_notes}
"""


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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, about 2 minutes")
    parser.add_argument("--json", type=Path, help="write the run (its rows) to this file")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, about a minute: checks the harness only"
    )
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the section to DIR/benchmarks.md and the chart to DIR/img/ instead of docs/",
    )
    parser.add_argument(
        "--render", type=Path, help="do not measure: report the run saved by --json in this file"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="measure side by side with the proxy in DIR (a checkout of an older "
        "commit): 1 KiB produce/consume and one record per request, --rounds rounds, the "
        "routes' order turning each round; prints a table "
        "and writes the throughput-ab section",
    )
    parser.add_argument("--label", default="baseline", help="the baseline's name in the table")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --baseline")
    args = parser.parse_args(argv)
    if args.baseline:
        _compare(args.baseline, args.label, args.no_write, args.rounds, args.json)
        return
    config = SMOKE if args.smoke else QUICK if args.quick else FULL
    command = "python -m bench.throughput" + (
        " --smoke" if args.smoke else " --quick" if args.quick else ""
    )
    if args.render:
        saved = json.loads(args.render.read_text())
        results, wall_s = results_from_rows(saved["rows"]), saved["wall_s"]
        command = saved["command"]
    else:
        started = time.monotonic()
        results = run(config)
        wall_s = time.monotonic() - started
    print(ratio_table(config, results))
    print()
    print(cost_table(config, results))
    print()
    print(achieved_table(config, results))
    if args.json:
        run_record = {"command": command, "wall_s": wall_s, "rows": results.rows}
        args.json.write_text(json.dumps(run_record, indent=1))
    if not args.no_write:
        from bench._throughput_profile import PROFILE_NOTES

        docs = CHART.parent.parent if args.out is None else args.out
        plot(config, results, docs / "img" / CHART.name)
        write_section(
            "throughput",
            markdown(config, results, command, wall_s, PROFILE_NOTES),
            docs / BENCHMARKS_MD.name,
        )


def _compare(root: str, label: str, no_write: bool, rounds: int, json_path: Path | None) -> None:
    config = baseline_config(str(Path(root).resolve()), rounds)
    started = time.monotonic()
    results = Results()
    for round_no in range(1, rounds + 1):
        # The routes' order turns each round, so no route always follows the same one (a
        # fresh broker after a heavy cell finds the machine in a different state).
        turn = (round_no - 1) % len(config.routes)
        routes = config.routes[turn:] + config.routes[:turn]
        one = run(dataclasses.replace(config, rounds=1, routes=routes))
        for row in one.rows:
            row["round"] = round_no
        results.rows.extend(one.rows)
    wall_s = time.monotonic() - started
    if json_path is not None:
        json_path.write_text(json.dumps({"wall_s": wall_s, "rows": results.rows}, indent=1))
    table = baseline_table(config, results, label)
    print(table)
    if no_write:
        return
    size, count = config.sizes[0]
    per_bytes, per_count = config.per_request or (0, 0)
    write_section(
        "throughput-ab",
        "\n".join(
            [
                "## The request path, side by side with an older proxy (`bench.throughput "
                "--baseline`)",
                "",
                machine_line(),
                "",
                f"`python -m bench.throughput --baseline DIR --label '{label}' --rounds "
                f"{config.rounds}` (DIR: a checkout of the baseline commit, `git worktree "
                "add` or `git archive`; both proxies run with `python -P` and "
                "PYTHONPATH set to their tree). librdkafka, a fresh Tansu per cell, routes "
                "interleaved "
                f"in each of {config.rounds} rounds (their order turning by one each round), "
                f"medians; {count:,} records of "
                f"{_size(size)} produced then consumed, and {per_count:,} records of "
                f"{_size(per_bytes)} one per Produce request (acks=all). Proxy CPU is the "
                f"proxy process's own CPU time (psutil) divided by requests. "
                f"Wall time {wall_s / 60:.1f} min.",
                "",
                table,
            ]
        ),
    )


if __name__ == "__main__":
    main()
