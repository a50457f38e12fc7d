"""What the report leaves on disk, and what it finds before it starts Spark.

No Hadoop ``.crc`` file in either report (the local one and the one a Spark cluster's
executors wrote). A missing or empty local log is reported before Spark starts: the command
runs with a ``SPARK_HOME`` that holds no Spark, so a report that started it would fail
otherwise, and its wall time is printed for the record (run with ``-s`` to see it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.inputs import empty_message, missing_message, unusable_local_logs
from tests.pipeline._cluster import ClusterRun
from tests.pipeline._traffic import TrafficRun

ROOT = Path(__file__).resolve().parents[2]


def test_no_crc_files_in_either_report(traffic_run: TrafficRun, cluster_run: ClusterRun) -> None:
    for out in (traffic_run.out, cluster_run.out):
        assert (out / "report.md").exists()
        assert sorted(out.rglob("*.crc")) == []


@pytest.mark.parametrize("case", ["missing", "empty", "blank-lines", "empty-folder"])
def test_missing_or_empty_log_is_found_before_spark_starts(tmp_path: Path, case: str) -> None:
    logs = str(tmp_path / "requests.jsonl*")
    if case == "empty":
        (tmp_path / "requests.jsonl").write_text("")
    elif case == "blank-lines":
        (tmp_path / "requests.jsonl").write_text("\n  \n\n")
    elif case == "empty-folder":
        (tmp_path / "requests.jsonl.d").mkdir()
        (tmp_path / "requests.jsonl.d" / "_SUCCESS").write_text("not a log line")
    no_spark = tmp_path / "no-spark"
    no_spark.mkdir()
    command = [sys.executable, "-m", "proxy", "report", "--logs", logs,
               "--out", str(tmp_path / "report")]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "SPARK_HOME": str(no_spark)},
    )  # fmt: skip
    elapsed_s = time.monotonic() - started
    print(f"{case}: exit {done.returncode} in {elapsed_s:.2f} s")
    message = missing_message(logs) if case == "missing" else empty_message(logs)
    assert (done.returncode, done.stderr, done.stdout) == (
        2,
        f"purgatory-proxy report: {message}\n",
        "",
    )
    assert not (tmp_path / "report").exists()


def test_what_it_cannot_read_as_hadoop_does_is_left_to_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "requests.jsonl"
    log.write_text('{"ts":1.0,"api":"Fetch"}\n')
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    assert unusable_local_logs(str(log)) is None
    assert unusable_local_logs(f"{tmp_path.as_uri()}/requests.jsonl*") is None
    missing = f"{tmp_path.as_uri()}/gone.jsonl"
    assert unusable_local_logs(missing) == missing_message(missing)
    # Not local, or a glob only Hadoop reads: Spark's own check answers, in the same words.
    for logs in ("hdfs://nn/logs/gone*", "s3a://bucket/gone*", f"{tmp_path}/{{gone,lost}}*"):
        assert unusable_local_logs(logs) is None
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))  # a plain path may be on HDFS now
    assert unusable_local_logs(str(tmp_path / "gone.jsonl")) is None
