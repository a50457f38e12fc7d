# Strategy: one run measures three routes to the same embedded Tansu broker side by side --
# direct, through purgatory-proxy, and through `tansu proxy` (the peer) -- interleaved
# A B C A B C, so slow drift of this shared 2-core machine lands on every route alike.
# Every cell (round x route x record size, and round x route x offered rate) gets a fresh
# broker and a fresh forwarder: Tansu's memory storage keeps every record in RAM, and a
# forwarder must not carry the previous cell's heap into the next.
#
# Phase 1, throughput: librdkafka produces N records (acks=all, linger 5 ms) as fast as it
# can, then a consumer reads the topic from offset 0. The forwarder's CPU seconds and peak
# RSS are read with psutil while each half runs.
# Phase 2, latency: open loop at 10 / 50 / 80 % of the direct produce rate measured in
# phase 1 (1 KiB records), acknowledgement and produce->consume latency into HDR histograms,
# merged over rounds.
#
# The client, the broker and the forwarder share the machine's 2 cores, so every forwarder
# CPU cycle is taken from the client or the broker: absolute numbers are low and noisy,
# ratios measured in one run are what to compare.
#
# A/B mode (`--baseline DIR`): the proxy of this tree against the proxy of another checkout
# (an older commit), both started the same way, on the 1 KiB cells and the one-record-per-
# request cell only, the routes' order turning each round; it writes its own section
# (throughput-ab), so a change to the request path is judged against what it replaces.
"""Forwarding throughput and latency: direct vs purgatory-proxy vs tansu proxy.

Run ``python -m bench.throughput`` (about 9 minutes; ``--quick`` about 2 minutes, ``--json
FILE`` to save the run, ``--render FILE`` to report a saved run without measuring). Results
go to docs/benchmarks.md and docs/img/throughput.png (``--out DIR``: under DIR instead;
``--no-write``: nowhere). ``--smoke`` runs every route and phase on tiny sizes in about a
minute, to check the harness. The profile under the same loads is
``python -m bench.throughput.profiling`` (py-spy). ``--baseline DIR [--label NAME] [--rounds
N]`` measures this tree's proxy side by side with the one in DIR (the "throughput-ab" section).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

from bench.throughput.config import FULL, QUICK, SMOKE, baseline_config
from bench.throughput.report import (
    CHART,
    achieved_table,
    baseline_table,
    cost_table,
    markdown,
    plot,
    ratio_table,
    size_text,
)
from bench.throughput.runner import Results, results_from_rows, run
from testbed.report import BENCHMARKS_MD, machine_line, write_section

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, about 2 minutes")
    parser.add_argument("--json", type=Path, help="write the run (its rows) to this file")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, about a minute: checks the harness only"
    )
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the section to DIR/benchmarks.md and the chart to DIR/img/ instead of docs/",
    )
    parser.add_argument(
        "--render", type=Path, help="do not measure: report the run saved by --json in this file"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="measure side by side with the proxy in DIR (a checkout of an older "
        "commit): 1 KiB produce/consume and one record per request, --rounds rounds, the "
        "routes' order turning each round; prints a table "
        "and writes the throughput-ab section",
    )
    parser.add_argument("--label", default="baseline", help="the baseline's name in the table")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --baseline")
    args = parser.parse_args(argv)
    if args.baseline:
        _compare(args.baseline, args.label, args.no_write, args.rounds, args.json)
        return
    config = SMOKE if args.smoke else QUICK if args.quick else FULL
    command = "python -m bench.throughput" + (
        " --smoke" if args.smoke else " --quick" if args.quick else ""
    )
    if args.render:
        saved = json.loads(args.render.read_text())
        results, wall_s = results_from_rows(saved["rows"]), saved["wall_s"]
        command = saved["command"]
    else:
        started = time.monotonic()
        results = run(config)
        wall_s = time.monotonic() - started
    print(ratio_table(config, results))
    print()
    print(cost_table(config, results))
    print()
    print(achieved_table(config, results))
    if args.json:
        run_record = {"command": command, "wall_s": wall_s, "rows": results.rows}
        args.json.write_text(json.dumps(run_record, indent=1))
    if not args.no_write:
        from bench.throughput.profiling import PROFILE_NOTES

        docs = CHART.parent.parent if args.out is None else args.out
        plot(config, results, docs / "img" / CHART.name)
        write_section(
            "throughput",
            markdown(config, results, command, wall_s, PROFILE_NOTES),
            docs / BENCHMARKS_MD.name,
        )


def _compare(root: str, label: str, no_write: bool, rounds: int, json_path: Path | None) -> None:
    config = baseline_config(str(Path(root).resolve()), rounds)
    started = time.monotonic()
    results = Results()
    for round_no in range(1, rounds + 1):
        # The routes' order turns each round, so no route always follows the same one (a
        # fresh broker after a heavy cell finds the machine in a different state).
        turn = (round_no - 1) % len(config.routes)
        routes = config.routes[turn:] + config.routes[:turn]
        one = run(dataclasses.replace(config, rounds=1, routes=routes))
        for row in one.rows:
            row["round"] = round_no
        results.rows.extend(one.rows)
    wall_s = time.monotonic() - started
    if json_path is not None:
        json_path.write_text(json.dumps({"wall_s": wall_s, "rows": results.rows}, indent=1))
    table = baseline_table(config, results, label)
    print(table)
    if no_write:
        return
    size, count = config.sizes[0]
    per_bytes, per_count = config.per_request or (0, 0)
    write_section(
        "throughput-ab",
        "\n".join(
            [
                "## The request path, side by side with an older proxy (`bench.throughput "
                "--baseline`)",
                "",
                machine_line(),
                "",
                f"`python -m bench.throughput --baseline DIR --label '{label}' --rounds "
                f"{config.rounds}` (DIR: a checkout of the baseline commit, `git worktree "
                "add` or `git archive`; both proxies run with `python -P` and "
                "PYTHONPATH set to their tree). librdkafka, a fresh Tansu per cell, routes "
                "interleaved "
                f"in each of {config.rounds} rounds (their order turning by one each round), "
                f"medians; {count:,} records of "
                f"{size_text(size)} produced then consumed, and {per_count:,} records of "
                f"{size_text(per_bytes)} one per Produce request (acks=all). Proxy CPU is the "
                f"proxy process's own CPU time (psutil) divided by requests. "
                f"Wall time {wall_s / 60:.1f} min.",
                "",
                table,
            ]
        ),
    )


if __name__ == "__main__":
    main()
