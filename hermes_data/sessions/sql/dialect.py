"""Placeholders per dialect: the one place a driver statement is rewritten for its driver.

Driver statements — sent with ``exec_driver_sql`` or on a DB-API cursor, values bound by
position — are written once, in SQLite's ``qmark`` style (``?``). psycopg, the PostgreSQL
driver, takes the ``format`` style instead: ``%s`` for a value, so a literal ``%`` (as in
``LIKE '%x'``) must be doubled. :func:`render` does that rewrite, and nothing else in the
session store does (``tests/sessions/test_sql_dialect.py`` fails when a second renderer
appears). Statements built with SQLAlchemy's ``text()`` use ``:name`` parameters and are
never rendered here: SQLAlchemy translates those itself.

A concern's statements for one dialect live on a :class:`Statements` subclass, built once
per process and dialect by :meth:`Statements.for_dialect`. A statement declared there with
:class:`driver_statement` is a Core construct (issue 32) compiled for the instance's dialect
on first access by :class:`hermes_data.statements.DriverPrepared`: the attribute is then the
compiled driver string, positional parameters in the declared order — callers keep passing
tuples, and nothing is rewritten by :func:`render`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from hermes_data.statements import DriverPrepared, Prepared

#: The dialects the session store runs on (SQLAlchemy's dialect names).
DIALECTS = ("sqlite", "postgresql")

#: Distinct driver statements whose PostgreSQL text is kept. Fixed statements are rendered
#: once per process; this bounds the IN-list variants (one per bound count) built per call.
RENDERED_CACHE_SIZE = 2048

S = TypeVar("S", bound="Statements")

_UNSUPPORTED = "the session store supports sqlite and postgresql, not {!r}"


def check_dialect(dialect: str) -> str:
    """``dialect`` itself if the session store runs on it, else ``ValueError``."""
    if dialect not in DIALECTS:
        raise ValueError(_UNSUPPORTED.format(dialect))
    return dialect


@functools.lru_cache(maxsize=RENDERED_CACHE_SIZE)
def _format_style(statement: str) -> str:
    # qmark -> format: escape the literal percent signs first, then turn each ? into %s.
    return statement.replace("%", "%%").replace("?", "%s")


def render(dialect: str, statement: str) -> str:
    """``statement``, written with ``?`` placeholders, in ``dialect``'s driver paramstyle.

    SQLite takes it unchanged; for PostgreSQL (psycopg, ``format`` style) every ``%`` is
    doubled and every ``?`` becomes ``%s``. A ``?`` is always a placeholder — statements
    carry no ``?`` inside literals, identifiers or comments. The PostgreSQL text is cached
    per statement (:data:`RENDERED_CACHE_SIZE`), so rendering a statement again costs a
    dictionary look-up; an unknown dialect raises ``ValueError``.
    """
    if dialect == "sqlite":
        return statement
    if dialect == "postgresql":
        return _format_style(statement)
    raise ValueError(_UNSUPPORTED.format(dialect))


def marks(n: int) -> str:
    """``n`` comma-separated ``?`` placeholders (``"?, ?, ?"``): an ``IN`` list or a
    ``VALUES`` row of ``n`` bound values, before :func:`render`."""
    return ", ".join("?" * n)


def value_rows(count: int, width: int) -> str:
    """``count`` parenthesised rows of ``width`` placeholders each (``"(?, ?), (?, ?)"``):
    the rows of a ``VALUES`` list, before :func:`render`."""
    return ", ".join([f"({marks(width)})"] * count)


class Statements:
    """The driver statements of one concern in one dialect.

    A subclass builds its statements in ``__init__`` (calling ``super().__init__(dialect)``
    first), writing them with ``?`` placeholders and passing each through :meth:`render`;
    builder methods for variable statements (an ``IN`` list of ``n`` values) render their
    result the same way. Callers get the instance with :meth:`for_dialect`, which builds it
    once per process and dialect.
    """

    dialect: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Each subclass gets its own C-level cache, as cheap to call as the module-level
        # lru_cache functions it replaces (for_dialect is looked up on every store call).
        setattr(cls, "for_dialect", staticmethod(functools.cache(cls)))

    def __init__(self, dialect: str) -> None:
        self.dialect = check_dialect(dialect)

    @classmethod
    def for_dialect(cls: type[S], dialect: str) -> S:
        """The instance of this class for ``dialect`` (``sqlite`` / ``postgresql``), built on
        first use and shared afterwards; an unknown dialect raises ``ValueError``."""
        return cls(dialect)  # replaced by a cached constructor on every subclass

    def render(self, statement: str) -> str:
        """``statement`` (``?`` placeholders) in this dialect's paramstyle (:func:`render`)."""
        return render(self.dialect, statement)


class driver_statement:
    """A :class:`Statements` attribute compiled from a Core construct (issue 32).

    ``build(dialect_name)`` returns the construct (built from
    :mod:`hermes_data.sessions.schema`); ``order`` names its bound parameters in the
    positional order callers pass them. On first access through an instance the construct
    is built and compiled once for that instance's dialect (``DriverPrepared``), its
    parameter order is checked against ``order`` (a mismatch raises ``ValueError`` naming
    the statement), and the compiled string is stored on the instance: later reads are a
    plain attribute look-up, and the call sites run it with ``exec_driver_sql`` as before.
    """

    def __init__(self, build: Callable[[str], Any], *order: str) -> None:
        self.build = build
        self.order = order
        self.name = "statement"
        self.prepared: Prepared | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = f"{owner.__name__}.{name}"
        self.attr = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        prepared = self.prepared
        if prepared is None:
            prepared = self.prepared = DriverPrepared.per_dialect(self.name, self.build)
        sql = prepared.positional_sql(obj.dialect, self.order)
        obj.__dict__[self.attr] = sql
        return sql
