"""tests/support/load_scenario.publish_section: reliability sections reach a file only when
PURGATORY_WRITE_DOCS=1 (``make soak``), so ``make test`` changes no tracked file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.load_scenario import WRITE_DOCS_ENV, publish_section


def test_a_section_is_printed_and_not_written_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(WRITE_DOCS_ENV, raising=False)
    target = tmp_path / "reliability.md"
    publish_section("storm", "## storm\n\n| figure | 7 |", path=target)
    assert "| figure | 7 |" in capsys.readouterr().out
    assert not target.exists()


def test_a_section_is_written_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WRITE_DOCS_ENV, "1")
    target = tmp_path / "reliability.md"
    target.write_text("# Reliability\n")
    publish_section("storm", "## storm\n\n| figure | 7 |", path=target)
    text = target.read_text()
    assert "<!-- bench:storm:start -->" in text and "| figure | 7 |" in text
