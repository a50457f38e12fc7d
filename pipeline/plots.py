# Strategy: the plots are drawn from the small, already aggregated tables (collected to the
# driver as plain dicts), never from the raw log, so plotting costs the same for a thousand lines
# as for a billion; pipeline/series.py first makes the series complete (no gaps drawn as data).
# matplotlib's Agg backend renders each figure to PNG bytes in memory: the caller writes them
# through the Hadoop filesystem, so they land next to the tables wherever --out points. Each
# title says what to look for. Rules that keep a plot from misleading:
#
# - Fetch and Produce always have the same colours (blue, orange: no other plot uses them) and
#   the other APIs are one faint grey line.
# - Waits the protocol asks for (pipeline/waits.py) are never drawn as latency tails: the
#   latency plot has a panel for them, Fetch split by how it was answered.
# - Every time axis is the log's own clock, UTC, and each tick label is the time itself
#   (HH:MM:SS), never a number to add to an offset printed elsewhere; the date is in the
#   axis label, or on every tick when the plot spans midnight.
# - Legends and notes sit outside the data (constrained layout makes room for them), so no
#   text covers a line and nothing is cut off at the figure's edge.
# - "Nothing happened" is said in words, not drawn as an axis of zeros.
"""PNG plots of the report's tables (matplotlib)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
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
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import EngFormatter, Formatter

from pipeline import series
from pipeline.tables import FAIRNESS_MIN_CONNECTIONS, HELD_BUCKET_MS
from pipeline.waits import (
    EXPIRED,
    FETCH,
    FETCH_ANSWERS,
    FETCH_ERROR,
    FORWARDED,
    NOT_HELD,
    WOKEN,
    is_wait,
)

__all__ = ["API_COLOURS", "PERCENTILE_FROM", "PLOT_NAMES", "figures", "render_all"]

Rows = list[dict[str, Any]]

#: Fixed colours: the same API is the same colour in every plot and every report.
API_COLOURS = {"Fetch": "tab:blue", "Produce": "tab:orange", series.OTHER_APIS: "0.6"}
PLOT_NAMES = ("latency_by_api", "throughput", "memory_pressure", "fairness", "top_talkers",
              "fetch_answers")  # fmt: skip
_FIGSIZE = (9.0, 4.5)
_WIDE = (12.0, 5.0)
#: p50, p95, p99: shades of one hue that no API colour uses.
_PERCENTILE_COLOURS = ("#bcbddc", "#807dba", "#54278f")
#: Fetch answers: not held in Fetch's own blue, held ones lighter, expired grey, errors red.
_ANSWER_COLOURS = {NOT_HELD: "tab:blue", WOKEN: "#9ecae1", EXPIRED: "0.6", FORWARDED: "0.3",
                   FETCH_ERROR: "tab:red"}  # fmt: skip
_ANSWER_LABELS = {NOT_HELD: "not held", WOKEN: "woken by data", EXPIRED: "expired",
                  FORWARDED: "forwarded", FETCH_ERROR: "error"}  # fmt: skip
_MARKERS_UP_TO = 60  # windows; more, and a line without markers reads better
_LEAST_BARS = 6  # the width of a latency panel with fewer APIs
#: Each percentile and the fewest requests it is drawn from: below 1/(1 - p) requests the
#: p-th percentile is the slowest request (p95 from 20, p99 from 100).
PERCENTILE_FROM = {"latency_p50_ms": 1, "latency_p95_ms": 20, "latency_p99_ms": 100}
#: The held-time histogram is drawn on a log scale only when its bars span more than this
#: factor; closer counts read better on a linear one. Each bar carries its count either way.
_LOG_SCALE_ABOVE = 50


def figures(tables: dict[str, Rows], window_s: int) -> dict[str, Figure]:
    """Every plot as a matplotlib figure, by name (the caller closes them)."""
    return {
        "latency_by_api": _latency(tables["per_api"], tables["fetch_answers"]),
        "throughput": _throughput(tables["throughput"], window_s),
        "memory_pressure": _memory(tables["memory_pressure"], window_s),
        "fairness": _fairness(tables["fairness"], tables["memory_pressure"], window_s),
        "top_talkers": _top_talkers(tables["top_talkers"]),
        "fetch_answers": _fetch_answers(tables["fetch_answers"], tables["held_histogram"]),
    }


def render_all(tables: dict[str, Rows], window_s: int) -> dict[str, bytes]:
    """Every plot as PNG bytes, by name (the file is ``plots/<name>.png``)."""
    drawn = figures(tables, window_s)
    return {name: _png(drawn[name]) for name in PLOT_NAMES}


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def _figure(size: tuple[float, float] = _FIGSIZE, **subplots: Any) -> tuple[Figure, Any]:
    """A figure whose layout makes room for every label, legend and title."""
    return plt.subplots(figsize=size, layout="constrained", **subplots)


def _times(starts: Sequence[float]) -> npt.NDArray[np.datetime64]:
    """Window starts as UTC instants (matplotlib reads naive datetime64 as UTC)."""
    return np.array(starts, dtype="datetime64[s]")


class UtcClock(Formatter):
    """Tick labels that are the UTC time itself: HH:MM, HH:MM:SS when a tick needs seconds,
    with milliseconds when one needs them, and the date first when the axis spans days."""

    def __init__(self, with_date: bool) -> None:
        self._with_date = with_date

    def _moments(self, values: Sequence[float]) -> list[datetime]:
        return [mdates.num2date(value, tz=UTC) for value in values]  # type: ignore[no-untyped-call]

    def _layout(self, moments: list[datetime]) -> str:
        layout = "%H:%M"
        if any(moment.second or moment.microsecond for moment in moments):
            layout += ":%S"
        if any(moment.microsecond for moment in moments):
            layout += ".%f"
        return f"%m-%d {layout}" if self._with_date else layout

    def _label(self, moment: datetime, layout: str) -> str:
        text = moment.strftime(layout)
        return text[:-3] if layout.endswith("%f") else text  # microseconds -> milliseconds

    def format_ticks(self, values: Sequence[float]) -> list[str]:
        moments = self._moments(values)
        layout = self._layout(moments)
        return [self._label(moment, layout) for moment in moments]

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self.format_ticks([x])[0]


def _time_axis(axes: Axes, first_s: float, last_s: float, what: str = "window start") -> None:
    """A UTC time axis from ``first_s`` to ``last_s`` whose tick labels need no offset."""
    first_day, last_day = (_clock(first_s, "%Y-%m-%d"), _clock(last_s, "%Y-%m-%d"))
    # Steps of 2 s and 2 min too: from 5 up, an 11 s or 11 min span gets two or three ticks.
    locator = mdates.AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    locator.intervald[mdates.SECONDLY] = [1, 2, 5, 10, 15, 30]
    locator.intervald[mdates.MINUTELY] = [1, 2, 5, 10, 15, 30]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(UtcClock(with_date=first_day != last_day))
    day = first_day if first_day == last_day else f"{first_day} to {last_day}"
    axes.set_xlabel(f"{what} (UTC, {day})")


def _clock(ts: float, layout: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(layout)


def _say(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, wrap=True)
    axes.set_yticks([])


def _nan(values: Sequence[float | None]) -> list[float]:
    return [math.nan if value is None else value for value in values]


def _marker(starts: Sequence[int]) -> str | None:
    return "o" if len(starts) <= _MARKERS_UP_TO else None


def _percentile_bars(axes: Axes, names: list[str], rows: list[dict[str, Any]]) -> None:
    """p50, p95 and p99 bars per API, its request count under its name. A percentile is drawn
    only from the count at which it differs from the slowest request (PERCENTILE_FROM): the
    p95 of 3 requests is their maximum, and three equal bars would claim a distribution."""
    width = 0.27
    for offset, (key, least) in enumerate(PERCENTILE_FROM.items()):
        drawn = [(i, row[key]) for i, row in enumerate(rows)
                 if row["requests"] >= least and row[key]]  # fmt: skip
        axes.bar(
            [i + (offset - 1) * width for i, _ in drawn], [value for _, value in drawn], width,
            color=_PERCENTILE_COLOURS[offset],
        )  # fmt: skip
    labels = [f"{name}\nn={row['requests']:,}" for name, row in zip(names, rows, strict=True)]
    axes.set_xticks(range(len(names)), labels, rotation=30, ha="right")
    axes.set_yscale("log")


def _percentile_legend() -> tuple[list[Rectangle], list[str]]:
    """The percentiles' legend, saying from which count each is drawn."""
    handles = [Rectangle((0, 0), 1, 1, color=colour) for colour in _PERCENTILE_COLOURS]
    labels = [
        key.split("_")[1] + (f" (n ≥ {least})" if least > 1 else "")
        for key, least in PERCENTILE_FROM.items()
    ]
    return handles, labels


