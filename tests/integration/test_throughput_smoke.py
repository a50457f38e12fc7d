"""Smoke test of bench/throughput.py: every route and phase runs end to end on tiny sizes.

It proves the benchmark still works against the real broker, the real proxy and the real
`tansu proxy` (so `make bench` will not discover breakage after a 10-minute wait) and that
its output is well-formed. It asserts nothing about speed: timings on this shared 2-core
machine are noise at these sizes, and speed targets belong to the benchmark itself.
"""

from __future__ import annotations

import json

from bench.throughput import (
    ROUTES,
    Config,
    markdown,
    plot,
    ratio_table,
    results_from_rows,
    run,
    summary_rows,
)

TINY = Config(
    sizes=((100, 300), (1024, 200)),
    per_request=(100, 50),
    rounds=1,
    load_fractions=(0.5,),
    latency_duration_s=1.0,
    latency_warmup_s=0.2,
)


def test_throughput_benchmark_runs_end_to_end(tmp_path):
    logged: list[str] = []
    results = run(TINY, log=logged.append)

    throughput = [r for r in results.rows if r["phase"] != "latency"]
    cells = {(r["phase"], r["route"], r["record_bytes"]) for r in throughput}
    expected = {
        (phase, route, size)
        for route in ROUTES
        for phase, size in [("produce", 100), ("consume", 100), ("produce", 1024),
                            ("consume", 1024), ("produce-per-request", 100)]
    }  # fmt: skip
    assert cells == expected
    for row in throughput:
        assert row["seconds"] > 0 and row["records_per_s"] > 0 and row["mb_per_s"] > 0
        if row["route"] == "direct":
            assert row["forwarder_cpu_s_per_gib"] is None
        else:
            # Measured (the kernel counts CPU in 10 ms ticks, so a tiny run may read 0).
            assert row["forwarder_cpu_s"] >= 0 and row["forwarder_cpu_s_per_gib"] is not None
            assert row["forwarder_peak_rss_mb"] > 1

    latency = [r for r in results.rows if r["phase"] == "latency"]
    assert sorted(r["route"] for r in latency) == sorted(ROUTES)
    direct_rate = next(
        r["records_per_s"] for r in throughput
        if (r["phase"], r["route"], r["record_bytes"]) == ("produce", "direct", 1024)
    )  # fmt: skip
    for row in latency:
        assert row["target_rate"] == 0.5 * direct_rate
        assert row["acked"] == int(row["target_rate"] * TINY.latency_duration_s)
        # Every percentile exists and they are ordered; nothing about their size.
        assert 0 < row["ack_p50_ms"] <= row["ack_p99_ms"] <= row["ack_p999_ms"]
        assert 0 < row["e2e_p50_ms"] <= row["e2e_p99_ms"]
    assert set(results.ack) == {(route, 0.5) for route in ROUTES}

    # What --json saves is enough for --render to rebuild the same report.
    saved = json.loads(json.dumps(results.rows))
    assert ratio_table(TINY, results_from_rows(saved)) == ratio_table(TINY, results)
    labels = [label for label, _ in summary_rows(TINY, results)]
    table = ratio_table(TINY, results)
    assert len(table.splitlines()) == 2 + len(labels)
    assert all(f"| {label} |" in table for label in labels)
    assert "| produce 1 KiB MB/s |" in table and "proxy/tansu-proxy" in table

    chart = tmp_path / "throughput.png"
    plot(TINY, results, chart)
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    section = markdown(TINY, results, "test", 1.0, "### Profile")
    assert section.startswith("## Forwarding throughput") and table in section
    assert len(logged) == 3 * len(ROUTES) + len(ROUTES)
