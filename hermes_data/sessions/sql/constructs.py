"""Core building blocks of the session store's statements (issue 32): constants rendered
inline, and the functions spelled differently per dialect as ``@compiles`` constructs.

Statements are Core constructs built from :mod:`hermes_data.sessions.schema` and compiled
once per dialect by :class:`hermes_data.statements.Prepared`. Two rules keep the compiled
text what the hand-written statements were:

* a constant of the statement itself (``active = 1``, ``role = 'user'``) is rendered inline
  with :func:`const`, never bound: SQLite uses a partial index only when the query repeats
  its ``WHERE`` term literally, and a bound constant would cost a tuple slot per call;
* a function whose name differs per dialect is one construct here, compiled per dialect.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal

from hermes_data.statements import dialect_insert

__all__ = ["bp", "ci_like", "const", "dialect_insert", "instr", "json_marker", "left_chars",
           "module_statement", "right_chars", "sibling_table", "trim_chars", "unindexed"]


def const(value: int | str) -> ColumnElement[Any]:
    """``value`` as an inline SQL literal (an int, or a string quoted with doubled ``'``):
    only for the statement's own constants, never for caller data."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"const() takes an int or a str constant, not {value!r}")
    if isinstance(value, int):
        return sa.literal_column(str(value))
    return sa.literal_column("'" + value.replace("'", "''") + "'")


def not_hidden(kind: Any) -> ColumnElement[Any]:
    """``COALESCE(<kind>, '') <> 'hidden'`` over a ``display_kind`` column: the row is not
    hidden from search, previews and the latest-row reads (``display_kind`` NULL or any other
    value). Spelled ``<>``, as search's text filters spell it."""
    return sa.func.coalesce(kind, const("")).op("<>", precedence=5, is_comparison=True)(
        const("hidden"))


def sibling_table(alias: Any, name: str) -> Any:
    """The table ``name`` of the metadata ``alias``'s table belongs to: the shared builders
    (sql/predicates.py, sql/previews.py) reach ``messages`` / ``sessions`` through the alias
    they are given, never by importing the schema (sessions/schema.py imports the FTS DDL,
    which imports them)."""
    return alias.element.metadata.tables[name]


def bp(name: str) -> sa.BindParameter[Any]:
    """The bound parameter ``name`` (typeless: its value goes to the driver unchanged)."""
    return sa.bindparam(name)


class instr(FunctionElement[Any]):
    """Position of ``needle`` in ``haystack`` (0: absent): ``instr(h, n)`` on SQLite,
    ``strpos(h, n)`` on PostgreSQL."""

    inherit_cache = True
    name = "instr"
    type = sa.Integer()


class ci_like(ColumnElement[Any]):
    """``expr LIKE pattern`` matched case-insensitively for ASCII: SQLite's ``LIKE`` already
    is; PostgreSQL's is spelled ``ILIKE`` (SQLAlchemy's own ``ilike`` would wrap both sides in
    ``lower()`` on SQLite)."""

    inherit_cache = True
    type = sa.Boolean()
    _is_implicitly_boolean = True  # a predicate: SQLite's compiler adds no ``= 1``

    def __init__(self, expr: ColumnElement[Any], pattern: ColumnElement[Any]) -> None:
        self.expr = expr
        self.pattern = pattern

    _traverse_internals = [("expr", InternalTraversal.dp_clauseelement),
                           ("pattern", InternalTraversal.dp_clauseelement)]


@compiles(ci_like)
def _ci_like(element: ci_like, compiler: Any, **kw: Any) -> str:
    return "%s LIKE %s" % (compiler.process(element.expr, **kw),
                           compiler.process(element.pattern, **kw))


@compiles(ci_like, "postgresql")
def _ci_like_pg(element: ci_like, compiler: Any, **kw: Any) -> str:
    return "%s ILIKE %s" % (compiler.process(element.expr, **kw),
                            compiler.process(element.pattern, **kw))


class trim_chars(FunctionElement[Any]):
    """``expr`` with the characters of ``chars`` trimmed from both ends: ``TRIM(x, c)`` on
    SQLite, ``btrim(x, c)`` on PostgreSQL."""

    inherit_cache = True
    name = "trim"
    type = sa.Text()


class left_chars(FunctionElement[Any]):
    """The first ``n`` characters of ``expr``: ``substr(x, 1, n)`` on SQLite, ``left(x, n)``
    on PostgreSQL."""

    inherit_cache = True
    name = "left"
    type = sa.Text()


@compiles(left_chars)
def _left_chars(element: Any, compiler: Any, **kw: Any) -> str:
    expr, n = list(element.clauses)
    return "substr(%s, 1, %s)" % (compiler.process(expr, **kw), compiler.process(n, **kw))


class right_chars(FunctionElement[Any]):
    """The last ``n`` characters of ``expr`` (``n`` a constant): ``substr(x, -n)`` on SQLite,
    ``right(x, n)`` on PostgreSQL."""

    inherit_cache = True
    name = "right"
    type = sa.Text()


@compiles(right_chars)
def _right_chars(element: Any, compiler: Any, **kw: Any) -> str:
    expr, n = list(element.clauses)
    return "substr(%s, -%s)" % (compiler.process(expr, **kw), compiler.process(n, **kw))


def _call_as(construct: type, name: str, dialect: str | None = None) -> None:
    """Compile ``construct`` as the function call ``name(arguments…)`` — on ``dialect``, or
    by default on every dialect without its own compiler."""
    def as_call(element: Any, compiler: Any, **kw: Any) -> str:
        return "%s(%s)" % (name, compiler.process(element.clauses, **kw))

    compiles(construct, *([dialect] if dialect else []))(as_call)


# The functions whose whole difference is their name.
_call_as(instr, "instr")
_call_as(instr, "strpos", "postgresql")
_call_as(trim_chars, "TRIM")
_call_as(trim_chars, "btrim", "postgresql")
_call_as(left_chars, "left", "postgresql")
_call_as(right_chars, "right", "postgresql")


class json_marker(ColumnElement[Any]):
    """The JSON member ``key`` of the document ``expr``, NULL when the document is malformed
    (never an error): ``json_extract`` of a validated document on SQLite,
    ``hermes_json_get(doc, key)`` on PostgreSQL (created by s01_baseline). ``key`` is the
    statement's own constant, rendered inline."""

    inherit_cache = True
    type = sa.Text()

    def __init__(self, expr: ColumnElement[Any], key: str) -> None:
        if not key.replace("_", "").isalnum():
            raise ValueError(f"json_marker key {key!r}: letters, digits and '_' only")
        self.expr = expr
        self.key = key

    _traverse_internals = [("expr", InternalTraversal.dp_clauseelement),
                           ("key", InternalTraversal.dp_string)]


@compiles(json_marker)
def _json_marker(element: json_marker, compiler: Any, **kw: Any) -> str:
    doc = compiler.process(element.expr, **kw)
    return (f"json_extract(CASE WHEN json_valid({doc}) THEN {doc} ELSE '{{}}' END, "
            f"'$.{element.key}')")


@compiles(json_marker, "postgresql")
def _json_marker_pg(element: json_marker, compiler: Any, **kw: Any) -> str:
    return f"hermes_json_get({compiler.process(element.expr, **kw)}, '{element.key}')"


def module_statement(namespace: dict[str, Any], statements: Any, name: str) -> str:
    """A module-level ``__getattr__`` (PEP 562) body for a SQLite-only statement module: the
    ``driver_statement`` ``name`` of ``statements`` compiled for SQLite on first read and
    stored in the module's ``namespace``, so later reads are a plain module attribute (no
    construct is built at import, issue 14). Any other name raises ``AttributeError``."""
    if name.startswith("_") or not any(name in vars(k) for k in statements.__mro__):
        raise AttributeError(f"module {namespace.get('__name__')!r} has no attribute {name!r}")
    sql = namespace[name] = getattr(statements.for_dialect("sqlite"), name)
    return sql


class unindexed(ColumnElement[Any]):
    """``+col``: the column's value, written so SQLite's planner uses no index for the term.

    Where SQLite would otherwise pick the wrong index — the transcript page's ``+active = 1``
    keeps the ``(session_id, id)`` seek instead of the partial active-rows index; the peer
    lookup's ``+source = ?`` keeps ``idx_sessions_session_key`` on files without statistics
    instead of walking every row of the source. PostgreSQL keeps the unary plus on a numeric
    column (the plans measured with it) and takes a text column as itself (it has no unary
    plus for text)."""

    inherit_cache = True

    def __init__(self, col: ColumnElement[Any]) -> None:
        self.col = col
        self.type = col.type

    _traverse_internals = [("col", InternalTraversal.dp_clauseelement)]


@compiles(unindexed)
def _unindexed(element: unindexed, compiler: Any, **kw: Any) -> str:
    return "+" + compiler.process(element.col, **kw)


@compiles(unindexed, "postgresql")
def _unindexed_pg(element: unindexed, compiler: Any, **kw: Any) -> str:
    col = compiler.process(element.col, **kw)
    return col if isinstance(element.type, sa.String) else "+" + col