def _latency(per_api: Rows, answers: Rows) -> Figure:
    """Service latency beside the waits the protocol asks for (Fetch by how it was answered)."""
    service = [row for row in per_api if not is_wait(row["api"])]
    waits = [row for row in per_api if is_wait(row["api"]) and row["api"] != FETCH]
    by_kind = {row["answer"]: row for row in answers}
    fetch = [(f"{FETCH}, {_ANSWER_LABELS[k]}", by_kind[k]) for k in FETCH_ANSWERS if k in by_kind]
    wait_names = [name for name, _ in fetch] + [row["api"] for row in waits]
    wait_rows = [row for _, row in fetch] + waits
    # A panel is as wide as its bars, but never narrower than its two-line title.
    widths = [max(len(service), _LEAST_BARS), max(len(wait_rows), _LEAST_BARS)]
    figure, (left, right) = _figure(_WIDE, ncols=2, sharey=True, width_ratios=widths)
    figure.suptitle("Latency per API, client-observed (ms, log scale)")
    left.set_title("Service: answered when the work is done.\nA tall p99 beside a short p50 "
                   "is a tail to chase.", fontsize="medium")  # fmt: skip
    right.set_title("Waits the protocol asks for, long by\ndesign: max_wait_ms, rebalances.",
                    fontsize="medium")  # fmt: skip
    left.set_ylabel("latency (ms)")
    for axes, names, rows in ((left, [r["api"] for r in service], service),
                              (right, wait_names, wait_rows)):  # fmt: skip
        if rows:
            _percentile_bars(axes, names, rows)
        else:
            axes.set_xticks([])
            axes.text(0.5, 0.5, "none in this log", ha="center", va="center",
                      transform=axes.transAxes)  # fmt: skip
    if service or wait_rows:
        figure.legend(*_percentile_legend(), loc="outside upper right", ncols=3, fontsize="small")
    return figure


