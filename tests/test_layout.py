"""The package's shape (issue 11): module sizes, the session store's facade size, and every
SQL statement text of the session store inside ``hermes_data/sessions/sql/``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.journal_independent("source layout scans")

PACKAGE = Path(__file__).resolve().parents[1] / "hermes_data"
SESSIONS = PACKAGE / "sessions"
MAX_MODULE_LINES = 700
MAX_FACADE_LINES = 450
_SQL_START = re.compile(
    r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|ALTER|PRAGMA)\s", re.I)


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def sql_literals(path: Path) -> list[tuple[int, str]]:
    """String constants (and the leading literal of f-strings) that start an SQL statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values \
                and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value)
        if text is not None and _SQL_START.match(text + " "):
            found.append((node.lineno, text[:60]))
    return found


def test_no_module_over_the_line_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules(PACKAGE)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_session_store_facade_stays_small():
    tree = ast.parse((SESSIONS / "store.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SessionStore")
    lines = cls.end_lineno - cls.lineno + 1
    assert lines < MAX_FACADE_LINES, f"SessionStore is {lines} lines"


def test_session_store_sql_lives_in_its_sql_package():
    outside = {str(p.relative_to(PACKAGE)): hits for p in _modules(SESSIONS)
               if "sql" not in p.relative_to(SESSIONS).parts[:1] and (hits := sql_literals(p))}
    assert not outside, f"SQL statement literals outside sessions/sql/: {outside}"


def test_the_scan_sees_sql_literals(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Delete nothing (a docstring)."""\nA = "SELECT 1"\nB = f"update t SET x = {1}"\n'
                     'C = "Selected items"\n')
    assert sorted({line for line, _ in sql_literals(probe)}) == [2, 3]
