"""testbed.report.command_line: a benchmark section says how to run it again, on any machine."""

from __future__ import annotations

import shlex

from testbed.report import command_line


def test_a_baseline_checkout_is_written_dir_and_a_label_stays_one_argument() -> None:
    line = command_line(
        "bench.idle_cycle", ["--baseline", "/work/wt-before", "--label", "before (0f6adf4)"]
    )
    assert "/work/wt-before" not in line
    assert shlex.split(line) == [
        "python", "-m", "bench.idle_cycle", "--baseline", "DIR", "--label", "before (0f6adf4)",
    ]  # fmt: skip


def test_other_arguments_pass_unchanged() -> None:
    assert command_line("bench.fanin", ["--n", "1000"]) == "python -m bench.fanin --n 1000"
