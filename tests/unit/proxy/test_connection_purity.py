"""The connection's state machine (proxy/connection/state.py) and everything it imports stay
sans-I/O, as wire/ does: no async framework, sockets, clocks or threads, no broker channel and
no config. The pumps around it (client.py) do the I/O."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import proxy

FORBIDDEN = {"trio", "outcome", "socket", "time", "asyncio", "threading", "selectors", "anyio"}
#: Proxy modules a pure module must not reach: they bring I/O, or the whole configuration.
FORBIDDEN_PROXY = {
    "proxy.config",
    "proxy.upstream",
    "proxy.primitives.memory",
    "proxy.primitives.purgatory",
}
PROXY_DIR = Path(proxy.__file__).resolve().parent
STATE = "proxy.connection.state"


def runtime_imports(module: str) -> set[str]:
    """The modules ``module`` imports when it runs (those under TYPE_CHECKING are types only)."""
    path = PROXY_DIR.parent / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                names |= {alias.name for alias in inner.names}
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                names.add(inner.module)
            elif isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "__import__":
                names.add("__import__")
    return names


def reached_from(module: str) -> dict[str, set[str]]:
    """Every proxy module ``module`` reaches at run time, with what each imports."""
    reached: dict[str, set[str]] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached[name] = imports = runtime_imports(name)
        todo += [m for m in imports if m.startswith("proxy.") and m not in reached]
    return reached


def test_the_connection_state_and_what_it_imports_do_no_io() -> None:
    reached = reached_from(STATE)
    assert {"proxy.held.ticket", "proxy.routing.rewrite"} <= reached.keys()
    offenders = {
        name: sorted(
            m
            for m in imports
            if m.split(".")[0] in FORBIDDEN
            or m == "__import__"
            or any(m == f or m.startswith(f + ".") for f in FORBIDDEN_PROXY)
        )
        for name, imports in reached.items()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_the_connection_state_pulls_in_no_async_framework() -> None:
    code = (
        f"import sys, {STATE}; "
        "print(sorted({'trio', 'outcome', 'asyncio', 'anyio', 'proxy.config'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
