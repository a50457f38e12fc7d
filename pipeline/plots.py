# Strategy: the plots are drawn from the small, already aggregated tables (collected to the
# driver as plain dicts), never from the raw log, so plotting costs the same for a thousand lines
# as for a billion; pipeline/series.py first makes the series complete (no gaps drawn as data).
# matplotlib's Agg backend renders each figure to PNG bytes in memory: the caller writes them
# through the Hadoop filesystem, so they land next to the tables wherever --out points. Each
# title says what to look for. Rules that keep a plot from misleading: Fetch and Produce always
# have the same colours (blue, orange: no other plot uses them) and the other APIs are one faint
# grey line; every time axis is wall-clock UTC, so a spike can be matched to an incident;
# "nothing happened" is said in words, not drawn as an axis of zeros.
"""PNG plots of the report's tables (matplotlib)."""

from __future__ import annotations

import io
import math
from datetime import UTC, datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from pipeline import series
from pipeline.tables import HELD_BUCKET_MS

__all__ = ["API_COLOURS", "PLOT_NAMES", "render_all"]

Rows = list[dict[str, Any]]

#: Fixed colours: the same API is the same colour in every plot and every report.
API_COLOURS = {"Fetch": "tab:blue", "Produce": "tab:orange", series.OTHER_APIS: "0.6"}
PLOT_NAMES = ("latency_by_api", "throughput", "memory_pressure", "fairness", "top_talkers",
              "held_time")  # fmt: skip
_FIGSIZE = (9.0, 4.5)
#: p50, p95, p99: shades of one hue that no API colour uses.
_PERCENTILE_COLOURS = ("#bcbddc", "#807dba", "#54278f")


def render_all(tables: dict[str, Rows], window_s: int) -> dict[str, bytes]:
    """Every plot as PNG bytes, by name (the file is ``plots/<name>.png``)."""
    drawn = {
        "latency_by_api": _latency(tables["per_api"]),
        "throughput": _throughput(tables["throughput"], window_s),
        "memory_pressure": _memory(tables["memory_pressure"], window_s),
        "fairness": _fairness(tables["fairness"], window_s),
        "top_talkers": _top_talkers(tables["top_talkers"]),
        "held_time": _held(tables["held_histogram"]),
    }
    return {name: _png(drawn[name]) for name in PLOT_NAMES}


def _png(figure: Figure) -> bytes:
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def _times(starts: list[int]) -> npt.NDArray[np.datetime64]:
    """Window starts as UTC instants (matplotlib reads naive datetime64 as UTC)."""
    return np.array(starts, dtype="datetime64[s]")


def _time_axis(axes: Axes) -> None:
    """Wall-clock UTC ticks, concise (the date is written once, where it changes)."""
    locator = mdates.AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    formatter = mdates.ConciseDateFormatter(locator, tz=UTC)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_formatter(formatter)
    axes.set_xlabel("window start (UTC)")


def _clock(ts: float, layout: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(layout)


def _say(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, wrap=True)
    axes.set_yticks([])


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if value is None else value for value in values]


def _latency(rows: Rows) -> Figure:
    figure, axes = plt.subplots(figsize=_FIGSIZE)
    apis = [row["api"] for row in rows]
    width = 0.27
    for offset, key in enumerate(("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")):
        positions = [i + (offset - 1) * width for i in range(len(apis))]
        axes.bar(
            positions, [row[key] or 0 for row in rows], width, label=key.split("_")[1],
            color=_PERCENTILE_COLOURS[offset],
        )  # fmt: skip
    axes.set_xticks(range(len(apis)), apis, rotation=30, ha="right")
    axes.set_yscale("log")
    axes.set_ylabel("client-observed latency (ms, log scale)")
    axes.set_title("Latency per API: a tall p99 next to a short p50 means a tail to chase")
    axes.legend()
    return figure


def _throughput(rows: Rows, window_s: int) -> Figure:
    figure, axes = plt.subplots(figsize=_FIGSIZE)
    data = series.throughput(rows, window_s)
    times = _times(data.starts)
    marker = "o" if len(times) <= 60 else None
    partial = np.array(data.partial, dtype=bool)
    for name, values in data.series.items():
        highlighted = name in series.HIGHLIGHTED
        label = name if highlighted else f"{name} ({len(data.others)}, summed)"
        colour = API_COLOURS[name]
        axes.plot(
            times, values, color=colour, linewidth=2.0 if highlighted else 1.0,
            alpha=1.0 if highlighted else 0.7, marker=marker, markersize=3, label=label,
            zorder=3 if highlighted else 2,
        )  # fmt: skip
        axes.plot(
            times[partial], np.array(values)[partial], linestyle="none", marker="o",
            markersize=7, markerfacecolor="white", markeredgecolor=colour, zorder=4,
        )  # fmt: skip
    _time_axis(axes)
    axes.set_ylabel(f"requests / s (per {window_s} s window)")
    axes.set_title("Throughput: Fetch and Produce, all other APIs summed in grey")
    if partial.any():
        note = "hollow: window the log covers only in part; rate over the covered part"
        axes.annotate(note, (1, 0), xycoords="axes fraction", xytext=(-4, 4),
                      textcoords="offset points", ha="right", va="bottom", fontsize="small",
                      color="0.4")  # fmt: skip
    top = max((max(values) for values in data.series.values()), default=0.0)
    axes.set_ylim(0, top * 1.3 or 1.0)  # headroom above the highest line for the legend
    if data.series:
        axes.legend(fontsize="small", loc="upper left", ncols=3)
    return figure


