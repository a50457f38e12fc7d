# Strategy: the section says how the points were measured (Kafka's TestPurgatoryPerformance
# workload, the harness's turns, what achieved and saturation mean) before the numbers: the
# saturation rate per scenario and implementation, then every point, then a chart of achieved rate
# and CPU per request against the target rate.
"""The purgatory benchmark's report: the markdown section and its chart."""

from __future__ import annotations

from pathlib import Path

from bench.purgatory.baseline import REAPER_SLICE_S
from bench.purgatory.point import (
    DRAIN_CAP_S,
    GENERATOR_BURST,
    ROOT,
    WARMUP_MS,
    Point,
    saturation,
)
from bench.purgatory.workload import IMPLS, KEYS_PER_REQUEST, PAYLOAD_BYTES, SCENARIOS, TIMEOUT_MS
from proxy.primitives.purgatory import DEFAULT_PURGE_INTERVAL
from proxy.primitives.timer import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE
from testbed.report import machine_line

__all__ = ["CHART", "chart", "markdown"]

CHART = ROOT / "docs" / "img" / "purgatory.png"


def chart(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    styles = {
        "wheel": ("tab:blue", "o", "timing wheel"),
        "baseline": ("tab:red", "s", "0.8 design"),
    }
    for col, scenario in enumerate(SCENARIOS):
        top, bottom = axes[0][col], axes[1][col]
        for impl in IMPLS:
            rows = [p for p in points if p.scenario == scenario and p.impl == impl]
            color, marker, label = styles[impl]
            x = [p.target_rps / 1000 for p in rows]
            top.plot(
                x, [p.achieved_rps / 1000 for p in rows], marker=marker, color=color, label=label
            )
            per_request = [1e6 * p.cpu_s / max(p.enqueued, 1) for p in rows]
            bottom.plot(x, per_request, marker=marker, color=color, label=label)
        xmax = max(p.target_rps for p in points) / 1000
        top.plot([0, xmax], [0, xmax], ls=":", color="grey", label="target")
        p50, p75 = SCENARIOS[scenario]
        top.set_title(f"{scenario} (p50 {p50:.0f} ms, p75 {p75:.0f} ms, timeout {TIMEOUT_MS} ms)")
        top.set_xlabel("target rate (k requests/s)")
        top.set_ylabel("achieved rate (k requests/s)")
        bottom.set_xlabel("target rate (k requests/s)")
        bottom.set_ylabel("process CPU µs per request enqueued")
        top.legend()
        bottom.legend()
        top.grid(alpha=0.3)
        bottom.grid(alpha=0.3)
    fig.suptitle(
        "Purgatory enqueue performance, one CPython thread (Kafka's TestPurgatoryPerformance)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def markdown(points: list[Point], requests: int, cap_s: float, command: str) -> str:
    lines = [
        "## Purgatory: timing wheel vs. the 0.8 design (`bench.purgatory`)",
        "",
        machine_line(),
        "",
        f"Command: `{command}`. Kafka's TestPurgatoryPerformance: exponential inter-arrivals at "
        f"the target rate, log-normal completion latency, timeout {TIMEOUT_MS} ms, "
        f"{PAYLOAD_BYTES}-byte payload, tick {DEFAULT_TICK_MS} ms, wheel {DEFAULT_WHEEL_SIZE}, "
        f"purge interval {DEFAULT_PURGE_INTERVAL}, {KEYS_PER_REQUEST} keys per request. "
        f"{requests:,} requests per point, or {cap_s:.0f} s of enqueueing when the target is "
        "too slow or the loop saturates (marked *). Achieved = the lower of the enqueue rate "
        "(requests enqueued / enqueue time, TestPurgatoryPerformance's 'actual rate') and the "
        "processed rate "
        f"(requests completed or expired per second, from {WARMUP_MS} ms to the end of the "
        "enqueue phase). One thread generates, completes and expires, taking turns like "
        "threads on one core (generator: "
        f"up to {GENERATOR_BURST} requests, reaper: up to {REAPER_SLICE_S * 1000:.0f} ms). Each "
        "point is a fresh process; CPU s is process CPU time during the enqueue phase, peak "
        "RSS the process's maximum. Unfinished = requests neither completed nor expired "
        f"{DRAIN_CAP_S:.0f} s after the enqueue phase (the purgatory had fallen behind). "
        "Saturation = first target where achieved < 95 % of it.",
        "",
        "| scenario | impl | saturation (RPS) |",
        "|---|---|---|",
    ]
    top_rate = max(p.target_rps for p in points)
    for scenario in SCENARIOS:
        for impl in IMPLS:
            sat = saturation(points, scenario, impl)
            shown = f"not reached (>= {top_rate:,})" if sat is None else f"{sat:,}"
            lines.append(f"| {scenario} | {impl} | {shown} |")
    lines += [
        "",
        "| scenario | impl | target RPS | achieved RPS | CPU s | CPU µs/req | peak RSS MB "
        "| unfinished |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        star = "*" if p.truncated else ""
        lines.append(
            f"| {p.scenario} | {p.impl} | {p.target_rps:,} | {p.achieved_rps:,.0f}{star} | "
            f"{p.cpu_s:.1f} | {1e6 * p.cpu_s / max(p.enqueued, 1):.1f} | "
            f"{p.peak_rss_mb:.0f} | {p.unfinished:,} |"
        )
    lines += ["", "![purgatory benchmark](img/purgatory.png)", ""]
    return "\n".join(lines)
