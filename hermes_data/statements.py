"""Core statements compiled once per dialect: the one mechanism both stores run SQL through.

A :class:`Prepared` wraps a SQLAlchemy Core construct built from a store's metadata (its
``schema`` module). It is compiled lazily, once per dialect, to a SQL string plus the
positional order of its bound parameters; a call then only maps its named values to a tuple
and hands string and tuple to the driver — no per-call compilation, no cache-key walk, the
same cost as a hand-written driver statement (docs/architecture.md, "One mechanism per
job").

Dialects
    SQLite compiles with the ``qmark`` paramstyle (``?``), PostgreSQL with psycopg's
    ``format`` style (``%s``; SQLAlchemy doubles a literal ``%``), so one argument tuple
    serves a DB-API cursor, ``Connection.exec_driver_sql`` and psycopg alike. A statement
    whose spelling differs per dialect is one construct per dialect — the dialects' own
    ``insert(...).on_conflict_do_update``, ``with_for_update()``, an ``@compiles`` function —
    given to :class:`Prepared` as ``pg_stmt`` or built by :meth:`Prepared.per_dialect`; never
    twin strings. The PostgreSQL dialect is imported on first PostgreSQL use only (issue 14:
    a SQLite process never imports it).

Running
    The telemetry store runs ``p.sql`` / ``p.args(params)`` (SQLite) and ``p.pg.sql`` /
    ``p.pg.args(params)`` on its held DB-API connection. The session store runs
    :meth:`Prepared.run` on a SQLAlchemy ``Connection``: ``exec_driver_sql`` with the
    compiled string and tuple, inside the caller's transaction. Results are the driver's raw
    values (no result processors), as with the ``text()`` and driver strings it replaces.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Sequence, TypeVar

from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.sql.elements import ClauseElement



class _SQLiteCompiler(sqlite_dialect.base.SQLiteCompiler):
    """SQLite's compiler, but a ``LIMIT`` without an offset is just ``LIMIT ?``: SQLAlchemy
    appends ``OFFSET ?`` bound to 0, one more positional value than the statement needs."""

    def limit_clause(self, select: Any, **kw: Any) -> str:
        if select._offset_clause is None and select._limit_clause is not None:
            return "\n LIMIT " + self.process(select._limit_clause, **kw)
        return super().limit_clause(select, **kw)


#: SQLite with ``?`` placeholders (the sqlite3 module's and SQLAlchemy's pysqlite default).
SQLITE_DIALECT = sqlite_dialect.dialect(paramstyle="qmark")
SQLITE_DIALECT.statement_compiler = _SQLiteCompiler
_pg_dialects: dict[bool, Any] = {}


def pg_dialect(casts: bool = True) -> Any:
    """psycopg 3 with positional ``%s`` placeholders, so the same argument tuples serve both;
    with ``casts`` SQLAlchemy's bind casts (``%s::VARCHAR``), without them bare ``%s`` whose
    values psycopg types. Built on first use: a SQLite process never imports the PostgreSQL
    dialect (issue 14)."""
    d = _pg_dialects.get(casts)
    if d is None:
        from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
        from sqlalchemy.engine.interfaces import BindTyping

        d = _pg_dialects[casts] = psycopg_dialect.dialect(paramstyle="format")
        if not casts:
            d.bind_typing = BindTyping.NONE
    return d


class Compiled:
    """One statement compiled for one dialect: SQL text and positional parameter order."""

    __slots__ = ("sql", "order", "defaults")

    def __init__(self, stmt: Any, dialect: Any) -> None:
        compiled = stmt.compile(dialect=dialect)
        self.sql: str = compiled.string
        self.order: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.defaults: dict[str, Any] = dict(compiled.params)

    def args(self, params: Mapping[str, Any]) -> tuple:
        """The positional argument tuple for ``params`` (baked-in values as fallback)."""
        d = self.defaults
        return tuple(params[n] if n in params else d[n] for n in self.order)


def _is_builder(stmt: Any) -> bool:
    return callable(stmt) and not isinstance(stmt, ClauseElement)


_P = TypeVar("_P", bound="Prepared")


class Prepared:
    """A Core statement compiled once per dialect: SQL text plus positional parameter order.

    ``args(params)`` turns a mapping into the positional tuple the DBAPI wants; bind
    parameters with a value baked into the construct (``.values(status="running")``) fall
    back to that value. ``pg_stmt`` is the PostgreSQL construct where it differs (dialect
    upserts, ``RETURNING``, ``FOR UPDATE``, fragments) — or a function building it, called on
    first use, so a SQLite process never imports the PostgreSQL dialect; :attr:`pg` compiles
    it on first use.

    Compilation is lazy too (issue 14, cold start): ``sql`` / ``order`` / ``defaults`` (the
    SQLite form) are filled by the first access to any of them (an unset slot falls through
    to :meth:`__getattr__`), then read as plain attributes — the hot paths pay nothing.
    ``stmt`` may also be a function building the construct: it is called on first use of
    ``stmt`` (a process builds only the statements it runs).
    """

    __slots__ = ("name", "stmt", "sql", "order", "defaults", "_build", "_pg_stmt", "_pg",
                 "_get", "plan_per_call", "_expanded")

    #: Whether the PostgreSQL form carries SQLAlchemy's bind casts (``%s::VARCHAR``).
    pg_casts = True

    def __init__(self, name: str, stmt: Any, pg_stmt: Any = None, *,
                 plan_per_call: bool = False) -> None:
        self.name = name
        #: PostgreSQL plans this statement with each call's values, never a prepared generic
        #: plan (psycopg prepares a text run five times on a connection, and the server may
        #: then plan it once for any value: a time window's cutoff decides between the time
        #: index and a scan, which a generic plan cannot see — docs/telemetry.md §8.8).
        self.plan_per_call = plan_per_call
        if _is_builder(stmt):
            self._build = stmt  # ``stmt`` stays unset until first use
        else:
            self.stmt = stmt
        self._pg_stmt = pg_stmt
        self._pg: Compiled | None = None
        self._expanded: dict[tuple[str, int], str] = {}

    @classmethod
    def per_dialect(cls: type[_P], name: str, build: Callable[[str], Any]) -> _P:
        """A statement whose construct depends on the dialect: ``build(dialect_name)``
        (``"sqlite"`` / ``"postgresql"``) is called once per dialect, on first use."""
        return cls(name, lambda: build("sqlite"), lambda: build("postgresql"))

    def __getattr__(self, attr: str) -> Any:
        # Only unset slots get here: build the construct, or compile it for SQLite, once;
        # then they are plain attributes.
        if attr == "stmt":
            self.stmt = self._build()
            return self.stmt
        if attr not in ("sql", "order", "defaults", "_get"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        compiled = self.stmt.compile(dialect=SQLITE_DIALECT)
        self.sql = compiled.string
        self.order = tuple(compiled.positiontup or ())
        self.defaults = dict(compiled.params)
        # Fast path of args(): one C-level itemgetter when every value comes from params.
        self._get: Callable[[Mapping[str, Any]], tuple]
        if len(self.order) > 1:
            self._get = operator.itemgetter(*self.order)
        elif self.order:
            only = operator.itemgetter(self.order[0])
            self._get = lambda params: (only(params),)
        else:
            self._get = lambda params: ()
        return getattr(self, attr)

    @property
    def pg_stmt(self) -> Any:
        """The PostgreSQL construct (built on first use when given as a function)."""
        stmt = self._pg_stmt
        if stmt is None:
            return self.stmt
        if _is_builder(stmt):
            stmt = self._pg_stmt = stmt()
        return stmt

    @property
    def pg(self) -> Compiled:
        """The statement compiled for PostgreSQL (psycopg, ``%s`` placeholders)."""
        pg = self._pg
        if pg is None:
            pg = self._pg = Compiled(self.pg_stmt, pg_dialect(self.pg_casts))
        return pg

    def stmt_for(self, dialect_name: str) -> Any:
        """The Core construct to run on ``dialect_name``."""
        return self.stmt if dialect_name == "sqlite" else self.pg_stmt

    def args(self, params: Mapping[str, Any]) -> tuple:
        """The SQLite form's positional argument tuple for ``params``."""
        try:
            return self._get(params)
        except KeyError:  # some values are baked into the construct
            d = self.defaults
            return tuple(params[n] if n in params else d[n] for n in self.order)

    def sa_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` completed with the baked-in values, for running :meth:`stmt_for`
        through SQLAlchemy."""
        return {n: (params[n] if n in params else self.defaults[n]) for n in set(self.order)}

    def for_dialect(self, dialect_name: str) -> "Prepared | Compiled":
        """The compiled form for ``dialect_name``: ``.sql`` and ``.args(params)``."""
        if dialect_name == "sqlite":
            return self
        if dialect_name == "postgresql":
            return self.pg
        raise ValueError(f"statement {self.name!r}: no compiled form for dialect "
                         f"{dialect_name!r} (sqlite and postgresql only)")

    def positional_sql(self, dialect_name: str, order: tuple[str, ...]) -> str:
        """The compiled string for ``dialect_name``, for callers that bind positional tuples
        in ``order``: a construct whose parameters compile in another order raises
        ``ValueError`` naming the statement (a silent mis-binding is never possible)."""
        c = self.for_dialect(dialect_name)
        if tuple(c.order) != tuple(order):
            raise ValueError(f"{self.name} ({dialect_name}) binds {tuple(c.order)!r}, but its "
                             f"callers pass {tuple(order)!r}")
        return c.sql

    def expanded_sql(self, dialect_name: str, order: tuple[str, ...], n: int) -> str:
        """:meth:`positional_sql` for a construct with ``IN`` lists of a variable length
        ``n``: each list is an expanding parameter (``bindparam(name, expanding=True)``),
        named once in ``order`` where its ``n`` values go in the callers' tuples, and gets
        ``n`` placeholders in the compiled string. The construct is compiled once per dialect
        whatever ``n`` is (a string splice per new length, not a compilation); ``n < 1``
        raises ``ValueError`` (an empty ``IN`` list is the caller's case to skip)."""
        key = (dialect_name, n)
        sql = self._expanded.get(key)
        if sql is not None:
            return sql
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{self.name}: an IN list needs at least one value, got {n!r}")
        base = self.positional_sql(dialect_name, order)
        tokens = [t for t in (f"(__[POSTCOMPILE_{p}])" for p in order) if t in base]
        if not tokens:
            raise ValueError(f"{self.name} ({dialect_name}): no expanding IN parameter "
                             f"among {order!r}")
        mark = "?" if dialect_name == "sqlite" else "%s"
        sql = base
        for token in tokens:
            sql = sql.replace(token, "(" + ", ".join([mark] * n) + ")")
        if len(self._expanded) < 4096:  # lengths are bounded by the callers' chunk sizes
            self._expanded[key] = sql
        return sql

    def run_expanded(self, conn: Any, values: Sequence[Any],
                     params: Mapping[str, Any] = {}) -> Any:
        """:meth:`run` for a construct with expanding ``IN`` lists (:meth:`expanded_sql`):
        each list takes ``values`` (at least one), every other parameter comes from
        ``params`` (or the value baked into the construct)."""
        d = conn.dialect.name
        c = self.for_dialect(d)
        sql = self.expanded_sql(d, c.order, len(values))
        args: list[Any] = []
        for name in c.order:
            if f"(__[POSTCOMPILE_{name}])" in c.sql:
                args.extend(values)
            else:
                args.append(params[name] if name in params else c.defaults[name])
        return conn.exec_driver_sql(sql, tuple(args))

    def run(self, conn: Any, params: Mapping[str, Any] = {}) -> Any:
        """Run on the SQLAlchemy ``Connection`` ``conn`` (its own dialect's compiled string,
        positional values from ``params``, through ``exec_driver_sql``): the driver's
        ``CursorResult``."""
        c = self.for_dialect(conn.dialect.name)
        return conn.exec_driver_sql(c.sql, c.args(params))

    def runmany(self, conn: Any, rows: Sequence[Mapping[str, Any]]) -> Any:
        """:meth:`run` for each mapping of ``rows`` in one ``executemany`` (none: no call)."""
        if not rows:
            return None
        c = self.for_dialect(conn.dialect.name)
        return conn.exec_driver_sql(c.sql, [c.args(r) for r in rows])

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Prepared({self.name!r})"


class DriverPrepared(Prepared):
    """A :class:`Prepared` whose PostgreSQL form binds bare ``%s`` (no bind casts): psycopg
    types each value, exactly as for a hand-written driver statement. The session store's
    statements use it, so a converted statement sends PostgreSQL what the string it replaces
    sent."""

    __slots__ = ()
    pg_casts = False


def dialect_insert(dialect: str) -> Any:
    """The ``insert`` construct of ``dialect`` (``INSERT … ON CONFLICT`` on both): SQLite's
    or PostgreSQL's, the latter imported only when PostgreSQL runs it."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    return sqlite_dialect.insert


def upsert_statement(name: str, build: Callable[[Any], Any]) -> Prepared:
    """A :class:`Prepared` statement built by ``build(insert)`` with each dialect's own
    ``insert`` (:func:`dialect_insert`): SQLite's and PostgreSQL's construct are each
    built on first use (issue 14: importing the query modules builds no construct)."""
    return Prepared(name, lambda: build(dialect_insert("sqlite")),
                    lambda: build(dialect_insert("postgresql")))
