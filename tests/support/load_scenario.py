# Strategy: what every load scenario of the reliability campaign (issue 9: memory flood,
# connection storm, hostile clients) does around its load, written once so the scenarios
# differ only in the load and in what they measure:
#
# * before: a fresh one-partition topic per load, so runs never see each other's records;
# * after: the verdict line and the scenario's section in one shape (a heading, the machine
#   line, the scenario's own description and table, the verdict, and the command that
#   reproduces it) printed, so the numbers are in the test's output (pytest -s shows it).
#
# No test writes a tracked file: the section goes into docs/reliability.md only when
# PURGATORY_WRITE_DOCS=1, which `make soak` sets; `make test` leaves the tree as it was.
"""A load scenario's fresh topic and its section of docs/reliability.md (written on request)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.report import RELIABILITY_MD, machine_line, write_section

__all__ = ["WRITE_DOCS_ENV", "Report", "publish_section"]

#: Set to 1 (``make soak`` does) to write the scenarios' sections into docs/reliability.md.
WRITE_DOCS_ENV = "PURGATORY_WRITE_DOCS"


def publish_section(section: str, markdown: str, path: Path = RELIABILITY_MD) -> None:
    """Print a reliability section; write it into ``path`` (docs/reliability.md) only when
    asked (``PURGATORY_WRITE_DOCS=1``), so the default suite never changes a tracked file."""
    print(markdown)
    if os.environ.get(WRITE_DOCS_ENV) == "1":
        write_section(section, markdown, path=path)


@dataclass(frozen=True)
class Report:
    """Where a scenario reports: its section of docs/reliability.md, that section's heading,
    and the test file whose command reproduces the run (``env``: the settings it ran with, as
    VAR=value words put before the command)."""

    section: str
    title: str
    test_file: str
    env: str = ""

    def write(self, body: Sequence[str], verdict: str, soak: bool) -> None:
        """Print ``verdict`` and the section around ``body`` (the scenario's description and
        table, in Markdown lines); see ``publish_section`` for when it is written."""
        print(verdict)
        command = f".venv/bin/python -m pytest -q {self.test_file}" + (" -m soak" if soak else "")
        if self.env:
            command = f"{self.env} {command}"
        markdown = "\n".join(
            [f"## {self.title}", "", machine_line(), "", *body, "", f"Verdict: `{verdict}`", "",
             f"Command: `{command}`"]
        )  # fmt: skip
        publish_section(self.section, markdown)