def _memory(rows: Rows, window_s: int) -> Figure:
    figure, axes = plt.subplots(figsize=_FIGSIZE)
    starts = series.window_starts(rows, window_s)
    times = _times(starts)
    muted_ms = series.per_window(rows, "muted_ms", starts, 0.0)
    axes.set_title("Memory pressure: red bars are the KIP-72 mute at work")
    if not any(muted_ms):
        axes.plot(times, [0.0] * len(times), alpha=0)  # only to span the time axis
        end = starts[-1] + window_s
        span = f"{_clock(starts[0], '%Y-%m-%d %H:%M:%S')} to {_clock(end, '%H:%M:%S')} UTC"
        _say(axes, f"no muting in this window ({span}):\nevery request got pool memory at once")
        _time_axis(axes)
        return figure
    axes.bar(
        times, _nan(muted_ms), width=window_s / 86_400 * 0.8, align="edge", color="tab:red",
        label="muted time (ms)",
    )  # fmt: skip
    axes.set_ylabel("time requests waited for pool memory (ms)")
    share = axes.twinx()
    shares = series.per_window(rows, "muted_share", starts, None)
    share.plot(
        times, [math.nan if s is None else s * 100 for s in shares], color="black",
        marker="o" if len(times) <= 60 else None, markersize=3, label="requests muted (%)",
    )  # fmt: skip
    share.set_ylabel("share of requests muted (%)")
    share.set_ylim(0, 100)
    _time_axis(axes)
    return figure


def _fairness(rows: Rows, window_s: int) -> Figure:
    figure, axes = plt.subplots(figsize=_FIGSIZE)
    starts = series.window_starts(rows, window_s)
    times = _times(starts)
    clients = axes.twinx()  # how many clients each window's index is over
    counts = series.per_window(rows, "clients", starts, 0)
    clients.step(times, _nan(counts), where="post", color="tab:gray", alpha=0.5)
    clients.set_ylabel("clients in the window", color="tab:gray")
    clients.set_ylim(0, max((row["clients"] for row in rows), default=1) * 1.2)
    index = _nan(series.per_window(rows, "jain_index", starts, None))
    axes.plot(times, index, color="black", marker="o" if len(times) <= 60 else None, markersize=3)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("Jain's index over per-client bytes")
    axes.set_title("Fairness: 1 = every client moved the same bytes, 1/n = one client did all")
    _time_axis(axes)
    return figure


def _top_talkers(rows: Rows) -> Figure:
    figure, axes = plt.subplots(figsize=_FIGSIZE)
    ordered = list(reversed(rows))
    names = [row["client"] for row in ordered]
    requests = [row["request_bytes"] for row in ordered]
    axes.barh(names, requests, color="0.3", label="request bytes")
    axes.barh(
        names, [row["response_bytes"] for row in ordered], left=requests, color="0.7",
        label="response bytes",
    )  # fmt: skip
    axes.xaxis.set_major_formatter(EngFormatter(unit="B"))
    axes.set_xlabel("bytes moved (request + response)")
    axes.set_title("Top talkers by bytes moved through the proxy")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=2, fontsize="small")
    return figure


def _held(rows: Rows) -> Figure:
    figure, axes = plt.subplots(figsize=_FIGSIZE)
    histogram = series.held(rows, HELD_BUCKET_MS)
    axes.set_title(f"Held-time distribution ({HELD_BUCKET_MS} ms buckets; empty ones at 0)")
    axes.set_xlabel("time held in the purgatory (ms)")
    if not histogram.counts:
        _say(axes, "no request was held in the purgatory in this log")
        return figure
    for api, counts in histogram.counts.items():
        colour = API_COLOURS.get(api, API_COLOURS[series.OTHER_APIS])
        axes.stairs(counts, histogram.edges, color=colour, linewidth=1.5, label=api)
    axes.set_xlim(0, histogram.edges[-1])
    axes.set_ylim(bottom=0)
    axes.set_ylabel("requests")
    axes.legend()
    return figure
