# Strategy: no Docker engine on the test machine, so the Dockerfile is read as the text format
# it is: comments dropped, backslash continuations joined, one (keyword, arguments) pair per
# instruction, grouped into stages at each FROM. .dockerignore is evaluated with Docker's rule
# (patterns in order, the last match wins, "!" re-includes) so tests can ask whether a COPY
# source reaches the build context at all.
"""A small reader for the Dockerfile and .dockerignore, enough for the lint tests."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Instruction", "Stage", "exec_form", "ignored", "read_stages"]


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.arguments for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def read_stages(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults (before the first FROM) and the stages, in order."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            words = rest.split()
            base = words[0]
            for name, value in args.items():
                base = base.replace("${" + name + "}", value)
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            if keyword == "ARG" and "=" in rest:
                name, _, value = rest.partition("=")
                args[name] = value
        else:
            stages[-1].instructions.append(Instruction(keyword, rest))
    return args, stages


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form instruction (ENTRYPOINT, CMD); raises if shell form."""
    value = json.loads(arguments)
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"not an exec-form array: {arguments}")
    return value


def ignored(relative: str, dockerignore: Path) -> bool:
    """Whether .dockerignore keeps ``relative`` (a path in the context) out of the context."""
    result = False
    parts = Path(relative).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in dockerignore.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        # A pattern matching a directory covers everything below it; "**/" matches any depth.
        candidates = [pattern]
        if pattern.startswith("**/"):
            candidates.append(pattern[3:])
        if any(fnmatch.fnmatchcase(prefix, c) for prefix in prefixes for c in candidates):
            result = not negate
    return result
