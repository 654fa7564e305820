"""Imports flow one way (BRIEF, ARCHITECTURE.md "Packages"): checked on the source with `ast`, every
import statement of every module (top level, function-local and TYPE_CHECKING ones alike).

- each package imports only the packages of ours below it (`server/` composes: it may import all);
- `scheduler/` reaches the store through its own declared Protocol of it (`scheduler.store_port.StorePort`),
  never the concrete class (`storage.message_store`), and names storage's declared value types
  (`storage.store_types`), plus the two documented exceptions: the one failure policy for
  background tasks (`storage.supervisor`) and the block reservation of the timer wheel's own mapped files
  (`storage.mapped_file`). A scheduler module naming any other storage module (config_store, meta_store,
  meta_schema, commitlog...) fails here;
- no import circle inside a package (issue 27): the modules of one package, with every import counted
  (TYPE_CHECKING and function-local ones too), form no loop; any circle fails.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.source import parse

ROOT = Path(__file__).resolve().parents[1]
OURS = ("codec", "remoting", "storage", "scheduler", "server", "client", "analytics")

# package -> the other packages of ours it may import
ALLOWED = {
    "codec": set(),
    "remoting": {"codec"},
    "storage": {"codec"},
    "scheduler": {"codec", "storage"},
    # analytics: only the `delaymq analytics` subcommand, imported lazily inside client/cli
    "client": {"codec", "remoting", "analytics"},
    "analytics": set(),
}
SCHEDULER_STORAGE = {"storage.store_types", "storage.supervisor", "storage.mapped_file"}


def imported_modules(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, dotted module) of every import in `source`, the source of `module`; relative imports
    resolved, `from pkg import name` reported as `pkg.name` (name may be a module)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[:len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found += [(node.lineno, f"{base}.{alias.name}" if base else alias.name) for alias in node.names]
    yield from sorted(found)


def modules_of(package: str) -> Iterator[tuple[str, str, bool, str]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        yield str(rel), ".".join(parts), is_package, path.read_text(encoding="utf-8")


def package_violations(package: str, source: str, module: str, is_package: bool = False) -> list[str]:
    out = []
    for line, name in imported_modules(source, module, is_package):
        top = name.split(".")[0]
        if top in OURS and top != package and top not in ALLOWED[package]:
            out.append(f"{module}:{line} imports {name}")
    return out


def scheduler_storage_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    out = []
    for line, name in imported_modules(source, module, is_package):
        if name.split(".")[0] != "storage":
            continue
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in SCHEDULER_STORAGE):
            out.append(f"{module}:{line} imports {name}")
    return out


def test_packages_import_one_way():
    found = []
    for package in ALLOWED:
        for _rel, module, is_package, source in modules_of(package):
            found += package_violations(package, source, module, is_package)
    assert found == []


def test_scheduler_reaches_storage_only_through_its_port():
    found = []
    for _rel, module, is_package, source in modules_of("scheduler"):
        found += scheduler_storage_violations(source, module, is_package)
    assert found == []


def test_the_checks_catch_what_they_forbid():
    """The scanner sees every form of import (so the two tests above can fail)."""
    src = ("from storage.config_store import read_json\n"
           "import storage.meta_schema\n"
           "from storage import meta_store\n"
           "def f():\n    from server.wiring import put_request\n"
           "from typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from client.producer import Producer\n"
           "from storage.message_store import MessageStore\n"
           "from .timer import state\n")
    assert scheduler_storage_violations(src, "scheduler.x") == [
        "scheduler.x:1 imports storage.config_store.read_json", "scheduler.x:2 imports storage.meta_schema",
        "scheduler.x:3 imports storage.meta_store", "scheduler.x:9 imports storage.message_store.MessageStore"]
    assert package_violations("scheduler", src, "scheduler.x") == [
        "scheduler.x:5 imports server.wiring.put_request", "scheduler.x:8 imports client.producer.Producer"]
    assert [n for _, n in imported_modules("from . import _wire\nfrom ..codec import frame\n", "client.cli.m")] == [
        "client.cli._wire", "client.codec.frame"]
    assert [n for _, n in imported_modules("from . import x\n", "client", is_package=True)] == ["client.x"]


def import_graph(modules: dict[str, tuple[bool, str]]) -> dict[str, set[str]]:
    """module -> the modules of `modules` it imports (`from pkg.mod import Name` is an arrow to pkg.mod)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, (is_package, source) in modules.items():
        for _line, name in imported_modules(source, module, is_package):
            parts = name.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            target = ".".join(parts)
            if parts and target != module:
                edges[module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_no_import_circle_inside_a_package():
    found = []
    for package in OURS:
        modules = {module: (is_package, source) for _rel, module, is_package, source in modules_of(package)}
        found += [sorted(circle) for circle in circles(import_graph(modules))]
    assert found == [], "import circles (make the lower module take what it needs as a parameter or Protocol)"


def test_the_circle_check_sees_a_circle():
    modules = {"p.a": (False, "from p.b import X\n"), "p.b": (False, "def f():\n    from p import c\n"),
               "p.c": (False, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import Y\n"),
               "p.d": (False, "from p.a import Z\n"), "p": (True, "")}
    assert circles(import_graph(modules)) == [frozenset({"p.a", "p.b", "p.c"})]
    assert circles(import_graph({"p.a": (False, "import p.b\n"), "p.b": (False, "")})) == []
