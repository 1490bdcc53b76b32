"""Layering of ``hermes_data`` as the AST import graph sees it (string-named modules
included, which import-linter's contracts in ``tests/test_import_contracts.py`` do not see):
the generic layer (engine, migration runner, connection tracking) imports nothing from the
session store except through the two registry tables, which hold module names, not imports.

Each scan is also run on a synthetic input that must fail it, so a scan that silently
matches nothing cannot pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_graph import MODULES, import_graph, imports_of

pytestmark = pytest.mark.journal_independent("static source scans")

ROOT = Path(__file__).resolve().parent.parent / "hermes_data"

#: The generic modules that must not import the session store.
GENERIC = ("hermes_data.engine", "hermes_data.tracked", "hermes_data.files",
           "hermes_data.config", "hermes_data.errors", "hermes_data.isolation")
#: Edges the import graph draws from string literals that are registry entries (a store name
#: → the module holding its fresh-creation hook or migration spec), not imports of the store.
REGISTRY_EDGES = {
    ("hermes_data.migrate.fresh", "hermes_data.sessions.storage.fresh"): "FRESH_MODULES",
    ("hermes_data.migrate.runner", "hermes_data.sessions.storage.adoption"): "_SPEC_MODULES",
}


def _is_generic(module: str) -> bool:
    return module in GENERIC or module == "hermes_data.migrate" \
        or module.startswith("hermes_data.migrate.")


def sessions_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(module, target)`` edges from a generic module into ``hermes_data.sessions``, less
    the registry entries of :data:`REGISTRY_EDGES`."""
    return sorted((m, t) for m, targets in graph.items() if _is_generic(m)
                  for t in targets
                  if (t == "hermes_data.sessions" or t.startswith("hermes_data.sessions."))
                  and (m, t) not in REGISTRY_EDGES)


def test_the_generic_layer_imports_nothing_from_the_session_store():
    graph = import_graph()
    assert "hermes_data.tracked" in graph and "hermes_data.engine" in graph
    assert sessions_imports(graph) == []


def test_the_allowed_edges_are_registry_tables_only():
    """Each allowed edge is a string value of the named table, and the module has no import
    statement of the target (so the allowance cannot hide a real import)."""
    for (module, target), table in REGISTRY_EDGES.items():
        tree = ast.parse(MODULES[module].read_text())
        values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", None) == table for t in n.targets)]
        assert len(values) == 1 and isinstance(values[0], ast.Dict), (module, table)
        assert target in [v.value for v in values[0].values if isinstance(v, ast.Constant)]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("hermes_data.sessions"), module
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("hermes_data.sessions") for a in node.names)


def test_the_import_scan_fails_on_a_synthetic_import():
    source = "from hermes_data.sessions.storage.filesafety import TrackedConnection\n"
    graph = {"hermes_data.engine": imports_of("hermes_data.engine", source),
             "hermes_data.migrate.runner": imports_of(
                 "hermes_data.migrate.runner", "def f():\n    import hermes_data.sessions.store\n")}
    assert sessions_imports(graph) == [
        ("hermes_data.engine", "hermes_data.sessions.storage.filesafety"),
        ("hermes_data.migrate.runner", "hermes_data.sessions.store")]
