# Strategy: what every load scenario of the reliability campaign (issue 9: memory flood,
# connection storm, hostile clients) does around its load, written once so the scenarios
# differ only in the load and in what they measure:
#
# * before: a fresh one-partition topic per load, so runs never see each other's records;
# * after: the verdict line printed (pytest -s shows it) and the scenario's section of
#   docs/reliability.md rewritten in one shape: a heading, the machine line, the scenario's
#   own description and table, the verdict, and the command that reproduces it.
"""A load scenario's fresh topic and its section of docs/reliability.md."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from bench._report import RELIABILITY_MD, machine_line, write_section

__all__ = ["Report", "create_topic"]


def create_topic(bootstrap: str, prefix: str) -> str:
    """Create ``<prefix>-<random>`` (1 partition) through ``bootstrap``; return its name."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    return topic


@dataclass(frozen=True)
class Report:
    """Where a scenario reports: its section of docs/reliability.md, that section's heading,
    and the test file whose command reproduces the run."""

    section: str
    title: str
    test_file: str

    def write(self, body: Sequence[str], verdict: str, soak: bool) -> None:
        """Print ``verdict`` and rewrite the section around ``body`` (the scenario's
        description and table, in Markdown lines)."""
        print(verdict)
        command = f".venv/bin/python -m pytest -q {self.test_file}" + (" -m soak" if soak else "")
        markdown = "\n".join(
            [f"## {self.title}", "", machine_line(), "", *body, "", f"Verdict: `{verdict}`", "",
             f"Command: `{command}`"]
        )  # fmt: skip
        write_section(self.section, markdown, path=RELIABILITY_MD)
