# Strategy: issue 17's layout rule, checked on the source rather than trusted. bench/ and
# tests/ share their stack helpers through testbed/ and never import each other, and testbed/
# imports neither (otherwise the one-way split would be circular again). Every .py file of
# the three packages is parsed with `ast` (nothing is imported, so the check is fast and
# cannot be fooled by import side effects) and every module it names is collected: `import
# x`, `from x import y`, relative imports resolved against the file's own package, and
# importlib.import_module / __import__ with a literal name. Running a benchmark as a
# process (`python -m bench.fanin` in a subprocess) is not an import and stays allowed.
"""bench/ never imports tests, tests/ never imports bench, testbed/ imports neither."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: package -> the top-level packages it must not import.
FORBIDDEN = {"bench": {"tests"}, "tests": {"bench"}, "testbed": {"bench", "tests"}}


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` (the text of dotted module ``module``) imports, dotted."""
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def violations(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        module = _module_name(path)
        for name in sorted(imported_modules(path.read_text(encoding="utf-8"), module)):
            if name.split(".")[0] in FORBIDDEN[package]:
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_none_of_the_forbidden_packages(package: str) -> None:
    assert (ROOT / package / "__init__.py").exists()
    assert violations(package) == []


@pytest.mark.parametrize(
    "source",
    [
        "import bench.fanin",
        "import os, bench",
        "from bench._fanin_consumer import FetchSession",
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
