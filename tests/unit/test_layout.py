# Strategy: the top-level packages are stacked, as proxy/'s folders are (test_proxy_layers.py):
# a package imports only itself and the packages below it, never one beside or above, so each
# can be read, installed and tested knowing only what lies beneath it.
#
#   wire, pipeline     the Kafka wire protocol (sans I/O); the report over the request log,
#                      which reads the log as documented and imports nothing of the proxy
#   proxy              the proxy (its command line imports pipeline for `report`)
#   testbed            stack helpers the tests and the benchmarks share
#   bench, tests       never each other: tests run a benchmark as a process, never import it
#
# Checked on the source rather than trusted: every .py file is parsed with `ast` (nothing is
# imported, so the check is fast and cannot be fooled by import side effects) and every module
# it names is collected: `import x`, `from x import y`, relative imports resolved against the
# file's own package, imports under TYPE_CHECKING or inside functions, and
# importlib.import_module / __import__ with a literal name. Running a module as a process
# (`python -m bench.fanin` in a subprocess) is not an import and stays allowed.
"""No import runs back up between the top-level packages: each imports only those below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The top-level packages from the ground up; two packages of one layer do not import each other.
LAYERS: list[set[str]] = [
    {"wire", "pipeline"},
    {"proxy"},
    {"testbed"},
    {"bench", "tests"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` (the text of dotted module ``module``) imports, dotted;
    ``module`` names a package's ``__init__`` as the package itself plus ``.__init__``."""
    package = module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    names.add(".".join([*base, node.module]))
                else:  # from .. import x: x may be a module of the package
                    names.update(".".join([*base, alias.name]) for alias in node.names)
            elif node.module:
                names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            names.add(node.args[0].value)
    return names


def upward_imports(package: str, root: Path = ROOT) -> list[str]:
    """Each import in ``package`` of a top-level package beside or above it."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for name in sorted(imported_modules(path.read_text(encoding="utf-8"), module)):
            other = name.split(".")[0]
            if other != package and RANK.get(other, -1) >= RANK[package]:
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


def test_every_top_level_package_is_in_a_layer() -> None:
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert packages == set(RANK)


@pytest.mark.parametrize("package", sorted(RANK))
def test_no_import_runs_back_up(package: str) -> None:
    assert upward_imports(package) == []


def test_the_check_sees_an_import_beside_or_above(tmp_path: Path) -> None:
    generator = tmp_path / "wire" / "_generate" / "__init__.py"
    generator.parent.mkdir(parents=True)
    generator.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import testbed\n"
    )
    report = tmp_path / "pipeline" / "markdown.py"
    report.parent.mkdir()
    report.write_text("def glossary():\n    from proxy.observability import outcomes\n")
    assert upward_imports("wire", tmp_path) == ["wire/_generate/__init__.py imports testbed"]
    assert upward_imports("pipeline", tmp_path) == [
        "pipeline/markdown.py imports proxy.observability"
    ]


@pytest.mark.parametrize(
    "source",
    [
        "import bench.fanin",
        "import os, bench",
        "from bench.fanin.consumer import FetchSession",
        "from bench import fanin",
        "def f():\n    from bench.throughput import run\n",
        "import importlib\nimportlib.import_module('bench.fanin')",
        "__import__('bench')",
        "from ... import bench",  # from tests/unit/x.py: the repository root
    ],
)
def test_every_form_of_import_is_seen(source: str) -> None:
    assert any(
        name.split(".")[0] == "bench" for name in imported_modules(source, "tests.unit.x")
    ), source


def test_relative_imports_resolve_inside_their_package_and_a_subprocess_is_no_import() -> None:
    assert imported_modules("from . import processes", "testbed.certs") == {"testbed.processes"}
    assert imported_modules("from .support import cluster", "tests.unit.x") == {
        "tests.unit.support"
    }
    run = "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'bench.fanin'])"
    assert imported_modules(run, "tests.x") == {"subprocess", "sys"}