def _throughput(rows: Rows, window_s: int) -> Figure:
    figure, axes = _figure()
    data = series.throughput(rows, window_s)
    times = _times(data.starts)
    marker = _marker(data.starts)
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
    axes.set_ylabel(f"requests / s (per {window_s} s window)")
    axes.set_title("Throughput: Fetch and Produce, all other APIs summed in grey")
    axes.set_ylim(bottom=0)
    handles, labels = axes.get_legend_handles_labels()
    if partial.any():
        hollow = Line2D([], [], linestyle="none", marker="o", markersize=7,
                        markerfacecolor="white", markeredgecolor="0.3")  # fmt: skip
        handles.append(hollow)
        labels.append("hollow: window the log covers in part (rate over the covered part)")
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    if data.starts:
        _time_axis(axes, data.starts[0], data.starts[-1])
    return figure


def _memory(rows: Rows, window_s: int) -> Figure:
    figure, axes = _figure()
    starts = series.window_starts(rows, window_s)
    times = _times(starts)
    muted_ms = series.per_window(rows, "muted_ms", starts, 0.0)
    axes.set_title("Memory pressure: red bars are the KIP-72 mute at work")
    _time_axis(axes, starts[0], starts[-1])
    if not any(muted_ms):
        axes.plot(times, [0.0] * len(times), alpha=0)  # only to span the time axis
        end = starts[-1] + window_s
        span = f"{_clock(starts[0], '%H:%M:%S')} to {_clock(end, '%H:%M:%S')} UTC"
        _say(axes, f"no muting from {span}:\nevery request got pool memory at once")
        return figure
    axes.bar(
        times, _nan(muted_ms), width=window_s / 86_400 * 0.8, align="edge", color="tab:red",
        label="muted time (ms)",
    )  # fmt: skip
    axes.set_ylabel("time requests waited\nfor pool memory (ms)")
    share = axes.twinx()
    shares = series.per_window(rows, "muted_share", starts, None)
    share.plot(
        times, [math.nan if s is None else s * 100 for s in shares], color="black",
        marker=_marker(starts), markersize=3, label="requests muted (%)",
    )  # fmt: skip
    share.set_ylabel("share of requests muted (%)")
    share.set_ylim(0, 100)
    return figure


def _fairness(rows: Rows, pressure: Rows, window_s: int) -> Figure:
    """Jain's index per window with its floor (1/n), windows with muting shaded."""
    figure, axes = _figure()
    starts = series.window_starts(rows, window_s)
    times = _times(starts)
    axes.set_title("Fairness between connections: Jain's index over bytes per window")
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("Jain's index (1: all equal)")
    if starts:
        _time_axis(axes, starts[0], starts[-1])
    index = series.per_window(rows, "jain_index", starts, None)
    if not any(value is not None for value in index):
        least = FAIRNESS_MIN_CONNECTIONS
        _say(axes, f"no window had {least} or more active connections: nothing to compare")
        return figure
    connections = series.per_window(rows, "connections", starts, None)
    floor = [
        1 / n if n and v is not None else None for n, v in zip(connections, index, strict=True)
    ]
    muted = {row["window_start"] for row in pressure if row["muted_requests"]}
    for start, time in zip(starts, times, strict=True):
        if start in muted:
            end = time + np.timedelta64(window_s, "s")
            axes.axvspan(time, end, color="tab:red", alpha=0.12, linewidth=0)
    label = f"Jain's index (windows with {FAIRNESS_MIN_CONNECTIONS}+ connections)"
    axes.plot(times, _nan(index), color="black", marker=_marker(starts), markersize=3,
              label=label)  # fmt: skip
    axes.plot(times, _nan(floor), color="0.5", linestyle="--", linewidth=1,
              label="1/n, the floor: one of the n connections moved everything")  # fmt: skip
    handles, labels = axes.get_legend_handles_labels()
    if muted & set(starts):
        handles.append(Rectangle((0, 0), 1, 1, color="tab:red", alpha=0.12, linewidth=0))
        labels.append("window with requests muted (memory pressure)")
    figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    return figure


