"""Run a benchmark as users do, ``python -m bench.<name> ...``, for the smoke tests (tests
never import bench: tests/unit/test_layout.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bench.<module> args`` from the repository; it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done
