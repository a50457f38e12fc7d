"""The lines the examples print become the records the checker compares, and nothing else.

tests/compat/_examples.py parses "produced"/"consumed" lines (values hold spaces; kcat's
delivery lines have no key or value) and ignores every other line; a failed run names the
stage it stopped at; the report never shows a password given to kcat.sh as ``-X``.
"""

from __future__ import annotations

import sys

import pytest

from tests.compat._examples import EXAMPLES, parse_output, run_example
from tests.compat._model import ClientFailed, Consumed, Delivered, Job, make_records

OUTPUT = """\
topic t: created
produced partition=2 offset=0 key=key-0 value=abc record 0
produced partition=1 offset=7
consumed partition=2 offset=0 key=key-0 value=abc record 0
read partition=2 offset=0 key=key-0 value=abc record 0
committed offsets {2: 1} for group g
consumed partition=0 offset=3 key= value=
aiokafka via 127.0.0.1:1: produced 2, consumed 2 (run abc)
"""


def test_parse_output_reads_produced_and_consumed_lines_only() -> None:
    produced, consumed = parse_output(OUTPUT)
    assert produced == (Delivered(2, 0, "key-0", "abc record 0"), Delivered(1, 7))
    assert consumed == (Consumed(2, 0, "key-0", "abc record 0"), Consumed(0, 3, "", ""))


def _job(n: int = 2) -> Job:
    return Job("127.0.0.1:1", "t", 3, "g", make_records(n), deadline_s=5)


def _script(text: str, code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; print({text!r}, end=''); sys.exit({code})"]


@pytest.mark.parametrize(
    ("printed", "stage"),
    [
        ("", "create"),
        ("topic t: created\nproduced partition=0 offset=0 key=k value=v\n", "produce"),
        (
            "topic t: created\nproduced partition=0 offset=0 key=k value=v\n"
            "produced partition=0 offset=1 key=k value=w\n",
            "consume",
        ),
    ],
)
def test_a_failed_run_names_the_stage_it_stopped_at(printed: str, stage: str) -> None:
    with pytest.raises(ClientFailed) as failed:
        run_example("demo", _script(printed, 1), _job())
    assert failed.value.stage == stage
    assert "exit 1" in failed.value.detail


def test_the_report_masks_a_kcat_password_and_shortens_paths() -> None:
    command = [*_script(OUTPUT, 0), str(EXAMPLES / "kcat.sh"), "-X", "sasl.password=s3cret"]
    report, stdout = run_example("demo", command, _job())
    assert stdout == OUTPUT
    assert len(report.produced) == 2 and len(report.consumed) == 2
    shown = report.settings["command"]
    assert "s3cret" not in shown
    assert "sasl.password=***" in shown
    assert "examples/kcat.sh" in shown and str(EXAMPLES) not in shown
