"""The compat layer's no-logic rule (docs/compat.md "The rule"), checked on the source of
every ``hermes_data/compat/*.py`` with :mod:`ast`: no SQL text, no database driver or
SQLAlchemy import, no private name imported or reached, no reach past the store into its
backend, engine or connections. Each check is also shown to catch a deliberately bad
snippet, so a check that silently stopped matching fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ..conftest import REPO

pytestmark = pytest.mark.journal_independent("static source scan")

COMPAT = REPO / "hermes_data" / "compat"

#: A string constant that reads as a SQL statement (keywords in any case, in statement shape).
SQL = re.compile(
    r"\bselect\s+(?:distinct\s+)?(?:\*|[\w.\"]+|count\s*\()[\s\S]*?\bfrom\s+[\w\"]"
    r"|\binsert\s+(?:or\s+\w+\s+)?into\s+[\w\"]"
    r"|\bupdate\s+[\w\"]+\s+set\s+[\w\"]+\s*="
    r"|\bdelete\s+from\s+[\w\"]"
    r"|\b(?:create|drop)\s+(?:temp\w*\s+|virtual\s+|unique\s+)?"
    r"(?:table|index|trigger|view)\b"
    r"|\balter\s+table\s+[\w\"]"
    r"|\bpragma\s+\w+\s*(?:[=(;]|$)"
    r"|\bvacuum\s+into\b"
    r"|\bwith\s+recursive\b",
    re.IGNORECASE)
#: Top-level modules the layer must not import: a driver or SQLAlchemy means a connection.
FORBIDDEN_MODULES = ("sqlite3", "sqlalchemy", "psycopg", "psycopg2")
#: Store attributes past the typed API: the backend, its engine and raw connections.
FORBIDDEN_ATTRIBUTES = frozenset({"backend", "engine", "connect"})
#: Underscored names that are public API: the named-tuple protocol.
NAMEDTUPLE_API = frozenset({"_asdict", "_fields", "_replace", "_make", "_field_defaults"})


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def violations(source: str) -> list[str]:
    """What in ``source`` breaks the rule, one line each (``line: why``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and SQL.search(node.value):
            found.append(f"{line}: SQL text {node.value[:40]!r}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"{line}: imports {alias.name}")
                if any(part.startswith("_") and not _dunder(part)
                       for part in alias.name.split(".")):
                    found.append(f"{line}: imports private module {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{line}: imports from {module}")
            if any(part.startswith("_") and not _dunder(part) for part in module.split(".")):
                found.append(f"{line}: imports from private module {module}")
            for alias in node.names:
                if alias.name.startswith("_") and not _dunder(alias.name):
                    found.append(f"{line}: imports private name {alias.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") and not _dunder(node.attr) \
                    and node.attr not in NAMEDTUPLE_API:
                found.append(f"{line}: reaches private attribute .{node.attr}")
            if node.attr in FORBIDDEN_ATTRIBUTES:
                found.append(f"{line}: reaches .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value
            if (name.startswith("_") and not _dunder(name) and name not in NAMEDTUPLE_API) \
                    or name in FORBIDDEN_ATTRIBUTES:
                found.append(f"{line}: {node.func.id}(…, {name!r})")
    return found


SOURCES = sorted(COMPAT.glob("*.py"))


def test_the_layer_has_its_modules():
    names = {p.name for p in SOURCES}
    assert {"__init__.py", "names.py", "shapes.py", "session_db.py", "async_db.py",
            "exports.py", "core_methods.py", "agent_methods.py",
            "maintenance_methods.py"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_the_layer_keeps_the_rule(path: Path):
    assert violations(path.read_text()) == []


@pytest.mark.parametrize("snippet,why", [
    ('Q = "SELECT id FROM sessions WHERE title = ?"\n', "SQL text"),
    ('q = "select count(*) from messages"\n', "SQL text"),
    ('Q = """\n    INSERT INTO state_meta (key, value) VALUES (?, ?)\n"""\n', "SQL text"),
    ('Q = "UPDATE sessions SET archived = 1"\n', "SQL text"),
    ('Q = "delete from messages where id = ?"\n', "SQL text"),
    ('Q = "CREATE TABLE x (a)"\n', "SQL text"),
    ('Q = "ALTER TABLE sessions ADD COLUMN x"\n', "SQL text"),
    ('Q = "PRAGMA page_count"\n', "SQL text"),
    ('Q = "VACUUM INTO ?"\n', "SQL text"),
    ('Q = "WITH RECURSIVE chain(id) AS (SELECT 1)"\n', "SQL text"),
    ("import sqlite3\n", "imports sqlite3"),
    ("import sqlalchemy.engine\n", "imports sqlalchemy"),
    ("from sqlalchemy import text\n", "imports from sqlalchemy"),
    ("import psycopg\n", "imports psycopg"),
    ("from hermes_data.sessions.store import _write_checked\n", "private name"),
    ("from hermes_data.sessions._hidden import thing\n", "private module"),
    ("def f(store):\n    return store._backend\n", "private attribute"),
    ("def f(self):\n    return self.store._q\n", "private attribute"),
    ("def f(store):\n    return getattr(store, '_tokens')\n", "getattr"),
    ("def f(store):\n    return store.backend.read(lambda c: c)\n", ".backend"),
    ("def f(store):\n    return store.engine.begin()\n", ".engine"),
    ("def f(store):\n    return store.engine.connect()\n", ".connect"),
])
def test_each_check_catches_a_bad_snippet(snippet, why):
    found = violations(snippet)
    assert found, snippet
    assert any(why in v for v in found), found


def test_allowed_code_passes():
    good = ('"""Upstream selects the sessions it deletes from the store; calls delete_session."""\n'
            "from hermes_data.compat.shapes import as_dict\n"
            "import dataclasses\n"
            "def f(self, row):\n"
            '    """Upstream updates the title and sets its source."""\n'
            "    d = row._asdict()\n"
            "    return as_dict(self.store.get_session(d['id'])), type(row).__name__\n")
    assert violations(good) == []
