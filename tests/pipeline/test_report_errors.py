"""``purgatory-proxy report`` on logs it cannot use: one line on stderr, exit 2, no traceback.

Each case runs the real command line (``--master local[1]``), as an operator would; a missing
or empty log is found before Spark starts (tests/pipeline/test_report_files.py), a log of torn
lines only inside the Spark session.
Stderr may hold the report's numbered progress lines before the failure; apart from those it
must be exactly the one error line, and stdout must not claim a report was written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r"^\[\s*\d+/\d+\] ")
TORN = '{"ts":1795132999.5,"api":"Fet'  # a line cut short by a crash


def _report(logs: str, out: Path) -> tuple[int, list[str], str]:
    command = [sys.executable, "-m", "proxy", "report", "--logs", logs, "--out", str(out),
               "--master", "local[1]"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    other = [line for line in done.stderr.splitlines() if not PROGRESS.match(line)]
    return done.returncode, other, done.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no request log at {logs}: no such file, or the glob matches none"),
        ("", "no request-log lines in {logs}: the log is empty"),
        (TORN, "no request-log record in {logs}, only 1 malformed line(s)"),
    ],
    ids=["missing", "empty", "only-torn-line"],
)  # fmt: skip
def test_unusable_log_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None, message: str
) -> None:
    logs = str(tmp_path / "requests.jsonl*")
    if content is not None:
        (tmp_path / "requests.jsonl").write_text(content)
    code, other, stdout = _report(logs, tmp_path / "report")
    assert code == 2
    assert other == [f"purgatory-proxy report: {message.format(logs=logs)}"]
    assert "report written" not in stdout
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("where", ["under-a-file", "a-file", "file-uri"])
def test_an_unwritable_output_is_one_line_before_spark(tmp_path: Path, where: str) -> None:
    """docs/request-log.md: an output that cannot be written is one line and exit 2; on the
    local filesystem it is found before Spark starts (no progress line: no stage ran)."""
    logs = tmp_path / "requests.jsonl"
    logs.write_text('{"ts":1795132999.5,"api":"Fetch","conn":1}\n')
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = {
        "under-a-file": str(blocker / "report"),
        "a-file": str(blocker),
        "file-uri": f"file://{blocker}/report",
    }[where]
    command = [sys.executable, "-m", "proxy", "report", "--logs", str(logs), "--out", out]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    what = "it is" if where == "a-file" else f"{blocker} is"
    assert done.stderr.splitlines() == [
        f"purgatory-proxy report: cannot write the report to {out}: {what} a file, not a folder"
    ]
    assert "report written" not in done.stdout
