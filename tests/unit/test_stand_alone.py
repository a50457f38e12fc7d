"""The code's comments and the docs stand alone: they say the fact instead of pointing at an
issue, a note or a source document that is not in the repository, and every repository path
they name is there (a module moved or renamed leaves no pointer to where it was). Read as
text, nothing imported.

What counts as a path: a token that starts with one of the repository's top-level folders and a
slash (``proxy/held/holds.py``, ``docs/img/``, ``proxy/primitives/framed.FrameReader``: a module
and a name in it). A glob must match something. Not counted: a path in another repository,
written ``owner/repo:path``, and docs/history.md, which keeps notes as they stood in the source
at the time, with the paths of then.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ["proxy", "wire", "bench", "testbed", "tests", "docs", "pipeline", "examples", "helm",
       "deploy", "scripts", "constraints", ".ci"]  # fmt: skip
#: A repository path: a top-level folder, a slash, then path characters (a glob's * too).
_TOP = "|".join(map(re.escape, TOP))
PATH = re.compile(rf"(?<![\w/.:-])((?:{_TOP})/[\w./*-]*[\w/*])")
#: Where the code and its docs name paths: comments and docstrings (the whole source is read:
#: a path in a string names a file just the same), and every doc but the history.
SOURCES = ["proxy", "wire", "bench", "testbed", "pipeline"]
GENERATED = ROOT / "wire" / "messages"
NOT_CHECKED = {ROOT / "docs" / "history.md"}


#: Pointers a reader of the repository cannot follow: the team's issues, its notes and the
#: source documents of the design live outside it.
OUTSIDE_POINTER = re.compile(
    r"\bissues? ?#?\d+|\bnotes? §|\bseeds? ?0\d\d|\bpitfall ?\d+", re.IGNORECASE
)
#: Where such pointers must not be: the code.
CODE = ["proxy", "wire", "bench", "testbed"]


def named_files() -> list[Path]:
    files = [
        path
        for source in SOURCES
        for path in sorted((ROOT / source).rglob("*.py"))
        if GENERATED not in path.parents
    ]
    docs = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    return files + [doc for doc in docs if doc not in NOT_CHECKED]


def resolves(token: str) -> bool:
    """Whether ``token`` names something in the repository (see the module docstring)."""
    path = token.rstrip("./")
    if "*" in path:
        return any(ROOT.glob(path))
    if (ROOT / path).exists():
        return True
    parts = path.split(".")  # a module and a name in it: proxy/held/holds.ConnectionHolds
    return any((ROOT / (".".join(parts[:end]) + ".py")).exists() for end in range(1, len(parts)))


def stale_paths(text: str) -> list[str]:
    return [token for token in PATH.findall(text) if not resolves(token)]


def test_every_path_named_in_the_code_and_the_docs_is_there() -> None:
    stale = {
        f"{path.relative_to(ROOT)}:{number}": tokens
        for path in named_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if (tokens := stale_paths(line))
    }
    assert stale == {}


def test_the_check_sees_a_stale_path_and_knows_the_forms_it_skips() -> None:
    assert stale_paths("see proxy/connection/fetches.py for the turn") == [
        "proxy/connection/fetches.py"
    ]
    assert stale_paths("`proxy/routing/rewrite.rewrite_response`, docs/img/peers-*.png") == []
    assert stale_paths("the same shape as python-hyper/h11:examples/trio-server.py") == []
    assert stale_paths("https://github.com/grepplabs/kafka-proxy/blob/v0.4.3/proxy/x.go") == []


def test_the_code_says_the_fact_rather_than_point_outside_the_repository() -> None:
    pointers = {
        f"{path.relative_to(ROOT)}:{number}": found
        for source in CODE
        for path in sorted((ROOT / source).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if (found := OUTSIDE_POINTER.findall(line))
    }
    assert pointers == {}


def test_the_pointer_check_sees_each_form() -> None:
    text = "(issue 29) notes § 2, seed 000's workload, notes pitfall 16, Issue 17's target"
    assert len(OUTSIDE_POINTER.findall(text)) == 5
