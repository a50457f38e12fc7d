"""Two proxy processes' logs read as one: the report says so instead of halving counts.

Each proxy process numbers its connections from 1, so two processes' logs read together merge
their connection 1s, 2s ... into one: connection counts, fairness and top talkers would be
quietly wrong. Here the real traffic's log (tests/pipeline/_traffic.py) stands for both
processes, the second an hour later, as two files of one glob, the way an operator collects
logs; the report over them must warn on stderr, in report.md and in summary.json, while the
report over the one process's log (the traffic run itself) has no warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.pipeline._traffic import TrafficRun

ROOT = Path(__file__).resolve().parents[2]


def test_two_processes_logs_are_flagged(traffic_run: TrafficRun, tmp_path: Path) -> None:
    for name, shift_s in (("proxy-a.jsonl", 0.0), ("proxy-b.jsonl", 3600.0)):
        lines = [json.dumps({**record, "ts": record["ts"] + shift_s}) for record in traffic_run.log]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "report"
    command = [sys.executable, "-m", "proxy", "report", "--logs", str(tmp_path / "*.jsonl"),
               "--out", str(out), "--master", "local[2]"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # Connections whose ApiVersions handshake succeeded, each once per process.
    handshakes = {
        r["conn"] for r in traffic_run.log if r["api"] == "ApiVersions" and r["error_code"] == 0
    }
    assert handshakes
    summary = json.loads((out / "summary.json").read_text())
    [warning] = summary["warnings"]
    assert warning.startswith(f"{len(handshakes):,} connection id(s) each carry the ApiVersions")
    assert "more than one proxy process" in warning
    assert f"purgatory-proxy report: warning: {warning}" in done.stderr.splitlines()
    assert f"- **Warning**: {warning}." in (out / "report.md").read_text()
    assert traffic_run.summary["warnings"] == []
