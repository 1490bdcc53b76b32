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


def const(value: int | str) -> ColumnElement[Any]:
    """``value`` as an inline SQL literal (an int, or a string quoted with doubled ``'``):
    only for the statement's own constants, never for caller data."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"const() takes an int or a str constant, not {value!r}")
    if isinstance(value, int):
        return sa.literal_column(str(value))
    return sa.literal_column("'" + value.replace("'", "''") + "'")


def dialect_insert(dialect: str) -> Any:
    """The ``insert`` construct of ``dialect`` (``INSERT … ON CONFLICT`` on both): SQLite's
    or PostgreSQL's, the latter imported only when PostgreSQL runs it."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def bp(name: str) -> sa.BindParameter[Any]:
    """The bound parameter ``name`` (typeless: its value goes to the driver unchanged)."""
    return sa.bindparam(name)


class instr(FunctionElement[Any]):
    """Position of ``needle`` in ``haystack`` (0: absent): ``instr(h, n)`` on SQLite,
    ``strpos(h, n)`` on PostgreSQL."""

    inherit_cache = True
    name = "instr"
    type = sa.Integer()


@compiles(instr)
def _instr(element: Any, compiler: Any, **kw: Any) -> str:
    return "instr(%s)" % compiler.process(element.clauses, **kw)


@compiles(instr, "postgresql")
def _instr_pg(element: Any, compiler: Any, **kw: Any) -> str:
    return "strpos(%s)" % compiler.process(element.clauses, **kw)


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


@compiles(trim_chars)
def _trim_chars(element: Any, compiler: Any, **kw: Any) -> str:
    return "TRIM(%s)" % compiler.process(element.clauses, **kw)


@compiles(trim_chars, "postgresql")
def _trim_chars_pg(element: Any, compiler: Any, **kw: Any) -> str:
    return "btrim(%s)" % compiler.process(element.clauses, **kw)


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


@compiles(left_chars, "postgresql")
def _left_chars_pg(element: Any, compiler: Any, **kw: Any) -> str:
    return "left(%s)" % compiler.process(element.clauses, **kw)


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


@compiles(right_chars, "postgresql")
def _right_chars_pg(element: Any, compiler: Any, **kw: Any) -> str:
    return "right(%s)" % compiler.process(element.clauses, **kw)
