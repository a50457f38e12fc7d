"""Smoke test of bench.throughput: every route and phase runs end to end on tiny sizes.

It proves the benchmark still works against the real broker, the real proxy and the real
`tansu proxy` (so `make bench` will not discover breakage after a 10-minute wait) and that
its output is well-formed. It asserts nothing about speed: timings on this shared 2-core
machine are noise at these sizes, and speed targets belong to the benchmark itself.

The benchmark runs as users run it, ``python -m bench.throughput --smoke``, in a subprocess:
tests never import bench (tests/unit/test_layout.py). Its report goes to ``--out`` in a
temporary directory, so no tracked file changes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.bench_run import run_bench

ROUTES = ("direct", "purgatory-proxy", "tansu-proxy")
#: bench.throughput's SMOKE config: (phase, record bytes) cells and the one offered load.
CELLS = [("produce", 100), ("consume", 100), ("produce", 1024), ("consume", 1024),
         ("produce-per-request", 100)]  # fmt: skip
LOAD = 0.5
LATENCY_S = 1.0


def _bench(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_bench("throughput", "--smoke", *args)


def test_throughput_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    out = tmp_path / "docs"
    measured = _bench("--json", saved, "--out", out)
    rows = json.loads(saved.read_text())["rows"]

    throughput = [r for r in rows if r["phase"] != "latency"]
    cells = {(r["phase"], r["route"], r["record_bytes"]) for r in throughput}
    assert cells == {(phase, route, size) for route in ROUTES for phase, size in CELLS}
    for row in throughput:
        assert row["seconds"] > 0 and row["records_per_s"] > 0 and row["mb_per_s"] > 0
        if row["route"] == "direct":
            assert row["forwarder_cpu_s_per_gib"] is None
        else:
            # Measured (the kernel counts CPU in 10 ms ticks, so a tiny run may read 0).
            assert row["forwarder_cpu_s"] >= 0 and row["forwarder_cpu_s_per_gib"] is not None
            assert row["forwarder_peak_rss_mb"] > 1

    latency = [r for r in rows if r["phase"] == "latency"]
    assert sorted(r["route"] for r in latency) == sorted(ROUTES)
    direct_rate = next(
        r["records_per_s"] for r in throughput
        if (r["phase"], r["route"], r["record_bytes"]) == ("produce", "direct", 1024)
    )  # fmt: skip
    for row in latency:
        assert row["load_fraction"] == LOAD
        assert row["target_rate"] == LOAD * direct_rate
        assert row["acked"] == int(row["target_rate"] * LATENCY_S)
        # Every percentile exists and they are ordered; nothing about their size.
        assert 0 < row["ack_p50_ms"] <= row["ack_p99_ms"] <= row["ack_p999_ms"]
        assert 0 < row["e2e_p50_ms"] <= row["e2e_p99_ms"]
    # One progress line per (route, size) cell and per (route, load).
    progress = [line for line in measured.stderr.splitlines() if line.startswith("round ")]
    assert len(progress) == 3 * len(ROUTES) + len(ROUTES)

    # The printed ratio table: a row per metric, both ratios, a value for every route.
    table = measured.stdout.split("\n\n")[0].splitlines()
    assert table[0] == (
        "| metric | " + " | ".join(ROUTES) + " | proxy ÷ direct | proxy ÷ tansu-proxy |"
    )
    labels = [line.split(" | ")[0].removeprefix("| ") for line in table[2:]]
    assert labels[:4] == ["produce 100 B MB/s", "produce 1 KiB MB/s",
                          "consume 100 B MB/s", "consume 1 KiB MB/s"]  # fmt: skip
    assert len(labels) == 5 + 5  # four sizes x phases, per-request; five latency figures
    for line in table[2:]:
        assert " - |" not in line.split(" | ", 1)[1], line

    # What --json saves is enough for --render to rebuild the same report.
    assert _bench("--render", saved, "--no-write").stdout == measured.stdout

    chart = out / "img" / "throughput.png"
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    section = (out / "benchmarks.md").read_text()
    assert "<!-- bench:throughput:start -->\n## Forwarding throughput" in section
    assert "\n".join(table) in section and "python -m bench.throughput --smoke" in section
