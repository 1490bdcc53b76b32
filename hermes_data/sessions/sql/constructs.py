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
