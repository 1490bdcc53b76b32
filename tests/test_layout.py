"""The package's shape (docs/architecture.md): folder sizes, the session store's facade size,
and where the session store's SQL text lives (the shared kit ``sessions/sql/``, a concern's
``sql.py`` / ``*_sql.py``, or a ``ddl.py`` of schema objects)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.journal_independent("source layout scans")

PACKAGE = Path(__file__).resolve().parents[1] / "hermes_data"
SESSIONS = PACKAGE / "sessions"
#: A module past this many lines states why at its top (a line ``Size: <reason>`` in its
#: docstring or a leading comment); size alone is never a reason to split one.
LONG_MODULE_LINES = 1500
MAX_FACADE_LINES = 450
#: ``hermes_data/sessions/`` entries (files and folders): the facade, its types and the
#: concern packages — a newcomer reads the architecture from this listing.
MAX_SESSIONS_ENTRIES = 16
MAX_MODULES_PER_FOLDER = 20
_SQL_START = re.compile(
    r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|ALTER|PRAGMA)\s", re.I)


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def docstring_ids(tree: ast.AST) -> set[int]:
    """``id()`` of every docstring constant of ``tree`` (module, class, function), so a scan
    of string literals can skip them (also tests/test_sql_literals.py)."""
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
    skip = docstring_ids(tree)
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


def _states_its_size(text: str) -> bool:
    head = text[:3000]
    return re.search(r"^\s*(#\s*)?Size: \S", head, re.M) is not None


def long_modules_without_reason(root: Path) -> dict[str, int]:
    """Modules over :data:`LONG_MODULE_LINES` lines that do not say why at their top."""
    found = {}
    for path in _modules(root):
        text = path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > LONG_MODULE_LINES and not _states_its_size(text):
            found[str(path.relative_to(root))] = n
    return found


def test_a_long_module_states_why():
    assert not long_modules_without_reason(PACKAGE)


def test_the_long_module_rule_can_fail(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * (LONG_MODULE_LINES + 1))
    (tmp_path / "why.py").write_text('"""One concept.\n\nSize: one table of 40 statements."""\n'
                                     + "x = 1\n" * (LONG_MODULE_LINES + 1))
    assert long_modules_without_reason(tmp_path) == {"long.py": LONG_MODULE_LINES + 1}


def folder_sizes(root: Path) -> dict[str, int]:
    """Python modules per folder (``__init__`` included), relative to ``root``'s parent."""
    sizes: dict[str, int] = {}
    for path in _modules(root):
        key = str(path.parent.relative_to(root.parent))
        sizes[key] = sizes.get(key, 0) + 1
    return sizes


def test_no_folder_holds_more_than_twenty_modules():
    crowded = {k: n for k, n in folder_sizes(PACKAGE).items() if n > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"split these folders by concern: {crowded}"


def test_the_session_store_folder_shows_its_concerns():
    entries = sorted(p.name for p in SESSIONS.iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_SESSIONS_ENTRIES, entries
    for concern in ("core", "storage", "search", "agent", "coordination", "gateway", "ui",
                    "backends", "sql"):
        assert (SESSIONS / concern / "__init__.py").is_file(), concern


def test_session_store_facade_stays_small():
    tree = ast.parse((SESSIONS / "store.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SessionStore")
    lines = cls.end_lineno - cls.lineno + 1
    assert lines < MAX_FACADE_LINES, f"SessionStore is {lines} lines"


def holds_sql(path: Path) -> bool:
    """Whether ``path`` (under ``sessions/``) is a place for SQL text."""
    rel = path.relative_to(SESSIONS)
    return (rel.parts[0] == "sql" or path.name in ("sql.py", "ddl.py")
            or path.stem.endswith("_sql"))


def test_session_store_sql_lives_in_sql_modules():
    outside = {str(p.relative_to(PACKAGE)): hits for p in _modules(SESSIONS)
               if not holds_sql(p) and (hits := sql_literals(p))}
    assert not outside, f"SQL statement literals outside the SQL modules: {outside}"


def test_the_scan_sees_sql_literals(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Delete nothing (a docstring)."""\nA = "SELECT 1"\nB = f"update t SET x = {1}"\n'
                     'C = "Selected items"\n')
    assert sorted({line for line, _ in sql_literals(probe)}) == [2, 3]
