"""tests.helpers.source.parse: the collector is off during a parse and back on after, also when it fails."""

from __future__ import annotations

import ast
import gc

import pytest

from tests.helpers.source import parse


def test_parse_runs_with_the_collector_off_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_parse = ast.parse
    during: list[bool] = []

    def observed(text: str, filename: str = "<unknown>") -> ast.Module:
        during.append(gc.isenabled())
        return real_parse(text, filename)

    monkeypatch.setattr(ast, "parse", observed)
    assert gc.isenabled()
    tree = parse("x = 1\n", "probe.py")
    assert isinstance(tree.body[0], ast.Assign)
    assert gc.isenabled()
    with pytest.raises(SyntaxError):
        parse("def (:\n", "bad.py")
    assert gc.isenabled()
    gc.disable()
    try:
        parse("y = 2\n")
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
    assert during == [False, False, False]
