# Strategy: the docs/benchmarks.md sections of a run, made only from its Config and Results:
# per-route values with two ratios (proxy / direct, proxy / tansu
# proxy), the forwarders' CPU per GiB and RSS, the open-loop rates offered and achieved, the
# goals (reported, never asserted), latency per round, and a chart; and the A/B
# table of --baseline. Values are means over rounds, the A/B table's medians.
"""The throughput benchmark's report: tables, chart and the markdown section."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.throughput.config import ROOT, Config
from bench.throughput.routes import BASELINE_PREFIX
from bench.throughput.runner import GIB, MB, Results, ms_at
from testbed.report import machine_line

__all__ = [
    "CHART",
    "achieved_table",
    "baseline_table",
    "cost_table",
    "markdown",
    "plot",
    "ratio_table",
    "size_text",
]

CHART = ROOT / "docs" / "img" / "throughput.png"
#: Kroxylicious' sizing guide: about 25 millicores per MB/s forwarded = 0.025 CPU s per MB.
KROXYLICIOUS_CPU_S_PER_GIB = 0.025 * GIB / MB


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
            label = f"{phase} {size_text(record_bytes)} MB/s"
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
                f"produce {size_text(record_bytes)}, 1 record/request, requests/s",
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
                        route: ms_at(merged[(route, fraction)], percentile)
                        if (route, fraction) in merged
                        else None
                        for route in config.routes
                    },
                )
            )
    return table


def size_text(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB" if record_bytes >= 1024 else f"{record_bytes} B"


def ratio_table(config: Config, results: Results) -> str:
    """The Markdown table of per-route values and the two ratios the issue asks for."""
    names = list(config.routes)
    lines = [
        "| metric | " + " | ".join(names) + " | proxy ÷ direct | proxy ÷ tansu-proxy |",
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
            lines.append(f"| {phase} {size_text(record_bytes)} | " + " | ".join(cpu + rss) + " |")
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
            f"| produce {size_text(config.per_request[0])}, 1 record/request: CPU µs per request | "
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
            label = f"{phase} {size_text(record_bytes)}"
            lines.append(
                f"| {label}: proxy ≥ 0.9 x direct | {proxy / direct:.2f} x | "
                f"{verdict(proxy >= 0.9 * direct)} |"
            )
            lines.append(
                f"| {label}: proxy ≥ tansu proxy | {proxy / tansu:.2f} x | "
                f"{verdict(proxy >= tansu)} |"
            )
    direct_p50 = {
        f: ms_at(results.ack[("direct", f)], 50.0)
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
            added = (ms_at(proxy_h, percentile) or 0.0) - (ms_at(direct_h, percentile) or 0.0)
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
            [j + width for j in range(len(config.sizes))], [size_text(b) for b, _ in config.sizes]
        )
        ax.set_title(f"{phase} throughput (records of size)")
        ax.set_ylabel("MB/s of payload")
        ax.legend()
    ax = axes[2]
    for route in config.routes:
        for percentile, style in ((50.0, "-o"), (99.0, "--s")):
            xs = [f * 100 for f in config.load_fractions if (route, f) in results.ack]
            ys = [
                ms_at(results.ack[(route, f)], percentile) or 0.0
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
    sizes = ", ".join(f"{size_text(b)} x {n:,}" for b, n in config.sizes)
    return f"""## Forwarding throughput and latency (`bench.throughput`)

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
