"""bench.fanin end to end at a tiny N, plus the bench's self-check of its KIP-227 client half.

The smoke test runs the real harness (a one-node Apache Kafka, the counting relay, the proxy as
a process, a handful of protocol-level consumers) for about a second per route and checks that
it measured something on both routes. It asserts nothing about speed or the fan-in ratio:
those are the benchmark's goals, reported in docs/benchmarks.md, and this machine is shared.

Both run as users run the benchmark, ``python -m bench.fanin``, in a subprocess with
``--no-write``: tests never import bench (tests/unit/test_layout.py). The consumers' pure
fetch-session and probe logic is checked by the bench itself (bench/fanin/selfcheck.py,
before every run); here ``--self-check`` must pass and name every check.
"""

from __future__ import annotations

import subprocess

from tests.support.bench_run import run_bench

N = 3


def _fanin(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("fanin", *args)


def _table(markdown: str, header_start: str) -> list[list[str]]:
    """The cells of each data row of the Markdown table whose header starts so."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_fanin_self_check_passes() -> None:
    done = _fanin("--self-check")
    checks = [line.removeprefix("ok ") for line in done.stdout.splitlines()]
    assert "next_epoch_wraps_to_1" in checks
    assert sum("fetch_session" in name for name in checks) == 3
    assert f"self-check: {len(checks)} checks passed" in done.stderr


def test_fanin_harness_measures_both_routes() -> None:
    # The proxy route settles past the proxy's upstream idle timeout (its consumers' warm-up
    # connections close first): a short one keeps the test short.
    idle = "PURGATORY_PROXY_CONNECTIONS__UPSTREAM_IDLE_TIMEOUT_MS=300"
    done = _fanin(
        "--quick", "--n", str(N), "--seconds", "1", "--probes", "1", "--no-write",
        "--proxy-env", idle,
    )  # fmt: skip
    markdown = done.stdout
    assert markdown.startswith("## Fan-in: idle long-polling consumers")
    assert "self-check: 5 checks passed" in done.stderr

    main = _table(markdown, "| N | route | consumers up |")
    assert [(row[0], row[1]) for row in main] == [(str(N), "direct"), (str(N), "proxy")]
    for _n, route, up, upstream, _ratio, answers, *_, rss, _kib, delivery, missed in main:
        assert up == str(N), (route, markdown)
        assert float(answers.replace(",", "")) > 0, route
        # Every consumer saw the one probe: a p50 and p99, none missed.
        assert "-" not in delivery and missed == "0", (route, markdown)
        if route == "direct":
            # Every direct fetch passes the relay; the proxy route's count may be anything.
            assert float(upstream.replace(",", "")) > 0
        else:
            assert float(rss.split("→")[1].replace(",", "")) > 0  # the proxy's RSS, held
    details = _table(markdown, "| N | route | connected")
    assert [row[1] for row in details] == ["direct", "proxy"]
    assert all(row[4].startswith("v") for row in details), details  # the Fetch version used
