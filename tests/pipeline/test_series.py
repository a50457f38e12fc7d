"""The plots' series (pipeline/series.py): gaps are zeros, edges are honest, APIs are grouped.

Pure functions over table rows shaped like the collected Spark tables; no Spark needed.
"""

from __future__ import annotations

from typing import Any

from pipeline import series

W = 10


def _tp(start: int, api: str, requests: int, covered_s: float = W) -> dict[str, Any]:
    return {"window_start": start, "api": api, "requests": requests, "covered_s": covered_s,
            "requests_per_s": requests / covered_s}  # fmt: skip


def test_throughput_fills_quiet_windows_with_zero_and_sums_other_apis() -> None:
    rows = [
        _tp(100, "Fetch", 50), _tp(100, "Metadata", 10), _tp(100, "Heartbeat", 20),
        _tp(130, "Fetch", 30), _tp(130, "Produce", 40),
    ]  # fmt: skip
    data = series.throughput(rows, W)
    assert data.starts == [100, 110, 120, 130]
    assert data.series == {
        "Fetch": [5.0, 0.0, 0.0, 3.0],
        "Produce": [0.0, 0.0, 0.0, 4.0],
        series.OTHER_APIS: [3.0, 0.0, 0.0, 0.0],
    }
    assert data.others == ["Heartbeat", "Metadata"] and data.partial == [False] * 4


def test_throughput_marks_the_windows_the_log_covers_in_part() -> None:
    rows = [_tp(100, "Fetch", 1, covered_s=2.0), _tp(110, "Fetch", 70), _tp(120, "Fetch", 8, 4.0)]
    data = series.throughput(rows, W)
    assert data.starts == [100, 110, 120] and data.partial == [True, False, True]
    assert data.series == {"Fetch": [0.5, 7.0, 2.0]}
    assert series.throughput([], W) == series.Throughput([], {}, [], [])


def test_per_window_marks_missing_windows() -> None:
    rows = [{"window_start": 0, "muted_share": 0.5}, {"window_start": 20, "muted_share": 0.0}]
    starts = series.window_starts(rows, W)
    assert starts == [0, 10, 20]
    assert series.per_window(rows, "muted_share", starts, None) == [0.5, None, 0.0]
    assert series.per_window(rows, "muted_share", starts, 0.0) == [0.5, 0.0, 0.0]


def test_held_histogram_has_every_bucket_up_to_the_largest() -> None:
    rows = [
        {"api": "Fetch", "bucket_ms": 0, "requests": 4},
        {"api": "Fetch", "bucket_ms": 150, "requests": 1},
        {"api": "Produce", "bucket_ms": 50, "requests": 2},
    ]
    histogram = series.held(rows, 50, key="api")
    assert histogram.edges == [0, 50, 100, 150, 200]
    assert histogram.counts == {"Fetch": [4, 0, 0, 1], "Produce": [0, 2, 0, 0]}
    assert series.held([], 50, key="api") == series.Held([], {})
