"""bench.relay_floor end to end on a tiny load: every route consumes through a real Tansu.

The benchmark puts the proxy beside two cut-through relays (the floor of any forwarder on this
machine) for issue 17's consume goal. This checks that each route, the relays' splice and
copy paths included, delivers every record and that the section is well-formed, so
`make bench` does not find it broken after minutes. It asserts nothing about speed: that is
the benchmark's report, and this machine is shared.

It runs as users run it, ``python -m bench.relay_floor --no-write``, in a subprocess: tests
never import bench (tests/unit/test_layout.py), and no tracked file changes.
"""

from __future__ import annotations

from tests.support.bench_run import run_bench

ROUTES = ["direct", "copy", "splice", "proxy"]


def test_relay_floor_benchmark_runs_every_route() -> None:
    done = run_bench("relay_floor", "--rounds", "1", "--records", "2000", "--no-write")
    lines = done.stdout.splitlines()
    header = lines.index(
        "| route | MB/s (median) | ratio to direct | forwarder CPU s per 100 MB (median) |"
    )
    rows = [line.strip("|").split("|") for line in lines[header + 2 : header + 2 + len(ROUTES)]]
    assert [cells[0].strip() for cells in rows] == ROUTES
    for cells in rows:
        assert float(cells[1]) > 0  # MB/s: consume_throughput returns only once all are read
    assert rows[0][2].strip() == "1.00"
    assert "The proxy against the splice relay, per round:" in done.stdout
