"""Parsing source text in tests that read the whole tree (`parse`).

CPython 3.11's parser is not re-entrant (gh-106905): its AST constructor keeps a recursion-depth count
in the interpreter state. If the garbage collector runs in the middle of an `ast.parse` and a finalizer
formats a traceback (3.11's traceback module calls `ast.parse` itself to place its caret anchors; an
unclosed transport or an un-awaited coroutine left behind by a server test does exactly that), the
inner parse disturbs the outer one's count and the outer one fails with "SystemError: AST constructor
recursion depth mismatch". tests/test_one_declaration.py and tests/test_import_direction.py parse every
source file and failed that way when they ran after the server tests in one process; they and
tests/test_architecture_tour.py parse through here.

Parsing with the collector off keeps any finalizer out of the parse; the collector is switched back on
(if it was on) however the parse ends.
"""

from __future__ import annotations

import ast
import gc


def parse(text: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(text, filename)` with the garbage collector disabled for its duration."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text, filename)
    finally:
        if was_enabled:
            gc.enable()