def _top_talkers(rows: Rows) -> Figure:
    figure, axes = _figure()
    ordered = list(reversed(rows))
    names = [f"{row['client']} ({row['connections']} conn.)" for row in ordered]
    requests = [row["request_bytes"] for row in ordered]
    axes.barh(names, requests, color="0.3", label="request bytes")
    axes.barh(
        names, [row["response_bytes"] for row in ordered], left=requests, color="0.7",
        label="response bytes",
    )  # fmt: skip
    axes.xaxis.set_major_formatter(EngFormatter(unit="B"))
    axes.set_xlabel("bytes moved (request + response)")
    axes.set_title("Top talkers by bytes moved through the proxy")
    figure.legend(loc="outside lower center", ncols=2, fontsize="small")
    return figure


def _fetch_answers(answers: Rows, held_rows: Rows) -> Figure:
    """How many fetches were not held, woken by data, expired; how long held ones waited."""
    figure, (counts, held) = _figure(_WIDE, ncols=2, width_ratios=[2, 3])
    by_kind = {row["answer"]: row for row in answers}
    kinds = [kind for kind in FETCH_ANSWERS if kind in by_kind]
    total = sum(row["requests"] for row in answers)
    counts.set_title(f"How the {total:,} fetches were answered")
    if not kinds:
        _say(counts, "no Fetch in this log")
    else:
        values = [by_kind[kind]["requests"] for kind in kinds]
        positions = list(range(len(kinds)))[::-1]  # the first kind on top
        counts.barh(positions, values, color=[_ANSWER_COLOURS[kind] for kind in kinds])
        counts.set_yticks(positions, [_ANSWER_LABELS[kind] for kind in kinds])
        for position, value in zip(positions, values, strict=True):
            counts.annotate(f"{value:,} ({value / total:.0%})", (value, position),
                            xytext=(4, 0), textcoords="offset points", va="center",
                            fontsize="small")  # fmt: skip
        counts.set_xlim(0, max(values) * 1.45)  # room for the labels right of the bars
        counts.set_xlabel("fetches")
    histogram = series.held(held_rows, HELD_BUCKET_MS, key="answer")
    held.set_title(f"Held fetches by time held ({HELD_BUCKET_MS} ms buckets)")
    held.set_xlabel("time held in the proxy's purgatory (ms)")
    if not histogram.counts:
        _say(held, "no fetch was held in the purgatory in this log")
        return figure
    # Side by side in each bucket, not stacked: on a log scale a stacked part's height is not
    # its count.
    kinds = sorted(histogram.counts, key=_answer_order)
    width = HELD_BUCKET_MS / len(kinds)
    for n, kind in enumerate(kinds):
        held.bar(
            [edge + n * width for edge in histogram.edges[:-1]], histogram.counts[kind],
            width=width, align="edge", color=_ANSWER_COLOURS.get(kind, "0.3"),
            label=_ANSWER_LABELS.get(kind, kind),
        )  # fmt: skip
    held.set_xlim(0, histogram.edges[-1])
    heights = [count for counts in histogram.counts.values() for count in counts if count]
    tallest = max(heights)
    if tallest > _LOG_SCALE_ABOVE * min(heights):
        held.set_yscale("symlog", linthresh=1)
        held.set_ylim(0, tallest * 4)  # headroom above the tallest bar for its count
        held.yaxis.set_major_formatter(EngFormatter(sep=""))
        held.set_ylabel("fetches (log scale above 1)")
    else:
        held.set_ylim(0, tallest * 1.15)
        held.yaxis.get_major_locator().set_params(integer=True)
        held.set_ylabel("fetches")
    for container in held.containers:
        held.bar_label(container, labels=[f"{int(v):,}" if v else "" for v in container.datavalues],
                       fontsize="x-small", padding=1)  # fmt: skip
    figure.legend(*held.get_legend_handles_labels(), loc="outside lower right", ncols=4,
                  fontsize="small")  # fmt: skip
    return figure


def _answer_order(kind: str) -> int:
    return list(FETCH_ANSWERS).index(kind) if kind in FETCH_ANSWERS else len(FETCH_ANSWERS)
