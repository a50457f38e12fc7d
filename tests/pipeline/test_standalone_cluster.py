"""The report on a standalone Spark cluster (master + worker on loopback), with Hadoop URIs.

A seeded synthetic log (the proxy's own record encoder; testbed/synthetic_log.py) of 20,000
requests on four brokers, with top-level error codes, muting, holds and expiries, split like
a rotated log into ``requests.jsonl.1`` and ``requests.jsonl``, the latter ending in a torn
line (a crash mid-write). ``purgatory-proxy report`` runs with ``--master spark://...`` and
``file://`` URIs for both --logs (a glob) and --out, so the executors on the worker read the
logs and write the tables, and the driver writes report.md and the PNGs through Hadoop's
filesystem API. Every figure of summary.json is compared with plain Python over the same files.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from pipeline.tables import ACCURACY, NO_CLIENT
from testbed.synthetic_log import synthetic_records
from tests.pipeline._plain import Log, jain_indexes, percentile_bounds, read_log
from tests.pipeline._standalone import standalone_cluster

ROOT = Path(__file__).resolve().parents[2]
WINDOW_S = 10
LINES = 20_000
TORN = '{"ts":1795132999.5,"api":"Fet'


@dataclass
class ClusterRun:
    log: Log
    summary: dict[str, Any]
    out: Path
    master_state: dict[str, Any]
    executor_logs: list[Path]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterRun]:
    work = tmp_path_factory.mktemp("cluster")
    lines = [record.to_json() for record in synthetic_records(LINES, seed=7)]
    older, newer = work / "requests.jsonl.1", work / "requests.jsonl"
    older.write_text("\n".join(lines[: LINES // 2]) + "\n")
    newer.write_text("\n".join(lines[LINES // 2 :]) + "\n" + TORN)
    out = work / "report"
    with standalone_cluster(work / "spark") as cluster:
        command = [
            sys.executable, "-m", "proxy", "report", "--logs", f"{work.as_uri()}/requests.jsonl*",
            "--out", out.as_uri(), "--master", cluster.url, "--window-s", str(WINDOW_S),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
        state = cluster.state()
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    executor_logs = sorted((work / "spark" / "worker").glob("app-*/*/stderr"))
    yield ClusterRun(read_log([older, newer]), summary, out, state, executor_logs)


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


def test_fairness_and_top_talkers_equal_plain_python(run: ClusterRun) -> None:
    indexes = jain_indexes(run.log.records, WINDOW_S, NO_CLIENT)
    assert math.isclose(run.summary["jain_index_mean"], sum(indexes) / len(indexes))
    assert math.isclose(run.summary["jain_index_min"], min(indexes))
    talkers: dict[str, list[int]] = {}
    for record in run.log.records:
        talker = talkers.setdefault(record["client_id"] or NO_CLIENT, [0, 0])
        talker[0] += 1
        talker[1] += record["request_bytes"] + record["response_bytes"]
    expected = sorted(talkers.items(), key=lambda item: (-item[1][1], item[0]))[:10]
    assert [(t["client"], t["requests"], t["bytes"]) for t in run.summary["top_talkers"]] == [
        (client, requests, moved) for client, (requests, moved) in expected
    ]


def test_percentiles_are_within_percentile_approx_tolerance(run: ClusterRun) -> None:
    for name, field in (("apis", "api"), ("brokers", "broker")):
        for key, row in run.summary[name].items():
            latencies = [r["latency_ms"] for r in run.log.records if r[field] == key]
            for p, got in ((0.5, row["p50_ms"]), (0.95, row["p95_ms"]), (0.99, row["p99_ms"])):
                low, high = percentile_bounds(latencies, p, ACCURACY)
                assert low <= got <= high, (key, p, got, low, high)


def test_everything_landed_under_the_out_uri(run: ClusterRun) -> None:
    for name in ("per_api", "per_client", "per_broker", "throughput", "purgatory_outcomes",
                 "held_histogram", "memory_pressure", "fairness", "top_talkers",
                 "errors_by_code"):  # fmt: skip
        table = run.out / "tables" / name
        assert (table / "_SUCCESS").exists() and len(list(table.glob("*.parquet"))) == 1
    report = (run.out / "report.md").read_text()
    for heading in ("## Per API", "## Per broker", "## Outcomes", "## Errors by code"):
        assert heading in report
    first = run.summary["time_range"]["first_utc"]
    assert f"first request: {first}" in report and "1 malformed lines skipped" in report
    for plot in sorted((run.out / "plots").glob("*.png")):
        assert f"](plots/{plot.name})" in report
        height, width, _ = matplotlib.image.imread(plot).shape
        assert height > 100 and width > 100
