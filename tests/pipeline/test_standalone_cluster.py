"""The report on a standalone Spark cluster, with Hadoop URIs (tests/pipeline/_cluster.py).

Every figure of summary.json is compared with plain Python over the same files.
"""

from __future__ import annotations

import math

import matplotlib.image
import pytest

from pipeline.tables import ACCURACY
from pipeline.waits import is_wait
from tests.pipeline._cluster import LINES, ClusterRun
from tests.pipeline._plain import client_names, percentile_bounds


@pytest.fixture
def run(cluster_run: ClusterRun) -> ClusterRun:
    return cluster_run


def test_the_report_ran_on_the_cluster(run: ClusterRun) -> None:
    apps = run.master_state["completedapps"] + run.master_state["activeapps"]
    assert [app["name"] for app in apps] == ["purgatory-proxy-report"]
    assert run.executor_logs, "no executor ran on the worker"


def test_counts_equal_plain_python(run: ClusterRun) -> None:
    summary, log = run.summary, run.log
    assert summary["lines"] == len(log.records) == LINES
    assert summary["malformed_lines"] == log.malformed == 1
    assert {api: row["count"] for api, row in summary["apis"].items()} == log.count("api")
    apis_with_errors = {api: row["errors"] for api, row in summary["apis"].items() if row["errors"]}
    assert apis_with_errors == log.errors("api")
    assert {b: row["count"] for b, row in summary["brokers"].items()} == log.count("broker")
    brokers_with_errors = {b: r["errors"] for b, r in summary["brokers"].items() if r["errors"]}
    assert brokers_with_errors == log.errors("broker")
    assert summary["outcomes"] == log.count("outcome")
    by_code = {
        (row["error_code"], row["api"]): row["requests"] for row in summary["errors_by_code"]
    }
    assert by_code == log.error_codes() and len(by_code) > 3
    times = [record["ts"] for record in log.records]
    assert (summary["time_range"]["first_ts"], summary["time_range"]["last_ts"]) == (
        min(times),
        max(times),
    )
    muted = [record for record in log.records if record["muted_ms"] > 0]
    assert summary["muted_requests"] == len(muted) > 0
    assert math.isclose(summary["muted_ms_total"], sum(r["muted_ms"] for r in muted))


def test_top_talkers_equal_plain_python(run: ClusterRun) -> None:
    talkers: dict[str, list[int]] = {}
    for record, client in zip(run.log.records, client_names(run.log.records), strict=True):
        talker = talkers.setdefault(client, [0, 0])
        talker[0] += 1
        talker[1] += record["request_bytes"] + record["response_bytes"]
    expected = sorted(talkers.items(), key=lambda item: (-item[1][1], item[0]))[:10]
    assert [(t["client"], t["requests"], t["bytes"]) for t in run.summary["top_talkers"]] == [
        (client, requests, moved) for client, (requests, moved) in expected
    ]


def test_percentiles_are_within_percentile_approx_tolerance(run: ClusterRun) -> None:
    # Per broker: over its service requests only (pipeline/waits.py).
    for name, field in (("apis", "api"), ("brokers", "broker")):
        for key, row in run.summary[name].items():
            latencies = [
                r["latency_ms"]
                for r in run.log.records
                if r[field] == key and (name == "apis" or not is_wait(r["api"]))
            ]
            for p, got in ((0.5, row["p50_ms"]), (0.95, row["p95_ms"]), (0.99, row["p99_ms"])):
                low, high = percentile_bounds(latencies, p, ACCURACY)
                assert low <= got <= high, (key, p, got, low, high)


def test_everything_landed_under_the_out_uri(run: ClusterRun) -> None:
    for name in ("per_api", "per_client", "per_broker", "throughput", "purgatory_outcomes",
                 "fetch_answers", "held_histogram", "memory_pressure", "fairness",
                 "top_talkers", "errors_by_code"):  # fmt: skip
        table = run.out / "tables" / name
        assert (table / "_SUCCESS").exists() and len(list(table.glob("*.parquet"))) == 1
    report = (run.out / "report.md").read_text()
    for heading in ("## Service latency per API", "## Per broker", "## Outcomes",
                    "## Errors by code"):  # fmt: skip
        assert heading in report
    first = run.summary["time_range"]["first_utc"]
    assert f"first request: {first}" in report and "1 malformed lines skipped" in report
    for plot in sorted((run.out / "plots").glob("*.png")):
        assert f"](plots/{plot.name})" in report
        height, width, _ = matplotlib.image.imread(plot).shape
        assert height > 100 and width > 100
