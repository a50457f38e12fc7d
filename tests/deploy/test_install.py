"""Installing the project, as every make target does (`pip install -e .`), warns of nothing.

setuptools reads pyproject.toml in pip's isolated build environment (the newest setuptools
the build-system table allows) and, with a recent pip (`make test` upgrades it), prints its
deprecation warnings on every install: about 60 lines for a license written as a table. A
dry run does that reading (the project's metadata is built) without changing .venv.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_installing_the_project_prints_no_deprecation_warning() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--dry-run", "--no-deps", "-e", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    output = ran.stdout + ran.stderr
    assert "deprecated" not in output.lower(), output
    assert "Warning" not in output, output
