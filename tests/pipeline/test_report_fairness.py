"""Fairness is Jain's index over connections, only where two or more share a window.

Recomputed in plain Python (tests/pipeline/_plain.py) over the real traffic's log (where one
client id has several connections, and the last request is alone in its window) and over the
cluster run's synthetic log.
"""

from __future__ import annotations

import collections
import math

import pytest

from pipeline.tables import FAIRNESS_MIN_CONNECTIONS
from tests.pipeline._cluster import WINDOW_S as CLUSTER_WINDOW_S
from tests.pipeline._cluster import ClusterRun
from tests.pipeline._plain import connection_bytes, jain_indexes
from tests.pipeline._traffic import WINDOW_S as TRAFFIC_WINDOW_S
from tests.pipeline._traffic import TrafficRun


@pytest.mark.parametrize("which", ["traffic", "cluster"])
def test_fairness_equals_plain_python_by_connection(
    which: str, traffic_run: TrafficRun, cluster_run: ClusterRun
) -> None:
    if which == "traffic":
        records, summary, window_s = traffic_run.log, traffic_run.summary, TRAFFIC_WINDOW_S
    else:
        records, summary, window_s = cluster_run.log.records, cluster_run.summary, CLUSTER_WINDOW_S
    fairness = summary["fairness"]
    indexes = jain_indexes(records, window_s, FAIRNESS_MIN_CONNECTIONS)
    scored = {window: index for window, index in indexes.items() if index is not None}
    assert fairness["windows"] == len(scored) > 0
    assert fairness["windows_skipped"] == len(indexes) - len(scored)
    assert math.isclose(fairness["mean"], sum(scored.values()) / len(scored))
    assert math.isclose(fairness["min"], min(scored.values()))
    worst_window = min(scored, key=lambda window: (scored[window], window))
    moved = connection_bytes(records, window_s)[worst_window]
    top_conn = max(moved, key=lambda conn: (moved[conn], -conn))  # of equals, the lowest id
    worst = fairness["worst"]
    assert worst["window_start"] == worst_window and worst["connections"] == len(moved)
    assert worst["top_conn"] == top_conn
    assert math.isclose(worst["top_share"], moved[top_conn] / sum(moved.values()))


def test_the_traffic_tells_connections_apart_and_skips_a_lone_one(traffic_run: TrafficRun) -> None:
    log = traffic_run.log
    # One client id, several connections in one window: a per-client index would merge them.
    per_window: dict[tuple[int, str], set[int]] = collections.defaultdict(set)
    for record in log:
        if record["client_id"]:
            window = math.floor(record["ts"] / TRAFFIC_WINDOW_S)
            per_window[window, record["client_id"]].add(record["conn"])
    assert max(len(conns) for conns in per_window.values()) >= 2
    # The last request was alone in its window, which is left out, not scored 1.0.
    (alone,) = [record for record in log if record["client_id"] == "alone"]
    window = math.floor(alone["ts"] / TRAFFIC_WINDOW_S) * TRAFFIC_WINDOW_S
    assert jain_indexes(log, TRAFFIC_WINDOW_S, FAIRNESS_MIN_CONNECTIONS)[window] is None
    assert traffic_run.summary["fairness"]["windows_skipped"] >= 1


def test_report_md_explains_the_scale(traffic_run: TrafficRun) -> None:
    report = (traffic_run.out / "report.md").read_text()
    section = report.split("\n## Fairness between connections\n", 1)[1].split("\n## ")[0]
    fairness = traffic_run.summary["fairness"]
    worst = fairness["worst"]
    assert f"mean {fairness['mean']:.3f}, worst {fairness['min']:.3f}" in section
    assert f"connection {worst['top_conn']} (`{worst['top_client']}`)" in section
    assert f"{fairness['windows_skipped']} with fewer are left out" in section
    for guide in ("**1.0**: every connection moved the same bytes",
                  "**1/n**: one connection moved everything", "above 0.9 is even",
                  "What to look at: a low index in windows where requests were muted"):  # fmt: skip
        assert guide in section
