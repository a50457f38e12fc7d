"""The report on a standalone Spark cluster (master + worker on loopback), with Hadoop URIs.

A seeded synthetic log (the proxy's own record encoder; testbed/synthetic_log.py) of 20,000
requests on four brokers, with top-level error codes, muting, holds and expiries, split like
a rotated log into ``requests.jsonl.1`` and ``requests.jsonl``, the latter ending in a torn
line (a crash mid-write). ``purgatory-proxy report`` runs with ``--master spark://...`` and
``file://`` URIs for both --logs (a glob) and --out, so the executors on the worker read the
logs and write the tables, and the driver writes report.md and the PNGs through Hadoop's
filesystem API.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.synthetic_log import synthetic_records
from tests.pipeline._plain import Log, read_log
from tests.pipeline._standalone import standalone_cluster

__all__ = ["LINES", "TORN", "WINDOW_S", "ClusterRun", "report_on_cluster"]

ROOT = Path(__file__).resolve().parents[2]
WINDOW_S = 10
LINES = 20_000
TORN = '{"ts":1795132999.5,"api":"Fet'


@dataclass
class ClusterRun:
    """The synthetic log as plain Python reads it, and what the report made of it."""

    log: Log
    summary: dict[str, Any]
    out: Path
    master_state: dict[str, Any]
    executor_logs: list[Path]


def report_on_cluster(work: Path) -> ClusterRun:
    """Write the synthetic log under ``work``, report on it on a cluster started for it."""
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
    return ClusterRun(read_log([older, newer]), summary, out, state, executor_logs)
