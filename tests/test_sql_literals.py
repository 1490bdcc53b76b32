"""Issue 32, acceptance 1: a ratchet on the session store's hand-written CRUD statements.

Counts, by AST, the whole CRUD statement literals in ``hermes_data/sessions``: string
literals (plain, f-strings, implicit concatenations — one literal each) that start with
SELECT / INSERT / UPDATE / DELETE / REPLACE / WITH and do not touch an object Core expresses
badly (FTS5, tsvector, trigram, CJK grams, a recursive CTE, the catalogue or a PRAGMA). Those
stay as named ``text()`` fragments; every other statement should be a Core construct built
from ``hermes_data/sessions/schema.py`` and compiled once by ``hermes_data.statements``.

The count may only go down: lower :data:`CEILING` when you convert more.
``python -m tests.test_sql_literals`` prints the literals by module.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "hermes_data" / "sessions"

#: Whole CRUD statement literals left (issue 32 counted 397 with its own rules; this
#: counter's first reading on main was :data:`STARTING_COUNT`).
STARTING_COUNT = 328
CEILING = 252

_START = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|WITH)\b", re.IGNORECASE)
#: What makes a statement SQL rather than prose starting with the same word.
_SQL_SHAPE = {
    "select": re.compile(r"\bFROM\b|^\s*SELECT\s+(\S+\s*,|\d|\(|\?|:|COALESCE|count|max|min)",
                         re.IGNORECASE),
    "insert": re.compile(r"^\s*INSERT\s+(OR\s+\w+\s+)?INTO\b", re.IGNORECASE),
    "update": re.compile(r"^\s*UPDATE\s+\S+\s+SET\b|^\s*UPDATE\s+\S+\s*$", re.IGNORECASE),
    "delete": re.compile(r"^\s*DELETE\s+FROM\b", re.IGNORECASE),
    "replace": re.compile(r"^\s*REPLACE\s+INTO\b", re.IGNORECASE),
    "with": re.compile(r"^\s*WITH\s+(RECURSIVE\s+)?\w+(\s*\([^)]*\))?\s+AS\b", re.IGNORECASE),
}
#: Objects a statement may touch and stay raw SQL (FTS5, tsvector, trigram, CJK grams,
#: recursive CTEs, catalogue and PRAGMA reads).
_EXEMPT = re.compile(
    r"fts|tsvector|tsquery|ts_rank|ts_headline|websearch|plainto|trgm|trigram|similarity|"
    r"word_similarity|cjk|gram|\bMATCH\b|\bRECURSIVE\b|PRAGMA|sqlite_master|sqlite_schema|"
    r"sqlite_temp|sqlite_sequence|pg_catalog|pg_class|pg_index|pg_namespace|pg_attribute|"
    r"pg_indexes|pg_trigger|pg_proc|pg_extension|pg_stat|pg_settings|pg_tables|"
    r"information_schema|to_regclass|current_setting|pg_advisory|pg_try_advisory|"
    # trigger bodies (NEW./OLD. rows) and FTS5 commands ('rebuild', 'optimize', …)
    r"\bNEW\.|\bOLD\.|'rebuild'|'optimize'|'merge'|'automerge'|'delete-all'|"
    r"'integrity-check'",
    re.IGNORECASE)


def _text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
            else:
                parts.append("{x}")
        return "".join(parts)
    return None


def is_crud_statement(s: str) -> bool:
    """Whether the literal ``s`` is a whole CRUD statement that Core should express."""
    m = _START.match(s)
    if not m:
        return False
    if not _SQL_SHAPE[m.group(1).lower()].search(s):
        return False
    return not _EXEMPT.search(s)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def literals(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(module path, line, text) of every counted literal under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstring_nodes(tree)
        inner: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                inner.update(id(v) for v in node.values)
                # format specs hold constants too
                for v in node.values:
                    if isinstance(v, ast.FormattedValue) and v.format_spec is not None:
                        inner.add(id(v.format_spec))
        for node in ast.walk(tree):
            if id(node) in skip or id(node) in inner:
                continue
            s = _text(node)  # type: ignore[arg-type]
            if s is not None and is_crud_statement(s):
                rel = str(path.relative_to(root.parents[1]))
                found.append((rel, node.lineno, " ".join(s.split())))  # type: ignore[attr-defined]
    return found


def test_the_counter_sees_sql_and_skips_prose_and_exempt_objects():
    assert is_crud_statement("SELECT id FROM sessions WHERE id = ?")
    assert is_crud_statement("  update sessions SET title = :t")
    assert is_crud_statement("INSERT OR IGNORE INTO state_meta (key, value) VALUES (?, ?)")
    assert is_crud_statement("WITH x AS (SELECT 1) DELETE FROM messages WHERE id IN x")
    assert not is_crud_statement("Select the newest row.")
    assert not is_crud_statement("with the writer lock held")
    assert not is_crud_statement("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?")
    assert not is_crud_statement("WITH RECURSIVE up(id) AS (SELECT ?) SELECT id FROM up")
    assert not is_crud_statement("SELECT name FROM sqlite_master WHERE type = 'table'")
    assert not is_crud_statement("SELECT MIN(display_order) INTO peer FROM messages m "
                                 "WHERE m.session_id = NEW.session_id")
    assert not is_crud_statement("INSERT INTO t(t) VALUES ('rebuild')")
    src = 'a = "SELECT id " "FROM t"\nb = f"DELETE FROM {t} WHERE id = ?"\n'
    tree_dir = ROOT  # the counter itself walks files; check the AST shape here
    tree = ast.parse(src)
    texts = [_text(n) for n in ast.walk(tree) if isinstance(n, (ast.Constant, ast.JoinedStr))]
    assert "SELECT id FROM t" in texts and "DELETE FROM {x} WHERE id = ?" in texts
    assert tree_dir.is_dir()


def test_crud_statement_literals_do_not_grow():
    found = literals()
    assert len(found) <= CEILING, (
        f"{len(found)} whole CRUD statement literals in hermes_data/sessions, ceiling "
        f"{CEILING}: build new statements as Core constructs from sessions/schema.py "
        "(hermes_data.statements.Prepared); `python -m tests.test_sql_literals` lists them")
    if len(found) < CEILING:
        print(f"\n{len(found)} CRUD literals left: lower CEILING from {CEILING}")


def main() -> None:
    """Print the counted literals by module, then the per-module counts and the total."""
    found = literals()
    verbose = "-v" in sys.argv
    per = Counter(m for m, _, _ in found)
    if verbose:
        for module, line, s in found:
            sys.stdout.write(f"{module}:{line}: {s[:160]}\n")
    for module, n in sorted(per.items()):
        sys.stdout.write(f"{n:4d} {module}\n")
    sys.stdout.write(f"{len(found):4d} total\n")


if __name__ == "__main__":
    main()
