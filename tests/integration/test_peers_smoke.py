"""bench.peers end to end on tiny loads: every family through every route that can be had here.

The benchmark puts purgatory-proxy beside Kroxylicious and kafka-proxy in front of a real Apache
Kafka (one node; three for the latency family). This runs it as users run it, ``python -m
bench.peers --smoke``, in a subprocess (tests never import bench: tests/unit/test_layout.py),
with its report under a temporary directory, and checks that each route measured every family
with sane numbers, that a peer missing here (kafka-proxy when the Go module proxy refuses it
and no binary is given) is reported with its reason rather than dropped, and that a saved run
renders to the same report. It asserts nothing about speed: that is the benchmark's report,
and this machine is shared. Kroxylicious's jars are resolved from Maven Central into the cache
on first use, like Kafka's; with $KROXYLICIOUS_DIST (and $KROXYLICIOUS_JAVA_HOME) set, the run
starts that distribution of a later release instead, and the section must name its release.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.bench_run import run_bench

FORWARDERS = ("purgatory-proxy", "kroxylicious", "kafka-proxy")
ROUTES = ("direct", *FORWARDERS)
FAMILIES = ("throughput", "latency", "memory", "fanin", "tls")


def _bench(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_bench("peers", *args)


def _measured(rows: list[dict[str, Any]], family: str, route: str) -> list[dict[str, Any]]:
    mine = [r for r in rows if r["family"] == family and r["route"] == route]
    errors = [r["error"] for r in mine if r.get("error")]
    assert mine and not errors, (family, route, errors)
    return mine


def _check_throughput(config: dict[str, Any], rows: list[dict[str, Any]], route: str) -> None:
    mine = _measured(rows, "throughput", route)
    cells = {(r["phase"], r["record_bytes"], r["records"]) for r in mine}
    size, count = config["per_request"]
    assert cells == {
        (phase, b, n) for b, n in config["sizes"] for phase in ("produce", "consume")
    } | {("per-request", size, count)}
    for row in mine:
        assert row["seconds"] > 0 and row["mb_per_s"] > 0, row
        if route == "direct":
            assert row["cpu_s"] is None and row["peak_rss_mb"] is None
        else:
            # The kernel counts CPU in ticks: a tiny cell may read 0, never less.
            assert row["cpu_s"] >= 0 and row["peak_rss_mb"] > 1, row


def _check_latency(config: dict[str, Any], rows: list[dict[str, Any]], route: str) -> None:
    (row,) = _measured(rows, "latency", route)
    assert row["load_fraction"] == config["load_fractions"][0]
    assert row["acked"] == int(row["target_rate"] * config["latency_duration_s"]) > 0
    assert 0 < row["ack_p50_ms"] <= row["ack_p99_ms"] <= row["ack_p999_ms"], row


def _check_memory(config: dict[str, Any], rows: list[dict[str, Any]], route: str) -> None:
    (row,) = _measured(rows, "memory", route)
    assert row["connections_up"] == config["idle_connections"], row
    assert row["rss_idle_mb"] > 1 and row["rss_held_mb"] > 1, row
    # Every client connection costs the forwarder at least its own descriptor.
    assert row["fds_per_connection"] >= 1, row


def _check_fanin(config: dict[str, Any], rows: list[dict[str, Any]], route: str) -> None:
    (row,) = _measured(rows, "fanin", route)
    (n,) = config["fanin_ns"]
    assert row["up"] == n and row["missed"] == 0, row
    assert 0 < row["delivery_p50_ms"] <= row["delivery_p99_ms"], row
    assert row["answers_per_s"] > 0 and row["broker_cpu_pct"] is not None, row
    if route == "direct":
        # Kafka's own meter saw the consumers' fetches (each is answered at its max wait).
        assert row["upstream_fetch_per_s"] > 0, row
    else:
        assert row["proxy_cpu_pct"] is not None and row["fds_per_consumer"] is not None, row


def _check_tls(rows: list[dict[str, Any]], route: str) -> None:
    mine = _measured(rows, "tls", route)
    assert {(r["mode"], r["phase"]) for r in mine} == {
        (mode, phase) for mode in ("plaintext", "tls") for phase in ("produce", "consume")
    }
    assert all(r["mb_per_s"] > 0 for r in mine)


# soak: it installs the peers (Kroxylicious from Maven Central, kafka-proxy), which the issue
# keeps out of `make test`, and takes a minute; `make soak` and `make bench` run it.
@pytest.mark.soak
def test_peers_benchmark_runs_every_family_and_route(tmp_path: Path) -> None:
    saved, out = tmp_path / "run.json", tmp_path / "docs"
    measured = _bench("--smoke", "--json", saved, "--out", out)
    run = json.loads(saved.read_text())
    config, rows, versions = run["config"], run["rows"], run["versions"]
    assert tuple(config["families"]) == FAMILIES and config["rounds"] == 1

    kafka_proxy_missing = versions["kafka-proxy"].startswith("not measured: ")
    present = [r for r in ROUTES if not (r == "kafka-proxy" and kafka_proxy_missing)]
    for route in present:
        _check_throughput(config, rows, route)
        _check_latency(config, rows, route)
        _check_fanin(config, rows, route)
        _check_tls(rows, route)
        if route != "direct":
            _check_memory(config, rows, route)
    if kafka_proxy_missing:
        # Reported in every family with the reason, never silently left out.
        missing = [r for r in rows if r["route"] == "kafka-proxy"]
        assert {r["family"] for r in missing} == set(FAMILIES)
        assert all(r["error"].startswith("not measured: ") for r in missing)
        assert "--kafka-proxy-bin" in missing[0]["error"]

    # The printed tables: one per family (and the forwarders' cost), a line per route.
    printed = measured.stdout
    for title in ("Throughput", "Forwarder cost", "Acknowledgement latency", "Memory",
                  "Idle fan-in", "TLS on both sides", "Goals against this run"):  # fmt: skip
        assert f"\n{title}" in "\n" + printed, title
    for route in ROUTES:
        assert f"| {route} | " in printed, route
    if kafka_proxy_missing:
        assert "| kafka-proxy | not measured: " in printed

    # What --json saves is enough for --render to give the same report.
    assert _bench("--render", saved, "--no-write").stdout == printed

    section = (out / "benchmarks.md").read_text()
    assert "<!-- bench:peers:start -->\n## Side by side with Kroxylicious" in section
    assert "`python -m bench.peers --smoke " in section
    assert f"apache-kafka {versions['apache-kafka']}" in section
    # The release Kroxylicious's rows measured: 0.12.0 unless a distribution was given.
    kroxylicious = versions["kroxylicious"]
    if not os.environ.get("KROXYLICIOUS_DIST"):
        assert kroxylicious == "0.12.0 (kroxylicious-runtime from Maven Central)"
    assert f"kroxylicious {kroxylicious};" in section
    for family in FAMILIES:
        chart = out / "img" / f"peers-{family}.png"
        assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), family
        assert f"(img/peers-{family}.png)" in section
