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

from tests.test_layout import docstring_ids

ROOT = Path(__file__).resolve().parents[1] / "hermes_data" / "sessions"

#: Whole CRUD statement literals left (issue 32 counted 397 with its own rules; this
#: counter's first reading on main was :data:`STARTING_COUNT`).
STARTING_COUNT = 328
CEILING = 20

#: Why each module still holds hand-written CRUD statements (issue 32: every literal left
#: needs a reason). A module with literals and no entry fails the test below.
REASONS = {
    "hermes_data/sessions/backends/sql.py": "a probe of an FTS5 table by name (LIMIT 0)",
    "hermes_data/sessions/gateway/telegram_sql.py": "the frozen v3 upgrade's copy between a "
        "legacy table and its rebuild copy",
    "hermes_data/sessions/search/cjk_sql.py": "PostgreSQL's hermes_cjk_grams id list, a text "
        "fragment of the page's ARRAY(…) candidates",
    "hermes_data/sessions/search/sql.py": "the candidates' id-list arms (trigram/CJK-gram "
        "GIN) and the tsvector page",
    "hermes_data/sessions/sql/lineage.py": "tails of the recursive lineage CTEs (the WITH "
        "RECURSIVE head is prepended)",
    "hermes_data/sessions/storage/adoption_sql.py": "upstream's schema_version table, which "
        "the store reads but never declares",
    "hermes_data/sessions/storage/fts/ddl.py": "the legacy inline FTS5 tables' refill (tables "
        "by name)",
    "hermes_data/sessions/storage/fts/layout_sql.py": "the FTS layout migration's teardown "
        "of demoted FTS5 shadow tables (named from sqlite_master)",
    "hermes_data/sessions/storage/fts/sql.py": "FTS index maintenance (FTS5 tables, "
        "commands and shadow tables by name)",
    "hermes_data/sessions/storage/opening_sql.py": "the settled open's one snapshot read: the "
        "sqlite_master text and Alembic's undeclared alembic_version beside the markers",
    "hermes_data/sessions/storage/repair/sql.py": "row counts of a damaged file's tables "
        "(named from sqlite_master)",
}

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
    r"word_similarity|cjk|_grams?\b|\bMATCH\b|\bRECURSIVE\b|PRAGMA|sqlite_master|sqlite_schema|"
    r"sqlite_temp|sqlite_sequence|pg_catalog|pg_class|pg_index|pg_namespace|pg_attribute|"
    r"pg_indexes|pg_trigger|pg_proc|pg_extension|pg_stat|pg_settings|pg_tables|"
    r"information_schema|to_regclass|current_setting|pg_advisory|pg_try_advisory|"
    # trigger bodies (NEW./OLD. rows) and FTS5 commands ('rebuild', 'optimize', …)
    r"\bNEW\.|\bOLD\.",
    re.IGNORECASE)
#: FTS5 commands, written as string literals ('rebuild', 'optimize', …): matched on the
#: whole statement, while :data:`_EXEMPT` is matched outside string literals (a
#: ``state_meta`` key named ``'fts_stale'`` is no FTS object).
_FTS5_COMMAND = re.compile(
    r"'rebuild'|'optimize'|'merge'|'automerge'|'usermerge'|'delete-all'|'integrity-check'",
    re.IGNORECASE)
_QUOTED = re.compile(r"'(?:[^']|'')*'")


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
    return not (_FTS5_COMMAND.search(s) or _EXEMPT.search(_QUOTED.sub("''", s)))


def literals(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(module path, line, text) of every counted literal under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstring_ids(tree)
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
    assert not is_crud_statement("DELETE FROM messages_cjk_grams WHERE doc = ?")
    # 'telegram' is not a gram table: the exemption is anchored.
    assert is_crud_statement("SELECT id FROM sessions WHERE source = 'telegram'")
    # An object's name inside a string value is no object: a state_meta key is counted.
    assert is_crud_statement("SELECT 1 FROM state_meta WHERE key = 'fts_stale'")
    assert not is_crud_statement("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
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


def test_every_module_with_literals_says_why():
    modules = {m for m, _, _ in literals()}
    missing = sorted(modules - REASONS.keys())
    assert not missing, f"hand-written CRUD statements without a reason in REASONS: {missing}"


#: The marker of a statement's own reason: a comment ``# not Core: <why>`` in the comment
#: block directly above the literal (or above the statement holding it).
REASON_MARK = "not Core:"

def _comment_block_above(lines: list[str], line: int) -> list[str]:
    """The contiguous comment lines directly above 1-based ``line``."""
    block = []
    i = line - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        block.append(lines[i])
        i -= 1
    return block


def unreasoned(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """The counted literals with no ``# not Core:`` comment above them or their statement."""
    out = []
    by_module: dict[str, list[tuple[int, str]]] = {}
    for module, line, text in literals(root):
        by_module.setdefault(module, []).append((line, text))
    for module, found in by_module.items():
        source = (root.parents[1] / module).read_text(encoding="utf-8")
        lines = source.splitlines()
        wanted = {line for line, _ in found}
        starts: dict[int, int] = {}  # literal line -> first line of its innermost statement
        for stmt in ast.walk(ast.parse(source)):
            if isinstance(stmt, ast.stmt) and stmt.lineno <= max(wanted) \
                    and (stmt.end_lineno or stmt.lineno) >= min(wanted):
                for ln in wanted:
                    if stmt.lineno <= ln <= (stmt.end_lineno or stmt.lineno):
                        starts[ln] = max(starts.get(ln, 0), stmt.lineno)
        for line, text in found:
            candidates = {line, starts.get(line, line)}
            if not any(REASON_MARK in c for ln in candidates
                       for c in _comment_block_above(lines, ln)):
                out.append((module, line, text))
    return out


def test_every_literal_says_why():
    missing = [(m, ln) for m, ln, _ in unreasoned()]
    assert not missing, (
        "hand-written CRUD statements without a `# not Core: <why>` comment directly above "
        f"them: {missing}")


def main() -> None:
    """Print the counted literals by module, then the per-module counts and the total."""
    found = literals()
    verbose = "-v" in sys.argv
    per = Counter(m for m, _, _ in found)
    if verbose:
        for module, line, s in found:
            sys.stdout.write(f"{module}:{line}: {s[:160]}\n")
    for module, n in sorted(per.items()):
        sys.stdout.write(f"{n:4d} {module}  ({REASONS.get(module, 'NO REASON')})\n")
    sys.stdout.write(f"{len(found):4d} total\n")


if __name__ == "__main__":
    main()
