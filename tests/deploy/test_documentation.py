"""What the documentation names exists, and what exists is in the documentation.

A new user reads README.md, examples/README.md, config.example.toml and docs/ before anything
else: a flag missing from a list, a make target nobody mentions, a test file that was renamed,
an "issue N" that means nothing outside the tracker, or a file README's commands write that
git then offers to commit, each costs them time. These checks read the files as text.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from proxy import cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Every flag of `purgatory-proxy run` that overrides a setting.
RUN_FLAGS = sorted(cli._FLAGS.values())


def test_config_example_header_lists_every_flag() -> None:
    header = []
    for line in (ROOT / "config.example.toml").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    text = "\n".join(header)
    assert [flag for flag in RUN_FLAGS if flag not in text] == []


def test_readme_lists_every_flag() -> None:
    said = re.search(r"then the flags (.*?)\. Unknown keys", README.read_text(), re.DOTALL)
    assert said is not None
    assert [flag for flag in RUN_FLAGS if f"`{flag}`" not in said[1]] == []


def _phony_targets() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^\.PHONY:(.*)$", makefile, re.MULTILINE)
    assert found is not None
    return found[1].split()


def test_readme_names_every_make_target_and_the_metrics_variable() -> None:
    text = README.read_text()
    assert [t for t in _phony_targets() if not re.search(rf"`make {t}\b", text)] == []
    assert "`make run METRICS=127.0.0.1:9465`" in text and "`METRICS=`" in text
    assert 'make run-kafka ARGS="--nodes 3 --kafka-version 3.9.2"' in text


@pytest.mark.parametrize("form", ["make test PYTEST_ARGS=", ".venv/bin/python -m pytest "])
def test_readme_subset_commands_run_that_subset(form: str) -> None:
    """README's two ways to run part of the suite, run as written: that file's tests only."""
    commands = re.findall(rf"`({re.escape(form)}[^`]+)`", README.read_text())
    assert len(commands) == 1, commands
    [command] = commands
    ran = subprocess.run(
        shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=1800,
        check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    subset = re.search(r"tests/\S+\.py", command)
    assert subset is not None
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", subset[0]],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    count = len([line for line in collected.splitlines() if "::" in line])
    assert re.search(rf"\b{count} passed\b", ran.stdout), ran.stdout[-3000:]


#: The pages a new user reads, relative to the repository.
PAGES = [
    "README.md",
    "examples/README.md",
    *sorted(f"docs/{p.name}" for p in ROOT.glob("docs/*.md")),
]


@pytest.mark.parametrize("page", PAGES)
def test_every_test_file_a_page_names_exists(page: str) -> None:
    # Another repository's paths are written owner/repo:path, and are not this one's.
    named = set(re.findall(r"(?<![\w/.:-])tests/[\w/]+\.py\b", (ROOT / page).read_text()))
    assert sorted(name for name in named if not (ROOT / name).exists()) == []


_ISSUE = re.compile(r"\bissue \d+", re.IGNORECASE)


def test_benchmarks_page_states_goals_not_issue_numbers() -> None:
    """docs/benchmarks.md is read by people who never saw the tracker: each goal says what it
    is. The benchmarks write parts of the page, so their text is checked too."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert _ISSUE.findall(page) == []
    written = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        written += [
            f"{path.name}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _ISSUE.search(node.value)
        ]
    assert written == []


def test_gitignore_ignores_what_readme_commands_write() -> None:
    """`--request-log requests.jsonl` (and its rotations) and `report --out report/`."""
    text = README.read_text()
    assert "--request-log requests.jsonl" in text and "--out report/" in text
    paths = ["requests.jsonl", "requests.jsonl.1", "report/report.md"]
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.stdout.split() == paths
