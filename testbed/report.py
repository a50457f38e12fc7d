"""Record a benchmark's results in docs/benchmarks.md without touching the other benchmarks'.

Why: every benchmark owns one section of the shared results page. Sections are delimited by
HTML comment markers, so re-running one benchmark replaces only its own text and the page
stays readable in any Markdown viewer.
"""

from __future__ import annotations

import platform
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "BENCHMARKS_MD",
    "RELIABILITY_MD",
    "command_line",
    "machine_line",
    "publish",
    "write_section",
]

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
#: The reliability campaign's verdicts, sectioned the same way.
RELIABILITY_MD = BENCHMARKS_MD.with_name("reliability.md")

_HEADER = """# Benchmarks

Each section below is written by the benchmark named in its heading (`make bench` runs them
all). Numbers come from the shared 2-core development machine, so compare ratios measured
side by side in one run rather than absolute values across runs.
"""


def machine_line() -> str:
    """One line describing where and when the numbers were taken."""
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    return f"_Measured {stamp} on {platform.machine()}, Python {platform.python_version()}._"


def write_section(name: str, markdown: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace (or append) the section owned by benchmark ``name``."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{markdown.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else _HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How the benchmark was run, for its section: ``python -m <module> <arguments>``, quoted
    for a shell; a ``--baseline`` checkout is written DIR, since its path is this machine's."""
    arguments = list(argv if argv is not None else sys.argv[1:])
    for at, argument in enumerate(arguments[:-1]):
        if argument == "--baseline":
            arguments[at + 1] = "DIR"
    return "python -m " + shlex.join([module, *arguments])


def publish(name: str, markdown: str, started: float, *, write: bool) -> None:
    """Print a benchmark's section and its wall time (since ``started``, time.monotonic());
    with ``write``, put the section in docs/benchmarks.md."""
    print(markdown)
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if write:
        write_section(name, markdown)
