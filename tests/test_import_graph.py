"""No import cycles inside ``hermes_data`` (imports under ``if TYPE_CHECKING:`` are not edges).

The graph is built from the AST of every module, so it sees what a run of the import system
would miss until the line executes: imports inside functions, relative imports, and modules
named by string literals — ``importlib.import_module("hermes_data.x")`` and tables of such
names (``_LAZY``, command-module tuples). A package ``__init__`` that imports
``f"{__name__}.{name}"`` gets an edge to each submodule its string constants name. The
implicit import of a parent package is not an edge (every submodule would otherwise close a
cycle with a package that re-exports it lazily).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.journal_independent("static import graph")

PACKAGE = "hermes_data"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE



def _module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = _module_names()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _resolve_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str) -> str | None:
    """The ``hermes_data`` module ``name`` refers to (itself, or its nearest known parent)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_import_module_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ("import_module", "__import__")


def _is_get_logger_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "getLogger")


def imports_of(module: str, source: str | None = None) -> set[str]:
    """Every ``hermes_data`` module that ``module`` imports, anywhere in its body (``source``
    stands in for the file's text)."""
    if source is None:
        source = MODULES[module].read_text()
    tree = ast.parse(source, str(MODULES[module]))
    # Imports under ``if TYPE_CHECKING:`` name types for annotations and never run: no edge
    # (the import-linter contracts exclude them too, pyproject.toml).
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
                   for stmt in node.body for n in ast.walk(stmt)}
    found: set[str] = set()
    logger_names = {id(n.args[0]) for n in ast.walk(tree) if _is_get_logger_call(n) and n.args}
    relative_prefix = None
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(filter(None, (_known(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_from(module, node)
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = _known(f"{target}.{alias.name}")
                found.add(sub if sub and sub != _known(target) else _known(target))
        elif _is_import_module_call(node):
            arg = node.args[0]
            if isinstance(arg, ast.JoinedStr) and _is_package(module):
                head = arg.values[0] if arg.values else None
                if (isinstance(head, ast.FormattedValue) and getattr(head.value, "id", "") == "__name__"):
                    relative_prefix = module + "."
    for node in ast.walk(tree):  # string literals naming a module: importlib targets and tables
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in logger_names:
            if node.value.startswith(PACKAGE + ".") and node.value in MODULES:
                found.add(node.value)
            elif relative_prefix and relative_prefix + node.value in MODULES:
                found.add(relative_prefix + node.value)
    found.discard(None)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    return {module: imports_of(module) for module in MODULES}


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(set(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path that returns to its start) per strongly connected component."""
    return [_a_cycle(graph, c) for c in components(graph)]


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth-first: the shortest way back to start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component without a cycle")


def test_the_graph_sees_hidden_imports():
    """The builder itself: function-level, relative and string-named imports are edges;
    logger names and docstrings are not."""
    source = '''
"""Mentions hermes_data.copy.transfer in prose only."""
import importlib
import logging
from . import engine
from .telemetry import schema, clock_missing
from sqlalchemy import text

log = logging.getLogger("hermes_data.config")
_LAZY = {"Thing": ("hermes_data.migrate.shape", "Thing")}


def late():
    from .errors import HermesDataError
    return importlib.import_module("hermes_data.migrate.ops")
'''
    assert imports_of("hermes_data.isolation", source) == {
        "hermes_data.engine", "hermes_data.telemetry.schema", "hermes_data.telemetry",
        "hermes_data.migrate.shape", "hermes_data.errors", "hermes_data.migrate.ops"}
    package = '''
import importlib
_EXPORTS = {"TelemetryStore": "store"}
def __getattr__(name):
    return importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
'''
    assert imports_of("hermes_data.telemetry", package) == {"hermes_data.telemetry.store"}
    assert imports_of("hermes_data.telemetry.reads", "from .. import migrate\nfrom . import sql") == {
        "hermes_data.migrate", "hermes_data.telemetry.sql"}
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import engine\n"
    assert imports_of("hermes_data.telemetry.reads", typed) == set()
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    graph = import_graph()
    report = []
    for component in components(graph):
        edges = sorted((a, b) for a in component for b in graph[a] & component)
        report.append("  cycle: " + " -> ".join(_a_cycle(graph, component)) + "\n    edges: "
                      + ", ".join(f"{a} -> {b}" for a, b in edges))
    assert not report, "import cycles inside hermes_data:\n" + "\n".join(report)
