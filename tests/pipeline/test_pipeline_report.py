"""The PySpark report over a request log written by the real proxy under real traffic.

The traffic and the report are tests/pipeline/_traffic.py's; every count is compared with
plain Python over the same file.
"""

from __future__ import annotations

import collections
import math
import re

import matplotlib.image
import pytest

from pipeline.plots import PLOT_NAMES
from pipeline.report import TABLES
from pipeline.tables import ACCURACY, NO_CLIENT
from tests.pipeline._plain import client_names
from tests.pipeline._traffic import TrafficRun


@pytest.fixture
def run(traffic_run: TrafficRun) -> TrafficRun:
    return traffic_run


def test_the_log_saw_what_the_traffic_did(run: TrafficRun) -> None:
    clients = {record["client_id"] for record in run.log}
    assert {"producer-0", "producer-1", "producer-2", "consumer", "poller"} <= clients
    produced = [r for r in run.log if r["api"] == "Produce" and r["client_id"].startswith("p")]
    assert len(produced) == 24 and all(r["outcome"] == "ok" for r in produced)
    polls = [r for r in run.log if r["client_id"] == "poller"]
    # Long-polls on an empty topic end at max_wait_ms with no data.
    assert len(polls) == 4 and all(r["latency_ms"] >= 300 for r in polls[1:])
    assert any(r["muted_ms"] > 0 for r in run.log)
    # The poller uses the bootstrap port, where fetches are forwarded; the consumer's fetches
    # reach a broker port and wait in the proxy's purgatory, which is part of their latency.
    fetches = [r for r in run.log if r["client_id"] == "consumer" and r["api"] == "Fetch"]
    assert any(r["held_ms"] > 0 and r["outcome"] == "expired" for r in fetches)
    assert all(r["held_ms"] == 0 for r in polls)
    assert all(0 <= r["held_ms"] <= r["latency_ms"] for r in run.log)


def test_counts_equal_plain_python(run: TrafficRun) -> None:
    summary = run.summary
    assert summary["lines"] == len(run.log)
    per_api = collections.Counter(record["api"] for record in run.log)
    assert {api: row["count"] for api, row in summary["apis"].items()} == dict(per_api)
    outcomes = collections.Counter(record["outcome"] for record in run.log)
    assert summary["outcomes"] == dict(outcomes)
    errors = collections.Counter(r["api"] for r in run.log if r["outcome"] == "error")
    assert {api: row["errors"] for api, row in summary["apis"].items() if row["errors"]} == dict(
        errors
    )
    assert summary["malformed_lines"] == 0
    brokers = collections.Counter(record["broker"] for record in run.log)
    assert {broker: row["count"] for broker, row in summary["brokers"].items()} == dict(brokers)
    broker_errors = collections.Counter(r["broker"] for r in run.log if r["outcome"] == "error")
    assert {b: row["errors"] for b, row in summary["brokers"].items() if row["errors"]} == dict(
        broker_errors
    )
    codes = collections.Counter((r["error_code"], r["api"]) for r in run.log if r["error_code"])
    assert {(r["error_code"], r["api"]): r["requests"] for r in summary["errors_by_code"]} == dict(
        codes
    )
    times = [record["ts"] for record in run.log]
    span = summary["time_range"]
    assert (span["first_ts"], span["last_ts"]) == (min(times), max(times))
    muted = [record for record in run.log if record["muted_ms"] > 0]
    assert summary["muted_requests"] == len(muted) > 0
    assert math.isclose(summary["muted_ms_total"], sum(r["muted_ms"] for r in muted))
    talkers: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for record, client in zip(run.log, client_names(run.log), strict=True):
        talker = talkers[client]
        talker[0] += 1
        talker[1] += record["request_bytes"] + record["response_bytes"]
    expected = sorted(talkers.items(), key=lambda item: (-item[1][1], item[0]))[:10]
    assert [(t["client"], t["requests"], t["bytes"]) for t in summary["top_talkers"]] == [
        (client, requests, moved) for client, (requests, moved) in expected
    ]


def test_the_proxys_own_answers_are_their_connections_clients(run: TrafficRun) -> None:
    """The proxy answers each connection's ApiVersions itself, with no client id in the log:
    the report names them by their connection, so "(none)" is no top talker of this log."""
    own = [r for r in run.log if r["broker"] == "local" and r["client_id"] is None]
    assert own, "the traffic has no answer of the proxy's own"
    named = {r["conn"] for r in run.log if r["client_id"]}
    assert all(r["conn"] in named for r in own)
    assert NO_CLIENT not in {talker["client"] for talker in run.summary["top_talkers"]}
    assert run.summary["warnings"] == []  # one proxy's log: nothing merged


def test_percentiles_are_within_percentile_approx_tolerance(run: TrafficRun) -> None:
    for api, row in run.summary["apis"].items():
        latencies = sorted(r["latency_ms"] for r in run.log if r["api"] == api)
        n = len(latencies)
        slack = math.ceil(n / ACCURACY) + 1  # rank error of the sketch, plus rank rounding
        for p, got in ((0.5, row["p50_ms"]), (0.95, row["p95_ms"]), (0.99, row["p99_ms"])):
            rank = max(0, math.ceil(p * n) - 1)
            low, high = latencies[max(0, rank - slack)], latencies[min(n - 1, rank + slack)]
            assert low <= got <= high, (api, p, got, low, high)


def test_progress_lines_and_no_spark_noise(run: TrafficRun) -> None:
    # One numbered line per stage, the reading stage with the line count; by default neither
    # Spark's console progress bar nor the JVM's log4j output reaches the terminal.
    stages = re.findall(r"^\[\s*(\d+)/(\d+)\] +[\d.]+ s  (.*)$", run.stderr, re.MULTILINE)
    numbers = [int(number) for number, _, _ in stages]
    total = int(stages[0][1])
    assert sorted(set(numbers)) == list(range(1, total + 1)) and total >= 12
    assert f": {len(run.log):,} lines" in run.stderr
    for line in run.stderr.splitlines():
        assert re.match(r"^\[\s*\d+/\d+\] ", line), line


def test_outputs_exist_and_plots_are_images(run: TrafficRun) -> None:
    assert f"report written to {run.out} ({len(run.log)} requests)" in run.stdout
    report = (run.out / "report.md").read_text()
    assert f"{run.summary['lines']} requests" in report
    assert f"first request: {run.summary['time_range']['first_utc']}" in report
    assert "## Per broker" in report and "## Errors by code" in report
    for name in TABLES:
        table = run.out / "tables" / name
        assert (table / "_SUCCESS").exists()
        assert list(table.glob("*.parquet"))
    plots = sorted((run.out / "plots").glob("*.png"))
    assert {p.name for p in plots} == {f"{name}.png" for name in PLOT_NAMES}
    for plot in plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = matplotlib.image.imread(plot).shape
        assert height > 100 and width > 100
        assert f"]({plot.relative_to(run.out)})" in report
