"""wire stays sans-I/O: no sockets, clocks, threads or async frameworks in its imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import wire

FORBIDDEN = {"trio", "socket", "time", "asyncio", "threading", "selectors", "anyio"}
WIRE_DIR = Path(wire.__file__).resolve().parent
# The generator is a development tool (python -m wire._generate), never imported by wire.
RUNTIME_MODULES = sorted(
    p for p in WIRE_DIR.rglob("*.py") if "_generate" not in p.relative_to(WIRE_DIR).parts
)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            names.add("__import__")
    return names


def test_no_module_of_wire_imports_io_clocks_or_threads() -> None:
    assert len(RUNTIME_MODULES) >= 10
    offenders = {
        str(path.relative_to(WIRE_DIR)): sorted(
            imported_modules(path) & (FORBIDDEN | {"__import__"})
        )
        for path in RUNTIME_MODULES
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_wire_imports_only_the_stdlib_and_crc32c() -> None:
    allowed = set(sys.stdlib_module_names) | {"wire", "crc32c"}
    for path in RUNTIME_MODULES:
        assert imported_modules(path) <= allowed, path


def test_importing_wire_pulls_in_no_async_framework() -> None:
    # socket/threading do get imported, transitively, by the crc32c package's __init__
    # (it imports argparse for its CLI); wire itself never touches them.
    code = "import sys, wire; print(sorted({'trio', 'asyncio', 'anyio'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
