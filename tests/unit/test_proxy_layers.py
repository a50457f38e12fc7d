# Strategy: proxy/'s folders are stacked (docs/architecture.md, "Source layout"): a module may
# import its own folder and the folders below it, never one above, so each folder can be read
# knowing only what lies beneath it. The check reads the source with `ast` (nothing is
# imported), counts imports under TYPE_CHECKING too (a type is a dependency for the reader),
# and resolves relative imports against the file's own package.
"""No import in proxy/ runs back up: each folder imports only itself and the folders below."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: proxy/'s parts from the ground up; a part may import only itself and lower layers (two parts
#: of one layer do not import each other).
LAYERS: list[set[str]] = [
    {"errors", "address"},
    {"primitives"},
    {"observability"},
    {"security"},
    {"routing", "config"},
    {"upstream", "broker"},
    {"held"},
    {"connection"},
    {"reload"},
    {"assembly"},
    {"server"},
    {"cli"},
    {"__main__"},
]
RANK = {part: rank for rank, layer in enumerate(LAYERS) for part in layer}


def part_of(module: str) -> str:
    """``proxy.primitives.memory`` -> ``primitives``; ``proxy.server`` -> ``server``."""
    return module.split(".")[1]


def proxy_modules() -> dict[str, Path]:
    modules = {}
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name != "proxy":
            modules[name] = path
    return modules


def imports_of(module: str, path: Path) -> set[str]:
    """The proxy modules ``module`` imports (``from proxy import x`` names proxy.x)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *base.split(".")])
            names = [f"{base}.{alias.name}" for alias in node.names] if base == "proxy" else []
            found.update(names or [base.rstrip(".")])
    return {name for name in found if name.startswith("proxy.")}


def test_every_module_of_proxy_is_in_a_layer() -> None:
    unplaced = sorted(name for name in proxy_modules() if part_of(name) not in RANK)
    assert unplaced == []


def test_no_import_runs_back_up() -> None:
    upward = []
    for module, path in proxy_modules().items():
        source = part_of(module)
        for target in sorted(imports_of(module, path)):
            other = part_of(target)
            if other != source and RANK.get(other, len(LAYERS)) >= RANK.get(source, -1):
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_the_check_sees_an_import_that_runs_back_up(tmp_path: Path) -> None:
    path = tmp_path / "proxy" / "primitives" / "memory.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from proxy import held\n"
    )
    assert imports_of("proxy.primitives.memory", path) == {"proxy.held"}
    assert RANK[part_of("proxy.held")] > RANK[part_of("proxy.primitives.memory")]


#: The held path's face to a client connection: what connection/ may import of held/ (the
#: service it is handed, and the face each connection gets).
HELD_FACE = {"proxy.held.service", "proxy.held.holds"}


def test_connection_imports_only_the_held_paths_face() -> None:
    reached = set()
    for module, path in proxy_modules().items():
        if part_of(module) == "connection":
            reached |= {name for name in imports_of(module, path) if part_of(name) == "held"}
    assert reached <= HELD_FACE, sorted(reached - HELD_FACE)
