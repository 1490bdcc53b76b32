"""The placeholder renderer of the session store (``hermes_data/sessions/sql/dialect.py``):
what each dialect's driver receives, the per-dialect :class:`Statements` instances, and the
rule that keeps it the only renderer."""

from __future__ import annotations

import ast
import sqlite3
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_data.sessions.sql.dialect import (DIALECTS, Statements, marks, render,
                                              value_rows)

from ..conftest import PG_ADMIN_URL

SESSIONS = Path(__file__).resolve().parents[2] / "hermes_data" / "sessions"
#: The one module allowed to rewrite or build placeholders.
RENDERER = SESSIONS / "sql" / "dialect.py"
#: Names a function may not have outside :data:`RENDERER`: a second renderer, placeholder
#: builder or per-module statements cache would be defined under one of these.
RENDERER_NAMES = frozenset({"render", "_render", "marks", "_marks", "for_dialect",
                            "_for_dialect"})


# -- the renderer -------------------------------------------------------------------------

def test_sqlite_receives_the_statement_unchanged():
    stmt = "SELECT id FROM sessions WHERE id = ? AND title LIKE '50%' ESCAPE '\\'"
    assert render("sqlite", stmt) is stmt


def test_postgresql_receives_format_placeholders_and_doubled_percent_signs():
    assert render("postgresql", "SELECT ? FROM t WHERE a LIKE '%x%' AND b = ?") == \
        "SELECT %s FROM t WHERE a LIKE '%%x%%' AND b = %s"
    # The % of a rendered %s is never doubled: percent signs are escaped before ? turns into %s.
    assert render("postgresql", "SELECT '%s', ?") == "SELECT '%%s', %s"
    assert render("postgresql", "SELECT 1") == "SELECT 1"


def test_the_postgresql_text_is_cached_per_statement():
    stmt = "".join(["SELECT value FROM state_meta ", "WHERE key = ?"])  # a fresh string object
    first = render("postgresql", stmt)
    assert render("postgresql", "SELECT value FROM state_meta WHERE key = ?") is first


def test_an_unknown_dialect_is_refused():
    with pytest.raises(ValueError, match="supports sqlite and postgresql, not 'mysql'"):
        render("mysql", "SELECT ?")


def test_marks_and_value_rows():
    assert marks(0) == ""
    assert marks(1) == "?"
    assert marks(3) == "?, ?, ?"
    assert value_rows(2, 1) == "(?), (?)"
    assert value_rows(2, 2) == "(?, ?), (?, ?)"
    assert value_rows(0, 2) == ""


def test_each_driver_binds_what_the_renderer_gives_it():
    stmt = "SELECT ? || '%' || ?"  # a literal % between two values
    conn = sqlite3.connect(":memory:")
    try:
        assert conn.execute(render("sqlite", stmt), ("50", "!")).fetchone() == ("50%!",)
    finally:
        conn.close()
    engine = sa.create_engine(PG_ADMIN_URL)
    try:
        with engine.connect() as pg:
            assert pg.exec_driver_sql(render("postgresql", stmt), ("50", "!")).scalar() == "50%!"
    finally:
        engine.dispose()


# -- Statements -----------------------------------------------------------------------------

class _Probe(Statements):
    def __init__(self, dialect: str) -> None:
        super().__init__(dialect)
        self.GET = self.render("SELECT v FROM t WHERE k = ? AND v LIKE 'a%'")

    def in_list(self, n: int) -> str:
        return self.render(f"SELECT v FROM t WHERE k IN ({marks(n)})")


class _OtherProbe(Statements):
    pass


def test_statements_are_built_once_per_class_and_dialect():
    sq, pg = _Probe.for_dialect("sqlite"), _Probe.for_dialect("postgresql")
    assert _Probe.for_dialect("sqlite") is sq and _Probe.for_dialect("postgresql") is pg
    assert (sq.dialect, pg.dialect) == DIALECTS
    assert sq.GET == "SELECT v FROM t WHERE k = ? AND v LIKE 'a%'"
    assert pg.GET == "SELECT v FROM t WHERE k = %s AND v LIKE 'a%%'"
    assert pg.in_list(2) == "SELECT v FROM t WHERE k IN (%s, %s)"
    other = _OtherProbe.for_dialect("sqlite")
    assert type(other) is _OtherProbe and other is not sq


def test_statements_refuse_an_unknown_dialect():
    with pytest.raises(ValueError, match="not 'postgres'"):
        _Probe.for_dialect("postgres")


