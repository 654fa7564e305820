"""ARCHITECTURE.md's tour matches the code (issue 27): every `path/file.py:Name.member` hop it names is a
definition in that file, every `path/file.py` it names exists, and the page stays a tour (short, no wall
of a table cell). Read from the source with `ast`; nothing is imported or run."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.source import parse

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "ARCHITECTURE.md"

# `path/to/file.py:Class.method` or `path/to/file.py:function` inside backticks
HOP = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.py):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`")
# `path/to/file.py` alone inside backticks (a room named without a hop)
FILE = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.py)`")

MAX_WORDS = 3000  # the target is ~2,500; the rest is room for the rooms still being added
MAX_CELL = 300


def hops(text: str) -> list[tuple[str, str]]:
    return HOP.findall(text)


def defined(source: str, dotted: str) -> bool:
    """Whether `dotted` (Name, or Class.member...) is a def/class of the module `source`, nested as named;
    a module-level name may also be a type alias (`Name = ...`)."""
    body: list[ast.stmt] = parse(source).body
    *outer, last = dotted.split(".")
    for part in outer:
        found = next((node for node in body if isinstance(node, ast.ClassDef) and node.name == part), None)
        if found is None:
            return False
        body = found.body
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == last:
            return True
        if not outer and isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == last for t in node.targets):
            return True
    return False


def missing_hops(text: str, root: Path) -> list[str]:
    out = []
    for rel, name in hops(text):
        path = root / rel
        if not path.is_file():
            out.append(f"{rel}:{name}: no such file")
        elif not defined(path.read_text(encoding="utf-8"), name):
            out.append(f"{rel}:{name}: not defined there")
    return out


def test_every_hop_names_a_real_definition() -> None:
    text = TOUR.read_text(encoding="utf-8")
    assert len(hops(text)) >= 60, "the tour's pipelines are written as `file.py:function` hops"
    assert missing_hops(text, ROOT) == []


def test_every_file_named_exists() -> None:
    text = TOUR.read_text(encoding="utf-8")
    assert [rel for rel in FILE.findall(text) if not (ROOT / rel).is_file()] == []


def test_the_tour_stays_short() -> None:
    text = TOUR.read_text(encoding="utf-8")
    assert len(text.split()) <= MAX_WORDS
    cells = [cell.strip() for line in text.splitlines() if line.startswith("|") for cell in line.strip("|").split("|")]
    assert [c[:60] for c in cells if len(c) > MAX_CELL] == []


def test_the_checker_catches_a_drifted_hop(tmp_path: Path) -> None:
    """A renamed method, a missing class, a moved file and a name under the wrong owner all fail."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        "class Part:\n    def run(self) -> None: ...\n    async def wait(self) -> None: ...\n\n"
        "def helper() -> None: ...\n\nAlias = int\n", encoding="utf-8")
    good = "`pkg/mod.py:Part.run` `pkg/mod.py:Part.wait` `pkg/mod.py:helper` `pkg/mod.py:Part` `pkg/mod.py:Alias`"
    assert len(hops(good)) == 5
    assert missing_hops(good, tmp_path) == []
    bad = "`pkg/mod.py:Part.walk` `pkg/mod.py:Other` `pkg/gone.py:helper` `pkg/mod.py:run` `pkg/mod.py:Part.Alias`"
    assert missing_hops(bad, tmp_path) == [
        "pkg/mod.py:Part.walk: not defined there",
        "pkg/mod.py:Other: not defined there",
        "pkg/gone.py:helper: no such file",
        "pkg/mod.py:run: not defined there",
        "pkg/mod.py:Part.Alias: not defined there",
    ]
