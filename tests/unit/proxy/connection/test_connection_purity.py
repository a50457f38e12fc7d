"""The connection's state machine (proxy/connection/state.py), the held path's decisions and
deadlines and the values a held fetch is made of (proxy/held/), and everything they import stay
sans-I/O, as wire/ does: no async framework, sockets, clocks or threads, no broker channel and
no config. The pumps around the connection, and the held path's holders, do the I/O."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
#: The pure modules: each, and what it imports at run time, does no I/O.
PURE = [
    STATE,
    "proxy.held.deadlines",
    "proxy.held.client_upstream",
    "proxy.held.partition_state",
    "proxy.held.fetch.decision",
    "proxy.held.fetch.ticket",
    "proxy.held.fetch.ahead",
    "proxy.held.fetch.frames",
    "proxy.held.fetch.repeat",
    "proxy.held.fetch.session",
    "proxy.held.fetch.answer",
]


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


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_and_what_it_imports_do_no_io(module: str) -> None:
    reached = reached_from(module)
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


def test_the_walk_reaches_past_the_module_itself() -> None:
    """(The check above would pass vacuously if the walk stopped at the first module.)"""
    assert {"proxy.routing.rewrite", "proxy.errors"} <= reached_from(STATE).keys()
    assert "proxy.held.fetch.session" in reached_from("proxy.held.fetch.ticket")


@pytest.mark.parametrize("module", PURE)
def test_importing_a_pure_module_pulls_in_no_async_framework(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "print(sorted({'trio', 'outcome', 'asyncio', 'anyio', 'proxy.config'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