def test_every_concern_gets_its_statements_from_the_base_class():
    from hermes_data.sessions import sql as fragments
    from hermes_data.sessions.agent import (accounting_sql, bulk_sql, identity_sql,
                                            message_rows_sql, projections_sql, session_meta_sql)
    from hermes_data.sessions.coordination import sql as coordination_sql
    from hermes_data.sessions.core.maintenance_sql import MaintenanceStatements
    from hermes_data.sessions.gateway import peers_sql, repair_sql, telegram_sql
    from hermes_data.sessions.gateway import sql as gateway_sql

    modules = (fragments, accounting_sql, bulk_sql, identity_sql, message_rows_sql,
               projections_sql, session_meta_sql, coordination_sql, peers_sql, repair_sql,
               telegram_sql, gateway_sql)
    for module in modules:
        for d in DIALECTS:
            st = module.for_dialect(d)
            assert isinstance(st, Statements) and st.dialect == d, module.__name__
            assert module.for_dialect(d) is st is type(st).for_dialect(d), module.__name__
    assert MaintenanceStatements.for_dialect("postgresql").dialect == "postgresql"


# -- one renderer ----------------------------------------------------------------------------

def _is_placeholder_text(node: ast.AST) -> bool:
    # "?" / "(?, ?)" / "?, " …: a string of nothing but placeholders and their punctuation.
    return (isinstance(node, ast.Constant) and isinstance(node.value, str) and "?" in node.value
            and set(node.value) <= set("?, ()"))


def second_renderers(source: str) -> list[str]:
    """What in ``source`` (Python text) renders or builds placeholders itself.

    The rule: placeholders are rewritten per dialect and placeholder lists are built only in
    ``sql/dialect.py``. Elsewhere, no function may be named like a renderer, placeholder
    builder or per-module statements cache (:data:`RENDERER_NAMES`); no ``.replace()`` may
    replace ``"?"`` or double ``"%"`` (the qmark-to-format rewrite; escaping ``%`` for
    ``LIKE`` is not that); and no
    placeholder text may be repeated with ``*`` (``", ".join("?" * n)``: use ``marks``).
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name in RENDERER_NAMES:
            found.append(f"line {node.lineno}: def {node.name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "replace" and len(node.args) == 2 \
                and all(isinstance(a, ast.Constant) for a in node.args) \
                and (node.args[0].value == "?" or
                     (node.args[0].value, node.args[1].value) == ("%", "%%")):
            found.append(f"line {node.lineno}: .replace({node.args[0].value!r}, …)")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            sides = (node.left, node.right)
            if any(_is_placeholder_text(s) or (isinstance(s, ast.List) and s.elts
                                               and all(map(_is_placeholder_text, s.elts)))
                   for s in sides):
                found.append(f"line {node.lineno}: placeholder text repeated with *")
    return found


def test_the_session_store_has_one_placeholder_renderer():
    found = {}
    for path in sorted(SESSIONS.rglob("*.py")):
        if path == RENDERER or "__pycache__" in path.parts:
            continue
        hits = second_renderers(path.read_text(encoding="utf-8"))
        if hits:
            found[str(path.relative_to(SESSIONS))] = hits
    assert not found, f"render placeholders with hermes_data.sessions.sql.dialect: {found}"


def test_the_one_renderer_rule_can_fail():
    # Each way a second renderer came about before sql/dialect.py existed.
    source = textwrap.dedent('''
        from functools import lru_cache

        def _render(d, statement):
            return statement.replace("%", "%%").replace("?", "%s") if d == "postgresql" else statement

        def _marks(n):
            return ", ".join("?" * n)

        class Things:
            def render(self, statement):
                return statement.replace("?", "%s")

            def pairs(self, n):
                return f"VALUES {', '.join(['(?, ?)'] * n)}"

        @lru_cache(maxsize=None)
        def for_dialect(d):
            return Things()
    ''')
    hits = second_renderers(source)
    assert [h.split(": ", 1)[1] for h in hits].count("placeholder text repeated with *") == 2
    assert any("def _render" in h for h in hits) and any("def _marks" in h for h in hits)
    assert any("def for_dialect" in h for h in hits)
    assert sum(".replace('?'" in h for h in hits) == 2 and any(".replace('%'" in h for h in hits)
    # What the session store does instead passes.
    assert second_renderers(textwrap.dedent('''
        from hermes_data.sessions.sql.dialect import Statements, marks, value_rows

        class Things(Statements):
            def in_list(self, n):
                return self.render(f"SELECT 1 FROM t WHERE id IN ({marks(n)})")

        for_dialect = Things.for_dialect
        LIKE_ESCAPED = "a%b".replace("%", "\\\\%")  # LIKE escaping is not rendering
    ''')) == []
