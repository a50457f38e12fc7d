"""The report's plots: labels that fit, clocks that are right, waits in their own panel.

The figures are drawn (matplotlib's Agg canvas, no Spark) from rows shaped like the collected
tables of a busy log: a dozen APIs, windows the log covers in part, muting, long client ids.
What is measured is what a reader sees: every text's box on the canvas.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from pipeline.plots import PLOT_NAMES, figures
from pipeline.waits import EXPIRED, FORWARDED, NOT_HELD, WOKEN, is_wait

W = 10
#: 2026-11-25 17:25:30 UTC: the windows run over a minute boundary.
START = 1_795_627_530
SERVICE = ["ApiVersions", "FindCoordinator", "Heartbeat", "LeaveGroup", "ListOffsets",
           "Metadata", "OffsetCommit", "OffsetFetch", "Produce"]  # fmt: skip
WAITS = ["JoinGroup", "SyncGroup"]
#: Requests per API where it is not 5,000: one, too few for a p95, too few for a p99.
REQUESTS = {"LeaveGroup": 1, "Heartbeat": 12, "SyncGroup": 60}


def _latency(p50: float) -> dict[str, float]:
    return {"latency_p50_ms": p50, "latency_p95_ms": p50 * 8, "latency_p99_ms": p50 * 30}


def _tables(start: int = START, windows: int = 8) -> dict[str, list[dict[str, Any]]]:
    starts = [start + i * W for i in range(windows)]
    throughput = []
    for i, window in enumerate(starts):
        covered = 2.5 if i in (0, windows - 1) else W
        others = 14.0 if i in (0, windows - 1) else 3.0  # group traffic at the start and end
        for api, rate in (("Fetch", 150.0), ("Produce", 170.0), ("Metadata", others)):
            throughput.append({"window_start": window, "api": api, "covered_s": covered,
                               "requests": rate * covered, "requests_per_s": rate})  # fmt: skip
    return {
        "per_api": [
            {"api": api, "requests": REQUESTS.get(api, 5000), **_latency(1.0 + i)}
            for i, api in enumerate(sorted([*SERVICE, *WAITS, "Fetch"]))
        ],
        "fetch_answers": [
            {"answer": kind, "requests": n, **_latency(p50)}
            for kind, n, p50 in (
                (NOT_HELD, 551, 3.0),
                (WOKEN, 7960, 19.0),
                (EXPIRED, 243, 500.0),
                (FORWARDED, 4, 300.0),
            )
        ],
        "held_histogram": [
            {"api": "Fetch", "answer": WOKEN, "bucket_ms": 0, "requests": 7000},
            {"api": "Fetch", "answer": WOKEN, "bucket_ms": 100, "requests": 130},
            {"api": "Fetch", "answer": EXPIRED, "bucket_ms": 500, "requests": 243},
        ],
        "throughput": throughput,
        "memory_pressure": [
            {
                "window_start": window,
                "muted_ms": 40.0 * (i % 3),
                "requests": 100,
                "muted_requests": i % 3,
                "muted_share": (i % 3) / 100,
            }
            for i, window in enumerate(starts)
        ],
        "fairness": [
            {
                "window_start": window,
                "connections": 1 if i == 3 else 16,
                "jain_index": None if i == 3 else 0.4 + 0.05 * i,
            }
            for i, window in enumerate(starts)
        ],
        "top_talkers": [
            {
                "client": f"consumer-of-the-orders-topic-{n}",
                "connections": n + 1,
                "request_bytes": 1000 * (10 - n),
                "response_bytes": 50_000 * (10 - n),
            }
            for n in range(10)
        ],
    }


def _quiet_tables() -> dict[str, list[dict[str, Any]]]:
    """A short, quiet log: no muting, no fetch held, one connection at a time, and many
    service APIs beside two waits (a narrow waits panel)."""
    starts = [START, START + W]
    apis = [*SERVICE, "CreateTopics", "DescribeCluster", "Fetch", "JoinGroup"]
    return {
        "per_api": [{"api": api, "requests": 3, **_latency(2.0)} for api in sorted(apis)],
        "fetch_answers": [{"answer": NOT_HELD, "requests": 12, **_latency(2.0)}],
        "held_histogram": [],
        "throughput": [
            {
                "window_start": start,
                "api": "Fetch",
                "covered_s": 4.0,
                "requests": 6,
                "requests_per_s": 1.5,
            }
            for start in starts
        ],
        "memory_pressure": [
            {
                "window_start": start,
                "muted_ms": 0.0,
                "requests": 6,
                "muted_requests": 0,
                "muted_share": 0.0,
            }
            for start in starts
        ],
        "fairness": [
            {"window_start": start, "connections": 1, "jain_index": None} for start in starts
        ],
        "top_talkers": [
            {"client": "(none)", "connections": 1, "request_bytes": 300, "response_bytes": 900}
        ],
    }


@contextlib.contextmanager
def _drawn(tables: dict[str, list[dict[str, Any]]]) -> Iterator[dict[str, Figure]]:
    """Every plot of ``tables``, drawn on its canvas, closed when the block ends."""
    figs = figures(tables, W)
    for figure in figs.values():
        figure.canvas.draw()
    try:
        yield figs
    finally:
        for figure in figs.values():
            plt.close(figure)


@pytest.fixture(scope="module", params=["busy", "quiet"])
def drawn(request: pytest.FixtureRequest) -> Iterator[dict[str, Figure]]:
    with _drawn(_tables() if request.param == "busy" else _quiet_tables()) as figs:
        yield figs


@pytest.fixture(scope="module")
def busy() -> Iterator[dict[str, Figure]]:
    with _drawn(_tables()) as figs:
        yield figs


def _ticks(axes: Axes) -> list[tuple[float, Text]]:
    """The x tick labels drawn (ticks inside the view), with their positions."""
    low, high = sorted(axes.get_xlim())
    return [(tick.get_loc(), tick.label1) for tick in axes.xaxis.get_major_ticks()
            if low - 1e-9 <= tick.get_loc() <= high + 1e-9 and tick.label1.get_text()]  # fmt: skip


def _texts(figure: Figure) -> list[tuple[object, Text]]:
    """Every drawn text, with its owner (a legend's texts share one)."""
    found: list[tuple[object, Text]] = []
    if figure._suptitle is not None:
        found.append((figure._suptitle, figure._suptitle))
    for legend in [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]:
        found += [(legend, text) for text in legend.get_texts()]
    for axes in figure.axes:
        singles = [axes.title, axes._left_title, axes._right_title,
                   axes.xaxis.label, axes.yaxis.label, *axes.texts]  # fmt: skip
        ticks = [label for _, label in _ticks(axes)]
        low, high = sorted(axes.get_ylim())
        ticks += [tick.label1 for tick in axes.yaxis.get_major_ticks()
                  if low <= tick.get_loc() <= high]  # fmt: skip
        ticks += [tick.label2 for tick in axes.yaxis.get_major_ticks()
                  if tick.label2.get_visible() and low <= tick.get_loc() <= high]  # fmt: skip
        found += [(text, text) for text in [*singles, *ticks]]
    return [(owner, text) for owner, text in found
            if text.get_visible() and text.get_text().strip()]  # fmt: skip


def _box(artist: Text | Legend) -> Bbox:
    box: Bbox = artist.get_window_extent()
    return box


def _legends(figure: Figure) -> list[Legend]:
    return [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]


def _inside(box: Bbox, frame: Bbox) -> bool:
    return bool(box.x0 >= frame.x0 - 0.5 and box.y0 >= frame.y0 - 0.5
                and box.x1 <= frame.x1 + 0.5 and box.y1 <= frame.y1 + 0.5)  # fmt: skip


def _overlap(a: Bbox, b: Bbox) -> bool:
    shrunk = Bbox.from_extents(a.x0 + 1, a.y0 + 1, a.x1 - 1, a.y1 - 1)
    return bool(shrunk.overlaps(b))


def _rotated(text: Text) -> bool:
    return text.get_rotation() % 180 not in (0.0, 90.0)


def _line_points(figure: Figure) -> Iterator[tuple[float, float]]:
    """Points along every visible line, on the canvas (samples between its vertices)."""
    for axes in figure.axes:
        for line in axes.get_lines():
            if not line.get_visible() or line.get_alpha() == 0 or line.get_linestyle() == "None":
                continue
            xy = np.asarray(line.get_xydata(), dtype=float)
            shown = axes.transData.transform(xy)
            for (x0, y0), (x1, y1) in itertools.pairwise(shown):
                if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
                    continue
                for t in np.linspace(0, 1, 25):
                    yield x0 + (x1 - x0) * t, y0 + (y1 - y0) * t


@pytest.mark.parametrize("name", PLOT_NAMES)
def test_every_text_is_on_the_canvas_and_none_covers_another(
    drawn: dict[str, Figure], name: str
) -> None:
    figure = drawn[name]
    frame = figure.bbox
    texts = _texts(figure)
    assert texts
    for _, text in texts:
        assert _inside(_box(text), frame), (name, text.get_text(), _box(text), frame)
    boxes = [(owner, text, _box(text)) for owner, text in texts]
    boxes += [(legend, legend, _box(legend)) for legend in _legends(figure)]
    for (owner_a, a, box_a), (owner_b, b, box_b) in itertools.combinations(boxes, 2):
        if owner_a is owner_b or owner_a is b or owner_b is a:
            continue  # a legend's own texts, inside its frame
        if isinstance(a, Text) and isinstance(b, Text) and _rotated(a) and _rotated(b):
            continue  # rotated tick labels: checked apart below
        assert not _overlap(box_a, box_b), (name, str(a), str(b))


@pytest.mark.parametrize("name", PLOT_NAMES)
def test_rotated_labels_are_apart(drawn: dict[str, Figure], name: str) -> None:
    # Labels rotated by the same angle are parallel strips: they miss each other when the
    # gap between their anchors, across the strip, is at least the text's height.
    for axes in drawn[name].axes:
        ticks = [(loc, label) for loc, label in _ticks(axes) if _rotated(label)]
        for (loc_a, label_a), (loc_b, _) in itertools.pairwise(ticks):
            gap_px = abs(axes.transData.transform((loc_b, 0))[0]
                         - axes.transData.transform((loc_a, 0))[0])  # fmt: skip
            height_px = label_a.get_fontsize() * drawn[name].dpi / 72
            assert gap_px * math.sin(math.radians(label_a.get_rotation())) >= height_px


@pytest.mark.parametrize("name", PLOT_NAMES)
def test_no_legend_or_note_covers_the_data(drawn: dict[str, Figure], name: str) -> None:
    figure = drawn[name]
    notes = [*_legends(figure), *(text for axes in figure.axes for text in axes.texts)]
    points = list(_line_points(figure))
    patches = [patch for axes in figure.axes for patch in axes.patches]
    bars = [
        patch.get_window_extent()
        for patch in patches
        if isinstance(patch, Rectangle) and patch.get_height() and patch.get_width()
    ]
    for note in notes:
        box = _box(note)
        assert not any(box.contains(x, y) for x, y in points), (name, str(note))
        assert not any(_overlap(box, bar) for bar in bars), (name, str(note))


def _utc(num: float, layout: str) -> str:
    return mdates.num2date(num, tz=UTC).strftime(layout)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("name", ["throughput", "memory_pressure", "fairness"])
def test_time_ticks_read_the_time_itself(busy: dict[str, Figure], name: str) -> None:
    axes = busy[name].axes[0]
    ticks = _ticks(axes)
    assert len(ticks) >= 3
    for loc, label in ticks:
        assert label.get_text() == _utc(loc, "%H:%M:%S")
    assert axes.xaxis.get_offset_text().get_text() == ""  # nothing to add to the ticks
    assert "(UTC, 2026-11-25)" in axes.get_xlabel()
    labels = [label.get_text() for _, label in ticks]
    assert labels[0] == "17:25:30" and "17:26:40" in labels  # the windows, not a minute late


def test_time_ticks_carry_the_date_across_midnight() -> None:
    midnight = int(datetime(2026, 11, 26, tzinfo=UTC).timestamp())
    with _drawn(_tables(start=midnight - 30)) as figs:
        axes = figs["throughput"].axes[0]
        for loc, label in _ticks(axes):
            assert label.get_text() == _utc(loc, "%m-%d %H:%M:%S")
        assert "(UTC, 2026-11-25 to 2026-11-26)" in axes.get_xlabel()


def _names(axes: Axes) -> list[str]:
    """The API names of a latency panel's bars (a tick label's first line)."""
    return [label.get_text().split("\n")[0] for _, label in _ticks(axes)]


def test_latency_keeps_waits_in_their_own_panel(busy: dict[str, Figure]) -> None:
    service, waits = busy["latency_by_api"].axes
    assert _names(service) == SERVICE
    assert not any(is_wait(api) for api in SERVICE)
    fetch = ["Fetch, not held", "Fetch, woken by data", "Fetch, expired", "Fetch, forwarded"]
    assert _names(waits) == [*fetch, *WAITS]
    assert "tail to chase" in service.get_title()
    assert "Waits the protocol asks for" in waits.get_title()


def test_latency_shows_each_count_and_no_percentile_it_cannot_have(
    busy: dict[str, Figure],
) -> None:
    """Under each API its number of requests; a p95 only from 20 requests and a p99 only
    from 100 (below, each is the slowest request: one request drew three equal bars)."""
    service, waits = busy["latency_by_api"].axes
    rows = {row["api"]: row for row in _tables()["per_api"]}
    for axes in (service, waits):
        bars_at: dict[int, int] = collections.Counter()
        for patch in axes.patches:
            bars_at[round(patch.get_x() + patch.get_width() / 2)] += 1
        for loc, label in _ticks(axes):
            name, count = label.get_text().split("\n")
            if name.startswith("Fetch, "):
                continue
            requests = rows[name]["requests"]
            assert count == f"n={requests:,}"
            expected = 1 + (requests >= 20) + (requests >= 100)
            assert bars_at[round(loc)] == expected, (name, requests)
    legend = [text.get_text() for text in busy["latency_by_api"].legends[0].get_texts()]
    assert legend == ["p50", "p95 (n ≥ 20)", "p99 (n ≥ 100)"]


@pytest.mark.parametrize(
    ("counts", "scale"), [((2, 6), "linear"), ((7000, 130, 2), "symlog")], ids=["few", "many"]
)
def test_held_histogram_shows_every_count(counts: tuple[int, ...], scale: str) -> None:
    """On the log axis, counts between its decades (2, 6) had no tick to be read against: each
    bar carries its count, and close counts get a linear axis."""
    tables = _tables()
    tables["held_histogram"] = [
        {"api": "Fetch", "answer": EXPIRED, "bucket_ms": 450 + 50 * n, "requests": count}
        for n, count in enumerate(counts)
    ]
    with _drawn(tables) as figs:
        _, held = figs["fetch_answers"].axes
        assert held.get_yscale() == scale
        said = sorted(text.get_text() for text in held.texts if text.get_text())
        assert said == sorted(f"{c:,}" for c in counts)


def test_fetch_answers_counts_every_kind(busy: dict[str, Figure]) -> None:
    counts, held = busy["fetch_answers"].axes
    bars = {round(patch.get_width()) for patch in counts.patches}
    assert bars == {551, 7960, 243, 4}
    top_down = sorted(counts.yaxis.get_major_ticks(), key=lambda tick: -tick.get_loc())
    names = ["not held", "woken by data", "expired", "forwarded"]  # FETCH_ANSWERS' order
    assert [tick.label1.get_text() for tick in top_down] == names
    assert "8,758 fetches" in counts.get_title()
    notes = {text.get_text() for text in counts.texts}
    assert {"551 (6%)", "7,960 (91%)", "243 (3%)", "4 (0%)"} == notes
    stacked = {round(patch.get_height()) for patch in held.patches if patch.get_height()}
    assert stacked == {7000, 130, 243}


def test_figures_are_lines_the_reader_can_match(busy: dict[str, Figure]) -> None:
    # Throughput: one line per highlighted API plus the summed others, the hollow markers
    # named in the legend (not written over the plot).
    (axes,) = busy["throughput"].axes
    legend_texts = [text.get_text() for text in busy["throughput"].legends[0].get_texts()]
    assert legend_texts[-1].startswith("hollow: window the log covers in part")
    assert not axes.texts
    assert all(isinstance(line, Line2D) for line in axes.get_lines())
