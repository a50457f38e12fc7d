# Strategy: the plots are drawn from the small, already aggregated tables (a few hundred rows at
# most, collected to the driver as plain dicts), never from the raw log, so plotting costs the
# same for a thousand lines as for a billion. matplotlib's Agg backend: no display needed.
# Each function writes one PNG and returns its path; each says in its title what to look for.
"""PNG plots of the report's tables (matplotlib)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plot_all"]

Rows = list[dict[str, Any]]


def plot_all(tables: dict[str, Rows], out: Path) -> list[Path]:
    """Write every plot into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    return [
        _latency(tables["per_api"], out / "latency_by_api.png"),
        _throughput(tables["throughput"], out / "throughput.png"),
        _memory(tables["memory_pressure"], out / "memory_pressure.png"),
        _fairness(tables["fairness"], out / "fairness.png"),
        _top_talkers(tables["top_talkers"], out / "top_talkers.png"),
        _held(tables["held_histogram"], out / "held_time.png"),
    ]


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _relative(starts: list[int]) -> list[int]:
    first = min(starts, default=0)
    return [start - first for start in starts]


def _latency(rows: Rows, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.5))
    apis = [row["api"] for row in rows]
    width = 0.27
    for offset, key in enumerate(("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")):
        positions = [i + (offset - 1) * width for i in range(len(apis))]
        axes.bar(positions, [row[key] or 0 for row in rows], width, label=key.split("_")[1])
    axes.set_xticks(range(len(apis)), apis, rotation=30, ha="right")
    axes.set_yscale("log")
    axes.set_ylabel("client-observed latency (ms, log scale)")
    axes.set_title("Latency per API: a tall p99 next to a short p50 means a tail to chase")
    axes.legend()
    return _save(figure, path)


def _throughput(rows: Rows, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.5))
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        series[row["api"]].append((row["window_start"], row["requests_per_s"]))
    first = min((row["window_start"] for row in rows), default=0)
    for api, points in sorted(series.items()):
        axes.plot([t - first for t, _ in points], [v for _, v in points], marker="o", label=api)
    axes.set_xlabel("seconds since the first window")
    axes.set_ylabel("requests / s")
    axes.set_title("Throughput per API and window")
    axes.legend(fontsize="small", ncol=2)
    return _save(figure, path)


def _memory(rows: Rows, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.5))
    starts = _relative([row["window_start"] for row in rows])
    axes.bar(
        starts,
        [row["muted_ms"] for row in rows],
        width=max(1, _step(starts)) * 0.8,
        align="edge",
        color="tab:red",
        label="muted time (ms)",
    )
    axes.set_xlabel("seconds since the first window")
    axes.set_ylabel("time requests waited for pool memory (ms)")
    share = axes.twinx()
    share.plot(
        starts,
        [row["muted_share"] * 100 for row in rows],
        color="black",
        marker="o",
        label="requests muted (%)",
    )
    share.set_ylabel("share of requests muted (%)")
    share.set_ylim(0, 100)
    axes.set_title("Memory pressure: red bars are the KIP-72 mute at work")
    return _save(figure, path)


def _step(starts: list[int]) -> int:
    ordered = sorted(set(starts))
    return min((b - a for a, b in itertools.pairwise(ordered)), default=1)


def _fairness(rows: Rows, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.5))
    starts = _relative([row["window_start"] for row in rows])
    axes.plot(starts, [row["jain_index"] for row in rows], marker="o", label="Jain's index")
    clients = axes.twinx()  # how many clients each window's index is over
    clients.step(
        starts,
        [row["clients"] for row in rows],
        where="post",
        color="tab:gray",
        alpha=0.5,
        label="clients",
    )
    clients.set_ylabel("clients in the window", color="tab:gray")
    clients.set_ylim(0, max((row["clients"] for row in rows), default=1) * 1.2)
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("seconds since the first window")
    axes.set_ylabel("Jain's index over per-client bytes")
    axes.set_title("Fairness: 1 = every client moved the same bytes, 1/n = one client did all")
    return _save(figure, path)


def _top_talkers(rows: Rows, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.5))
    ordered = list(reversed(rows))
    names = [row["client"] for row in ordered]
    axes.barh(names, [row["request_bytes"] for row in ordered], label="request bytes")
    axes.barh(
        names,
        [row["response_bytes"] for row in ordered],
        left=[row["request_bytes"] for row in ordered],
        label="response bytes",
    )
    axes.set_xlabel("bytes")
    axes.set_title("Top talkers by bytes moved through the proxy")
    axes.legend()
    return _save(figure, path)


def _held(rows: Rows, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(9, 4.5))
    if rows:
        series: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for row in rows:
            series[row["api"]].append((row["bucket_ms"], row["requests"]))
        for api, points in sorted(series.items()):
            axes.step([b for b, _ in points], [n for _, n in points], where="post", label=api)
        axes.legend()
    else:
        axes.text(
            0.5,
            0.5,
            "no request was held in the purgatory in this log",
            ha="center",
            va="center",
            transform=axes.transAxes,
        )
    axes.set_xlabel("time held in the purgatory (ms)")
    axes.set_ylabel("requests")
    axes.set_title("Held-time distribution")
    return _save(figure, path)
